"""The pages a CriogenSaver commit writes (migration 0021).

On SQLite each put and put_writes is a commit of its own, and what it costs beyond
the sync is the pages it changes: the ids of the ``criogen_lg_*`` tables are rowids
without ``AUTOINCREMENT`` (no row of ``sqlite_sequence`` rewritten per insert), and the
run index holds only checkpoints with a run id, which ``delete_for_runs`` still finds
through it.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from django.db import connections
from langgraph.checkpoint.base import empty_checkpoint

from criogen import Storage
from criogen.langgraph import CriogenSaver

TABLES = ("criogen_lg_checkpoint", "criogen_lg_blob", "criogen_lg_write")


@pytest.fixture(params=["sqlite", "postgres"])
def storage(request: pytest.FixtureRequest, django_db_blocker: Any) -> Any:
    url = request.getfixturevalue(f"{request.param}_url")
    with django_db_blocker.unblock():
        yield Storage(url, encryption_key=False)


def _put(saver: CriogenSaver, thread_id: str, run_id: str) -> dict[str, Any]:
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {"large": "x" * 10, "obj": {"text": "y" * 5000}}
    checkpoint["channel_versions"] = {"large": "1", "obj": "1"}
    config = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    metadata: Any = {"step": 0, "run_id": run_id} if run_id else {"step": 0}
    saved = saver.put(config, checkpoint, metadata, {"large": "1", "obj": "1"})  # type: ignore[arg-type]
    saver.put_writes(saved, [("large", "y")], "task")
    return saved  # type: ignore[return-value]


@pytest.fixture
def sqlite_storage(sqlite_url: str, django_db_blocker: Any) -> Any:
    with django_db_blocker.unblock():
        yield Storage(sqlite_url, encryption_key=False)


def test_the_ids_are_sqlite_rowids_without_a_sequence(sqlite_storage: Any) -> None:
    # SQLite only: on PostgreSQL the ids stay identity columns.
    storage = sqlite_storage
    saver = CriogenSaver(storage)
    _put(saver, f"lg-{uuid.uuid4()}", "run-1")
    with connections[storage.alias].cursor() as cursor:
        for table in TABLES:
            cursor.execute("SELECT sql FROM sqlite_master WHERE name = %s", [table])
            assert "AUTOINCREMENT" not in cursor.fetchone()[0].upper()
            cursor.execute("SELECT COUNT(*) FROM sqlite_sequence WHERE name = %s", [table])
            assert cursor.fetchone()[0] == 0
            cursor.execute(f"SELECT COUNT(*), MIN(id) FROM {table}")  # noqa: S608
            count, first = cursor.fetchone()
            assert count >= 1 and first >= 1


def test_the_run_index_holds_runs_and_delete_for_runs_uses_it(storage: Any) -> None:
    saver = CriogenSaver(storage)
    with_run, without = f"lg-{uuid.uuid4()}", f"lg-{uuid.uuid4()}"
    _put(saver, with_run, "run-1")
    _put(saver, without, "")
    connection = connections[storage.alias]
    tables = saver._tables
    rows = tables.LangGraphCheckpoint.objects.using(storage.alias)
    if connection.vendor == "sqlite":
        plan = rows.filter(run_id__in=["run-1"]).exclude(run_id="").explain()
        assert "criogen_lg_checkpoint_run_idx" in plan
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT COUNT(*) FROM criogen_lg_checkpoint "
                "INDEXED BY criogen_lg_checkpoint_run_idx WHERE NOT (run_id = '')"
            )
            assert cursor.fetchone()[0] == rows.exclude(run_id="").count()

    saver.delete_for_runs(["run-1"])

    assert not rows.filter(thread_id=with_run).exists()
    writes = tables.LangGraphWrite.objects.using(storage.alias)
    assert not writes.filter(thread_id=with_run).exists()
    assert rows.filter(thread_id=without).count() == 1
    assert writes.filter(thread_id=without).count() == 1
