"""The LangGraph checkpointer's tables (criogen.langgraph.CriogenSaver): checkpoints,
channel blobs and pending writes, each row's thread a foreign key without a database
constraint (a deleted thread takes its rows along; a saver on its own stores any id)."""

import django.db.models.deletion
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
                ('checkpoint_ns', models.CharField(blank=True, default='', max_length=255)),
                ('channel', models.CharField(max_length=255)),
                ('version', models.CharField(max_length=64)),
                ('type', models.CharField(max_length=32)),
                ('blob', models.BinaryField(null=True)),
                ('sealed', models.BooleanField(default=False)),
                ('thread', models.ForeignKey(db_constraint=False, db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='langgraph_blobs', to='criogen.thread')),
            ],
            options={
                'db_table': 'criogen_lg_blob',
                'constraints': [models.UniqueConstraint(fields=('thread', 'checkpoint_ns', 'channel', 'version'), name='criogen_lg_blob_key')],
            },
        ),
        migrations.CreateModel(
            name='LangGraphCheckpoint',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('checkpoint_ns', models.CharField(blank=True, default='', max_length=255)),
                ('checkpoint_id', models.CharField(max_length=64)),
                ('parent_checkpoint_id', models.CharField(blank=True, default='', max_length=64)),
                ('run_id', models.CharField(blank=True, default='', max_length=64)),
                ('type', models.CharField(max_length=32)),
                ('checkpoint', models.BinaryField()),
                ('sealed', models.BooleanField(default=False)),
                ('created_at', models.DateTimeField(default=django.utils.timezone.now)),
                ('thread', models.ForeignKey(db_constraint=False, db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='langgraph_checkpoints', to='criogen.thread')),
            ],
            options={
                'db_table': 'criogen_lg_checkpoint',
                'indexes': [models.Index(fields=['run_id'], name='criogen_lg_checkpoint_run_idx')],
                'constraints': [models.UniqueConstraint(fields=('thread', 'checkpoint_ns', 'checkpoint_id'), name='criogen_lg_checkpoint_key')],
            },
        ),
        migrations.CreateModel(
            name='LangGraphWrite',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('checkpoint_ns', models.CharField(blank=True, default='', max_length=255)),
                ('checkpoint_id', models.CharField(max_length=64)),
                ('task_id', models.CharField(max_length=255)),
                ('task_path', models.TextField(blank=True, default='')),
                ('idx', models.IntegerField()),
                ('channel', models.CharField(max_length=255)),
                ('type', models.CharField(max_length=32)),
                ('blob', models.BinaryField()),
                ('sealed', models.BooleanField(default=False)),
                ('thread', models.ForeignKey(db_constraint=False, db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='langgraph_writes', to='criogen.thread')),
            ],
            options={
                'db_table': 'criogen_lg_write',
                'constraints': [models.UniqueConstraint(fields=('thread', 'checkpoint_ns', 'checkpoint_id', 'task_id', 'idx'), name='criogen_lg_write_key')],
            },
        ),
    ]
