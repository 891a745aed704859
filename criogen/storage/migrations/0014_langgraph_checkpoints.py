"""The LangGraph checkpointer's tables (criogen.langgraph.CriogenSaver): checkpoints,
channel blobs and pending writes."""

import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('criogen', '0013_tokens_and_crons_from_api'),
    ]

    operations = [
        migrations.CreateModel(
            name='LangGraphBlob',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('thread_id', models.CharField(max_length=255)),
                ('checkpoint_ns', models.CharField(blank=True, default='', max_length=255)),
                ('channel', models.CharField(max_length=255)),
                ('version', models.CharField(max_length=64)),
                ('type', models.CharField(max_length=32)),
                ('blob', models.BinaryField(null=True)),
                ('sealed', models.BooleanField(default=False)),
            ],
            options={
                'db_table': 'criogen_lg_blob',
                'constraints': [models.UniqueConstraint(fields=('thread_id', 'checkpoint_ns', 'channel', 'version'), name='criogen_lg_blob_key')],
            },
        ),
        migrations.CreateModel(
            name='LangGraphCheckpoint',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('thread_id', models.CharField(max_length=255)),
                ('checkpoint_ns', models.CharField(blank=True, default='', max_length=255)),
                ('checkpoint_id', models.CharField(max_length=64)),
                ('parent_checkpoint_id', models.CharField(blank=True, default='', max_length=64)),
                ('run_id', models.CharField(blank=True, default='', max_length=64)),
                ('type', models.CharField(max_length=32)),
                ('checkpoint', models.BinaryField()),
                ('sealed', models.BooleanField(default=False)),
                ('created_at', models.DateTimeField(default=django.utils.timezone.now)),
            ],
            options={
                'db_table': 'criogen_lg_checkpoint',
                'indexes': [models.Index(fields=['run_id'], name='criogen_lg_checkpoint_run_idx')],
                'constraints': [models.UniqueConstraint(fields=('thread_id', 'checkpoint_ns', 'checkpoint_id'), name='criogen_lg_checkpoint_key')],
            },
        ),
        migrations.CreateModel(
            name='LangGraphWrite',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('thread_id', models.CharField(max_length=255)),
                ('checkpoint_ns', models.CharField(blank=True, default='', max_length=255)),
                ('checkpoint_id', models.CharField(max_length=64)),
                ('task_id', models.CharField(max_length=255)),
                ('task_path', models.TextField(blank=True, default='')),
                ('idx', models.IntegerField()),
                ('channel', models.CharField(max_length=255)),
                ('type', models.CharField(max_length=32)),
                ('blob', models.BinaryField()),
                ('sealed', models.BooleanField(default=False)),
            ],
            options={
                'db_table': 'criogen_lg_write',
                'constraints': [models.UniqueConstraint(fields=('thread_id', 'checkpoint_ns', 'checkpoint_id', 'task_id', 'idx'), name='criogen_lg_write_key')],
            },
        ),
    ]
