"""Run input, command, metadata, kwargs and error become sealed JSON text (encrypted at
rest when ``CRIOGEN_ENCRYPTION_KEY`` is set). Existing rows keep their JSON text, which
reads back unchanged with or without a key."""

from __future__ import annotations

from django.db import migrations

import criogen.storage.models.runs


class Migration(migrations.Migration):
    dependencies = [
        ("criogen", "0004_deadlines"),
    ]

    operations = [
        migrations.AlterField(
            model_name="run",
            name="command",
            field=criogen.storage.models.runs.SealedJSONField(blank=True, null=True),
        ),
        migrations.AlterField(
            model_name="run",
            name="error",
            field=criogen.storage.models.runs.SealedJSONField(blank=True, null=True),
        ),
        migrations.AlterField(
            model_name="run",
            name="input",
            field=criogen.storage.models.runs.SealedJSONField(blank=True, null=True),
        ),
        migrations.AlterField(
            model_name="run",
            name="kwargs",
            field=criogen.storage.models.runs.SealedJSONField(
                blank=True, default=dict, help_text="config, context, stream_mode, webhook, …"
            ),
        ),
        migrations.AlterField(
            model_name="run",
            name="metadata",
            field=criogen.storage.models.runs.SealedJSONField(blank=True, default=dict),
        ),
    ]
