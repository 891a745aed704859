"""Delayed runs (after_seconds): the time before which no worker claims a run."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('criogen', '0016_claims'),
    ]

    operations = [
        migrations.AddField(
            model_name='run',
            name='not_before',
            field=models.DateTimeField(blank=True, help_text='a delayed run (after_seconds): no worker claims it before this time', null=True),
        ),
    ]
