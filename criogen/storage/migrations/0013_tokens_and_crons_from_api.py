"""ApiToken and Cron, once models of the ``api`` app, become the core's.

In the project the tables were made by the api app's migrations 0001-0003 and keep
their names (``api_apitoken``, ``api_cron``); api 0004 drops the models from that app's
state first, and this migration changes no table. Where the api app is not installed
(a plain script's ``Storage("sqlite://…")``), nothing made the tables: this migration
creates them, with the same names and columns. The content types are renamed (``api``
-> ``criogen``) so that the permissions and admin log entries attached to them follow
the models.
"""

from __future__ import annotations

import uuid
from typing import Any

import django.db.models.deletion
import django.utils.timezone
from django.apps import apps as installed
from django.conf import settings
from django.db import migrations, models

import criogen.storage.models.crons

MOVED = ("apitoken", "cron")

# The api app made the tables, when it is installed (it is in the project).
WITH_API = installed.is_installed("api")


def _relabel(apps: Any, schema_editor: Any, source: str, target: str) -> None:
    ContentType = apps.get_model("contenttypes", "ContentType")
    db = schema_editor.connection.alias
    types = ContentType.objects.using(db)
    for model in MOVED:
        if types.filter(app_label=target, model=model).exists():
            continue  # made already (e.g. by a post_migrate): keep it
        types.filter(app_label=source, model=model).update(app_label=target)


def relabel_forward(apps: Any, schema_editor: Any) -> None:
    _relabel(apps, schema_editor, "api", "criogen")


def relabel_backward(apps: Any, schema_editor: Any) -> None:
    _relabel(apps, schema_editor, "criogen", "api")


def _tables(schema_editor: Any) -> set[str]:
    return set(schema_editor.connection.introspection.table_names())


def create_missing_tables(apps: Any, schema_editor: Any) -> None:
    tables = _tables(schema_editor)
    for name in ("ApiToken", "Cron"):
        model = apps.get_model("criogen", name)
        if model._meta.db_table not in tables:
            schema_editor.create_model(model)


def drop_created_tables(apps: Any, schema_editor: Any) -> None:
    if WITH_API:
        return  # the api app's tables: its own migrations drop them
    tables = _tables(schema_editor)
    for name in ("Cron", "ApiToken"):
        model = apps.get_model("criogen", name)
        if model._meta.db_table in tables:
            schema_editor.delete_model(model)


class Migration(migrations.Migration):

    dependencies = [
        ('criogen', '0012_run_hand_backs'),
        ('contenttypes', '0002_remove_content_type_name'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ] + ([('api', '0004_move_tokens_and_crons_to_core')] if WITH_API else [])

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name='ApiToken',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('name', models.CharField(blank=True, default='', max_length=100)),
                        ('token_hash', models.CharField(editable=False, max_length=64, unique=True)),
                        ('prefix', models.CharField(editable=False, help_text="The token's first characters, to tell it apart.", max_length=12)),
                        ('created', models.DateTimeField(default=django.utils.timezone.now)),
                        ('last_used', models.DateTimeField(blank=True, null=True)),
                        ('expires_at', models.DateTimeField(blank=True, help_text='From this time on the token is refused (401 token_expired). Empty: never.', null=True)),
                        ('user', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='api_tokens', to=settings.AUTH_USER_MODEL)),
                    ],
                    options={
                        'verbose_name': 'API token',
                        'db_table': 'api_apitoken',
                    },
                ),
                migrations.CreateModel(
                    name='Cron',
                    fields=[
                        ('cron_id', models.UUIDField(default=uuid.uuid4, editable=False, primary_key=True, serialize=False)),
                        ('assistant_id', models.CharField(help_text="The assistant's UUID.", max_length=64)),
                        ('schedule', models.CharField(help_text='5-field cron expression.', max_length=255)),
                        ('timezone', models.CharField(default='UTC', max_length=64)),
                        ('payload', models.JSONField(blank=True, default=dict)),
                        ('metadata', models.JSONField(blank=True, default=dict)),
                        ('on_run_completed', models.CharField(default='delete', help_text='Stateless runs: delete or keep their thread.', max_length=8)),
                        ('end_time', models.DateTimeField(blank=True, null=True)),
                        ('enabled', models.BooleanField(default=True)),
                        ('next_run_date', models.DateTimeField(blank=True, db_index=True, null=True)),
                        ('created_at', models.DateTimeField(default=criogen.storage.models.crons._now)),
                        ('updated_at', models.DateTimeField(default=criogen.storage.models.crons._now)),
                        ('thread', models.ForeignKey(blank=True, help_text='Empty: each run is stateless (a thread of its own).', null=True, on_delete=django.db.models.deletion.CASCADE, related_name='crons', to='criogen.thread')),
                        ('user', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.CASCADE, related_name='criogen_crons', to=settings.AUTH_USER_MODEL)),
                    ],
                    options={
                        'db_table': 'api_cron',
                        'ordering': ['-created_at'],
                    },
                ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(create_missing_tables, drop_created_tables),
        migrations.RunPython(relabel_forward, relabel_backward, elidable=True),
    ]
