"""The inbox filtered by assistant counts and lists the suspended threads of one
assistant: two small partial indexes (suspended threads only) on ``metadata -> graph_id``
and ``metadata -> assistant_id`` (``bench/NOTES.md``, "The inbox")."""

import django.db.models.fields.json
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('criogen', '0007_list_indexes_end_with_id'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddIndex(
            model_name='thread',
            index=models.Index(django.db.models.fields.json.KeyTransform('graph_id', 'metadata'), condition=models.Q(('head_status', 'suspended')), name='criogen_thread_wait_graph_idx'),
        ),
        migrations.AddIndex(
            model_name='thread',
            index=models.Index(django.db.models.fields.json.KeyTransform('assistant_id', 'metadata'), condition=models.Q(('head_status', 'suspended')), name='criogen_thread_wait_asst_idx'),
        ),
    ]
