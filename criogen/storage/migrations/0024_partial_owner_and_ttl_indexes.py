# Each thread row costs an entry in every index of criogen_thread, on each insert and
# (for the indexes with updated_at) on each head update that moves updated_at. The
# owner's list indexes and the TTL sweep's index now hold only the rows their queries
# can match: owned threads (a query by owner implies owner_id IS NOT NULL, and both
# databases use a partial index for it) and threads with a time to live. A thread a
# script or a worker makes (no owner, no ttl) writes three index entries fewer.
#
# On PostgreSQL the varchar_pattern_ops twin Django adds for LIKE 'prefix%' on the
# thread's id goes too, as 0020 did for the checkpoint's: the lists' searches by id
# are ILIKE '%text%', which no B-tree serves.
#
# expires_at's own index is dropped by name instead of by AlterField, which on SQLite
# would rebuild the whole table.

from __future__ import annotations

from django.conf import settings
from django.db import migrations, models

_TABLE = "criogen_thread"


def _old_expires_index(schema_editor) -> str:
    return schema_editor._create_index_name(_TABLE, ["expires_at"], suffix="")


def _drop_old_indexes(apps, schema_editor):
    schema_editor.execute(
        f"DROP INDEX IF EXISTS {schema_editor.quote_name(_old_expires_index(schema_editor))}"
    )
    if schema_editor.connection.vendor == "postgresql":
        like = schema_editor._create_index_name(_TABLE, ["id"], suffix="_like")
        schema_editor.execute(f"DROP INDEX IF EXISTS {schema_editor.quote_name(like)}")


def _create_old_indexes(apps, schema_editor):
    model = apps.get_model("criogen", "Thread")
    name = schema_editor.quote_name(_old_expires_index(schema_editor))
    schema_editor.execute(f"CREATE INDEX {name} ON {_TABLE} (expires_at)")
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(
            schema_editor._create_like_index_sql(model, model._meta.get_field("id"))
        )


class Migration(migrations.Migration):
    dependencies = [
        ("criogen", "0023_value_rowid"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.RemoveIndex(
            model_name="thread",
            name="criogen_thread_owner_new_idx",
        ),
        migrations.RemoveIndex(
            model_name="thread",
            name="criogen_thread_owner_upd_idx",
        ),
        migrations.RemoveIndex(
            model_name="thread",
            name="criogen_thread_owner_wait_idx",
        ),
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="thread",
                    name="expires_at",
                    field=models.DateTimeField(blank=True, null=True),
                ),
            ],
            database_operations=[
                migrations.RunPython(_drop_old_indexes, _create_old_indexes, elidable=True),
            ],
        ),
        migrations.AddIndex(
            model_name="thread",
            index=models.Index(
                condition=models.Q(("owner__isnull", False)),
                fields=["owner", "created_at", "id"],
                name="criogen_thread_owner_new_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="thread",
            index=models.Index(
                condition=models.Q(("owner__isnull", False)),
                fields=["owner", "updated_at", "id"],
                name="criogen_thread_owner_upd_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="thread",
            index=models.Index(
                condition=models.Q(
                    ("head_status__in", ["suspended", "failed"]), ("owner__isnull", False)
                ),
                fields=["owner", "head_status", "created_at", "id"],
                name="criogen_thread_owner_wait_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="thread",
            index=models.Index(
                condition=models.Q(("expires_at__isnull", False)),
                fields=["expires_at"],
                name="criogen_thread_expires_idx",
            ),
        ),
    ]
