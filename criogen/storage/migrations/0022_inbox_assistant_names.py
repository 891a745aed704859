# The inbox's assistant filter lists the names of the assistants its suspended threads
# run: a thread's graph_id, or its assistant_id when the graph_id is absent or empty.
# On PostgreSQL a partial index (suspended threads only) on that name lets the list be
# read as a walk of the index's distinct values, a few probes, instead of a scan of the
# oldest 1,000 suspended threads (2.3 ms of a 20 ms inbox page among 1,000,000 threads;
# bench/NOTES.md). The expression is the one criogen/selectors/inbox.py queries with.
# SQLite keeps the scan: an embedded database holds few waiting threads.

from django.db import migrations

INDEX = "criogen_thread_wait_name_idx"
NAME = (
    "(CASE WHEN metadata -> 'graph_id' IS NULL"
    " OR metadata -> 'graph_id' IN ('null', '\"\"', 'false', '0', '[]', '{}')"
    " THEN metadata -> 'assistant_id' ELSE metadata -> 'graph_id' END)"
)


def _create(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(
        f"CREATE INDEX IF NOT EXISTS {INDEX} ON criogen_thread ({NAME})"
        " WHERE head_status = 'suspended'"
    )


def _drop(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(f"DROP INDEX IF EXISTS {INDEX}")


class Migration(migrations.Migration):
    dependencies = [
        ("criogen", "0021_langgraph_rowids_and_run_index"),
    ]

    operations = [
        migrations.RunPython(_create, _drop, elidable=False),
    ]
