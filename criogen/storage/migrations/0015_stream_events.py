"""The event log of resumable streams (stream_resumable: true): one row per SSE event."""

import criogen.storage.models.streams
import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('criogen', '0014_langgraph_checkpoints'),
    ]

    operations = [
        migrations.CreateModel(
            name='StreamEvent',
            fields=[
                ('id', models.BigAutoField(primary_key=True, serialize=False)),
                ('run_id', models.UUIDField(help_text='the run whose stream sent it')),
                ('thread_id', models.CharField(max_length=255)),
                ('seq', models.PositiveIntegerField(help_text='the SSE id: 1, 2, 3… per run, no gaps')),
                ('version', models.IntegerField(help_text="the thread version the event comes from (the metadata event: the version before the run's first checkpoint)")),
                ('mode', models.CharField(blank=True, default='', help_text="its stream mode; '' for metadata, error and end, which every replay sends", max_length=32)),
                ('event', models.CharField(max_length=64)),
                ('data', criogen.storage.models.streams.SealedTextField(help_text="the event's data line (JSON)")),
                ('created_at', models.DateTimeField(default=django.utils.timezone.now)),
            ],
            options={
                'db_table': 'criogen_stream_event',
                'indexes': [models.Index(fields=['seq', 'created_at'], name='stream_event_first_idx')],
                'constraints': [models.UniqueConstraint(fields=('run_id', 'seq'), name='stream_event_run_seq')],
            },
        ),
    ]
