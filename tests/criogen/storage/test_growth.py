"""Storage does not grow quadratically with a thread's length, and reads stay cheap.

A thread whose ``steps`` list grows by one item per step: the bytes stored for the
checkpoint at step 500 are of the same order as at step 10 (an unchanged key is not
stored again; an appended key stores only its new items), and reading the state at
any checkpoint is at most two queries.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connections
from django.test.utils import CaptureQueriesContext

from criogen import END, START, Storage, Workflow
from criogen.storage.models import Thread
from criogen.storage.orm import OrmStorage

STEPS = 500
DOCUMENT = "lorem ipsum " * 400  # ~5 kB that no step changes


@pytest.fixture(params=["sqlite", "postgres"])
def orm_storage(request: pytest.FixtureRequest, django_db_blocker: Any) -> Iterator[OrmStorage]:
    """The SQL backends, whose tables can be measured."""
    url = str(request.getfixturevalue(f"{request.param}_url"))
    with django_db_blocker.unblock():
        storage = Storage(url)
        assert isinstance(storage, OrmStorage)
        yield storage


def growing_workflow() -> Workflow:
    """One node that appends one item to ``steps`` per step, ``STEPS`` times."""

    def tick(state: dict[str, Any]) -> dict[str, Any]:
        n = len(state.get("steps", [])) + 1
        return {"steps": [{"step": n, "note": f"step number {n}"}], "count": n}

    wf = Workflow(reducers={"steps": "append"})
    wf.add_node("tick", tick)
    wf.add_edge(START, "tick")
    wf.add_conditional_edges("tick", lambda s: END if s["count"] >= STEPS else "tick")
    return wf


def stored_bytes(storage: OrmStorage, thread_id: str, version: int) -> int:
    """Octets of the checkpoint's body plus those of the value rows it wrote."""
    size = "octet_length({})" if storage.vendor == "postgresql" else "length(CAST({} AS BLOB))"
    with connections[storage.alias].cursor() as cur:
        cur.execute(
            f"SELECT {size.format('body')} FROM criogen_checkpoint"  # noqa: S608
            " WHERE thread_id = %s AND version = %s",
            [thread_id, version],
        )
        (body,) = cur.fetchone()
        cur.execute(
            f"SELECT coalesce(sum({size.format('data')}), 0) FROM criogen_value"  # noqa: S608
            " WHERE thread_id = %s AND version = %s",
            [thread_id, version],
        )
        (values,) = cur.fetchone()
    return int(body) + int(values)


@pytest.fixture
def long_thread(orm_storage: OrmStorage, thread_id: str) -> str:
    app = growing_workflow().compile(storage=orm_storage, durability="async", max_steps=STEPS + 5)
    result = app.thread(thread_id).run({"document": DOCUMENT})
    assert result.checkpoint.version == STEPS + 1  # the input, then one per step
    return thread_id


def test_bytes_per_checkpoint_stay_flat_as_the_thread_grows(
    orm_storage: OrmStorage, long_thread: str
) -> None:
    # Version k + 1 is the checkpoint written after step k.
    at_10 = stored_bytes(orm_storage, long_thread, 11)
    at_500 = stored_bytes(orm_storage, long_thread, STEPS + 1)
    first = stored_bytes(orm_storage, long_thread, 1)

    assert at_10 <= at_500 <= 2 * at_10, (at_10, at_500)
    assert at_500 < 1000  # the 5 kB document is not stored again
    assert first > len(DOCUMENT)  # it was stored once, with the input


def test_reading_the_state_at_any_checkpoint_takes_at_most_two_queries(
    orm_storage: OrmStorage, long_thread: str
) -> None:
    history = {cp.version: cp.id for cp in orm_storage.history(long_thread)}
    connection = connections[orm_storage.alias]

    for version in (1, 2, 11, 250, STEPS + 1):
        with CaptureQueriesContext(connection) as queries:
            cp = orm_storage.get_checkpoint(long_thread, history[version])
        assert len(queries) <= 2, [q["sql"] for q in queries]
        assert len(cp.state.get("steps", [])) == version - 1
        assert cp.state["document"] == DOCUMENT

    with CaptureQueriesContext(connection) as queries:
        head = orm_storage.head(long_thread)
    assert len(queries) <= 2
    assert head is not None
    assert head.state["steps"][-1] == {"step": STEPS, "note": f"step number {STEPS}"}
    assert [item["step"] for item in head.state["steps"]] == list(range(1, STEPS + 1))


def test_the_state_read_uses_only_index_searches_even_with_table_statistics(
    orm_storage: OrmStorage, long_thread: str
) -> None:
    # Statistics make planners change their minds (a recursive query over the values
    # table turned into full scans once ANALYZE had run): in a table where this thread
    # is a small part, as in production, every statement of a read must be an index
    # search. (When the thread is most of a small table, a scan is the right plan.)
    connection = connections[orm_storage.alias]
    filler = f"filler-{long_thread}"
    Thread.objects.using(orm_storage.alias).create(id=filler)
    with connection.cursor() as cur:
        cur.execute(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 20000)"
            " INSERT INTO criogen_value (thread_id, state_key, version, kind, prev, data)"
            " SELECT %s, 'steps', i, 's', NULL, '[]' FROM n",
            [filler],
        )
        cur.execute(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 20000)"
            " INSERT INTO criogen_checkpoint (id, thread_id, version, run_id, source, status,"
            " parent_id, created_at, body)"
            " SELECT %s || i, %s, i, NULL, 'step', 'in_progress', NULL, CURRENT_TIMESTAMP, '{}'"
            " FROM n",
            [uuid.uuid4().hex[:12] + "-", filler],
        )
        cur.execute("ANALYZE")
    with CaptureQueriesContext(connection) as queries:
        assert orm_storage.head(long_thread) is not None
    for query in queries:
        with connection.cursor() as cur:
            if orm_storage.vendor == "postgresql":
                cur.execute("SET enable_seqscan = on")
                cur.execute("EXPLAIN " + query["sql"])
                plan = "\n".join(row[0] for row in cur.fetchall())
                assert "Seq Scan" not in plan, plan
            else:
                cur.execute("EXPLAIN QUERY PLAN " + query["sql"])
                plan = "\n".join(str(row[-1]) for row in cur.fetchall())
                assert not any(line.startswith("SCAN") for line in plan.splitlines()), plan


def test_heads_reads_many_threads_as_head_reads_each(storage: Storage) -> None:
    """``heads()`` (two queries per 100 threads on SQL) returns exactly what ``head()``
    returns for each thread: appended lists, forks, and no entry for a thread without
    checkpoints."""
    wf = Workflow(reducers={"steps": "append"})
    wf.add_node("tick", lambda s: {"steps": [len(s.get("steps", []))], "n": s.get("n", 0) + 1})
    wf.add_edge(START, "tick")
    wf.add_conditional_edges("tick", lambda s: END if s["n"] % 3 == 0 else "tick")
    app = wf.compile(storage=storage, durability="sync")
    ids = [f"heads-{uuid.uuid4().hex[:8]}-{i}" for i in range(130)]  # two chunks
    for i, tid in enumerate(ids[:-1]):
        thread = app.thread(tid)
        thread.run({"n": 0, "tag": i})
        if i % 4 == 0:
            thread.run({"tag": -i})  # a second turn: the list grows on
        if i % 5 == 0:
            thread.rewind(thread.history()[-2].id)  # a fork head
    storage.acquire(ids[-1], "lease", seconds=30)  # a thread with no checkpoint yet
    heads = storage.heads(ids)
    assert set(heads) == set(ids[:-1])
    for tid in ids[:-1]:
        assert heads[tid] == storage.head(tid), tid
