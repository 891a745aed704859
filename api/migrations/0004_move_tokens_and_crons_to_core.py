"""ApiToken and Cron move to the ``criogen`` app (criogen 0012 takes them over).

State only: the tables ``api_apitoken`` and ``api_cron`` stay as they are, under
their names, and the ``criogen`` app's models point at them (``Meta.db_table``).
"""

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('api', '0003_apitoken_expires_at'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.DeleteModel(name='Cron'),
                migrations.DeleteModel(name='ApiToken'),
            ],
            database_operations=[],
        ),
    ]
