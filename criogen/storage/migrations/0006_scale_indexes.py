"""Indexes for search, status filters and the inbox over millions of threads (see
``bench/NOTES.md``, "Scale"). The GIN index on ``metadata`` exists on PostgreSQL
only."""

import django.db.models
from django.db import migrations

import criogen.storage.models.threads


class Migration(migrations.Migration):
    dependencies = [
        ("criogen", "0005_encrypted_run_fields"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="thread",
            index=django.db.models.Index(fields=["created_at"], name="criogen_thread_created_idx"),
        ),
        migrations.AddIndex(
            model_name="thread",
            index=django.db.models.Index(
                fields=["owner", "created_at"], name="criogen_thread_owner_new_idx"
            ),
        ),
        migrations.AddIndex(
            model_name="thread",
            index=django.db.models.Index(
                fields=["owner", "updated_at"], name="criogen_thread_owner_upd_idx"
            ),
        ),
        migrations.AddIndex(
            model_name="thread",
            index=django.db.models.Index(
                condition=django.db.models.Q(head_status__in=["suspended", "failed"]),
                fields=["owner", "head_status", "created_at"],
                name="criogen_thread_owner_wait_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="thread",
            index=django.db.models.Index(
                condition=django.db.models.Q(lease_id__isnull=False),
                fields=["lease_expires"],
                name="criogen_thread_leased_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="thread",
            index=criogen.storage.models.threads.PostgresGinIndex(
                fields=["metadata"], name="criogen_thread_meta_gin", opclasses=["jsonb_path_ops"]
            ),
        ),
    ]
