"""The write path's round trips: the lease travels with the checkpoint statements.

A run learns the head from the statement that takes its lease and gives the lease back
in the transaction of its last checkpoint; the lease stays real in between (another
caller sees the live run) and the thread row's compare-and-set stays the guard.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connections, transaction

from criogen import START, Storage, Workflow
from criogen.engine.active_run import ActiveRun
from criogen.engine.errors import ThreadBusy
from criogen.engine.state import apply_update


def three_steps(seen: list[Any], storage: Storage, thread_id: str, probe: Any = None) -> Workflow:
    """START -> a -> b -> c; ``b`` records what another caller sees of the thread
    (``probe(thread_id)``, by default its ``thread_info``)."""

    def b(state: dict[str, Any]) -> dict[str, Any]:
        seen.append((probe or storage.thread_info)(thread_id))
        return {"b": 1}

    wf = Workflow()
    wf.add_node("a", lambda s: {"a": 1})
    wf.add_node("b", b)
    wf.add_node("c", lambda s: {"c": 1})
    wf.add_edge(START, "a").add_edge("a", "b").add_edge("b", "c")
    return wf


@pytest.mark.parametrize("durability", ["sync", "async", "exit"])
def test_a_run_is_live_while_it_works_and_gives_the_thread_back_in_its_last_write(
    storage: Storage, thread_id: str, durability: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[Any] = []
    releases: list[str] = []
    release = storage.release
    monkeypatch.setattr(
        storage, "release", lambda tid, lid: (releases.append(lid), release(tid, lid))[-1]
    )
    app = three_steps(seen, storage, thread_id).compile(storage=storage, durability=durability)
    result = app.thread(thread_id).run({"x": 1})

    assert result.state == {"x": 1, "a": 1, "b": 1, "c": 1}
    (during,) = seen
    assert during is not None and during.lease_id is not None  # a live run, seen from outside
    after = storage.thread_info(thread_id)
    assert after is not None and after.lease_id is None
    assert after.head_version == (4 if durability != "exit" else 1)
    if storage.url != "memory://":
        # The SQL backends clear the lease in the last write: no release statement.
        assert releases == []


def test_a_run_that_writes_on_after_its_last_checkpoint_takes_the_lease_again(
    storage: Storage, thread_id: str
) -> None:
    with ActiveRun(storage, thread_id, durability="sync") as run:
        state, delta = apply_update({}, {"n": 1}, {}, origin="test")
        run.write(source="input", status="completed", state=state, delta=delta, final=True)
        info = storage.thread_info(thread_id)
        assert info is not None and info.lease_id is None
        state, delta = apply_update(state, {"n": 2}, {}, origin="test")
        run.write(source="loop", status="in_progress", state=state, delta=delta)
        info = storage.thread_info(thread_id)
        assert info is not None and info.lease_id == run.run_id
        with pytest.raises(ThreadBusy):
            ActiveRun(storage, thread_id, on_busy="fail").open()
    info = storage.thread_info(thread_id)
    assert info is not None and info.lease_id is None and info.head_version == 2
    head = storage.head(thread_id)
    assert head is not None and head.state == {"n": 2}


def test_taking_the_lease_also_tells_the_head(storage: Storage, thread_id: str) -> None:
    assert storage.acquire_head(thread_id, "run-1", seconds=30) == (True, None)
    with ActiveRun(storage, thread_id, run_id="run-1", durability="sync") as run:
        state, delta = apply_update({}, {"n": 1}, {}, origin="test")
        run.write(source="input", status="completed", state=state, delta=delta, final=True)
    taken, head = storage.acquire_head(thread_id, "run-2", seconds=30)
    assert taken and head is not None and head.version == 1 and head.state == {"n": 1}
    assert storage.acquire_head(thread_id, "run-3", seconds=30) == (False, None)
    storage.release(thread_id, "run-2")


def test_the_last_write_refuses_a_run_that_lost_its_lease(storage: Storage, thread_id: str) -> None:
    from criogen.engine.errors import LeaseLost

    run = ActiveRun(storage, thread_id, durability="sync", lease_seconds=30)
    run.open()
    try:
        storage.release(thread_id, run.run_id)  # as if it had expired…
        assert storage.acquire(thread_id, "usurper", seconds=30)  # …and been taken over
        state, delta = apply_update({}, {"n": 1}, {}, origin="test")
        with pytest.raises(LeaseLost):
            run.write(source="input", status="completed", state=state, delta=delta, final=True)
        info = storage.thread_info(thread_id)
        assert info is not None and info.lease_id == "usurper" and info.head_version == 0
    finally:
        run.close(flush=False, raise_errors=False)
        storage.release(thread_id, "usurper")


@pytest.mark.parametrize("storage_url", ["sqlite", "postgres"], indirect=True)
def test_a_run_inside_an_outer_transaction_rolls_back_with_it(
    storage: Storage, thread_id: str
) -> None:
    alias = storage.alias  # type: ignore[attr-defined]
    app = three_steps([], storage, thread_id).compile(storage=storage, durability="sync")
    with pytest.raises(RuntimeError), transaction.atomic(using=alias):
        app.thread(thread_id).run({"x": 1})
        assert storage.thread_info(thread_id).head_version == 4  # type: ignore[union-attr]
        raise RuntimeError("roll it all back")
    assert storage.thread_info(thread_id) is None
    assert app.thread(thread_id).run({"x": 2}).state["c"] == 1


@pytest.mark.parametrize("storage_url", ["postgres"], indirect=True)
def test_the_checkpoint_statements_are_prepared_on_postgres(
    storage: Storage, thread_id: str
) -> None:
    app = three_steps([], storage, thread_id).compile(storage=storage, durability="sync")
    app.thread(thread_id).run({"x": 1})
    with connections[storage.alias].cursor() as cur:  # type: ignore[attr-defined]
        cur.execute("SELECT statement FROM pg_prepared_statements")
        prepared = [row[0] for row in cur.fetchall()]
    assert any("done AS (INSERT INTO criogen_thread" in s for s in prepared), prepared
    assert any(s.startswith("WITH head AS (UPDATE criogen_thread") for s in prepared)


def _commit_setting(storage: Storage) -> Any:
    with connections[storage.alias].cursor() as cur:  # type: ignore[attr-defined]
        if storage.vendor == "postgresql":  # type: ignore[attr-defined]
            cur.execute("SHOW synchronous_commit")
        else:
            cur.execute("PRAGMA synchronous")
        return cur.fetchone()[0]


@pytest.mark.parametrize("storage_url", ["sqlite", "postgres"], indirect=True)
def test_lease_statements_relax_only_their_own_commit(storage: Storage, thread_id: str) -> None:
    # The lease's commit skips the flush; the connection's setting, which every
    # checkpoint write commits under, must come back unchanged after each statement.
    durable = _commit_setting(storage)
    assert durable in ("on", 2)
    assert storage.acquire(thread_id, "run-1", seconds=30)
    assert _commit_setting(storage) == durable
    assert storage.renew(thread_id, "run-1", seconds=30)
    assert _commit_setting(storage) == durable
    storage.release(thread_id, "run-1")
    assert _commit_setting(storage) == durable
    assert storage.thread_info(thread_id).lease_id is None  # type: ignore[union-attr]


@pytest.mark.parametrize("storage_url", ["sqlite", "postgres"], indirect=True)
def test_a_lease_taken_in_a_callers_transaction_commits_as_that_transaction_does(
    storage: Storage, thread_id: str
) -> None:
    alias = storage.alias  # type: ignore[attr-defined]
    durable = _commit_setting(storage)
    with transaction.atomic(using=alias):
        assert storage.acquire(thread_id, "run-1", seconds=30)
        assert _commit_setting(storage) == durable
    assert storage.thread_info(thread_id).lease_id == "run-1"  # type: ignore[union-attr]


@pytest.mark.parametrize("storage_url", ["sqlite", "postgres"], indirect=True)
def test_the_write_path_shows_in_djangos_query_log(storage: Storage, thread_id: str) -> None:
    from django.test.utils import CaptureQueriesContext

    app = three_steps([], storage, thread_id).compile(storage=storage, durability="sync")
    with CaptureQueriesContext(connections[storage.alias]) as log:  # type: ignore[attr-defined]
        app.thread(thread_id).run({"x": 1})
    sql = [q["sql"] for q in log.captured_queries]
    assert sum("INSERT INTO criogen_thread" in s for s in sql) == 1
    assert not any("UPDATE criogen_thread SET lease_id = NULL" in s for s in sql)
    writes = [s for s in sql if "UPDATE criogen_thread SET head_version" in s]
    assert len(writes) == 4 and "lease_id = NULL" in writes[-1]


@pytest.mark.parametrize("storage_url", ["sqlite"], indirect=True)
def test_sqlite_writes_leave_sqlite_sequence_alone_and_bind_none_as_null(
    storage: Storage, thread_id: str
) -> None:
    # The value rows' ids are rowids (migration 0023): a write's commit does not also
    # rewrite the table's row of sqlite_sequence. A set value's prev is bound as NULL.
    app = three_steps([], storage, thread_id).compile(storage=storage, durability="sync")
    app.thread(thread_id).run({"x": 1})
    with connections[storage.alias].cursor() as cur:  # type: ignore[attr-defined]
        cur.execute("SELECT sql FROM sqlite_master WHERE name = 'criogen_value'")
        assert "AUTOINCREMENT" not in cur.fetchone()[0].upper()
        cur.execute("SELECT COUNT(*) FROM sqlite_sequence WHERE name = 'criogen_value'")
        assert cur.fetchone()[0] == 0
        cur.execute(
            "SELECT state_key, prev IS NULL FROM criogen_value WHERE thread_id = %s"
            " ORDER BY version, state_key",
            [thread_id],
        )
        assert cur.fetchall() == [("x", 1), ("a", 1), ("b", 1), ("c", 1)]


@pytest.mark.parametrize("storage_url", ["sqlite"], indirect=True)
def test_sqlite_hot_path_errors_come_out_as_djangos(storage: Storage, thread_id: str) -> None:
    # The hot path runs on sqlite3's own cursor and enters Django's error translation
    # only when a statement fails: the caller still sees Django's exceptions.
    from django.db import OperationalError

    from criogen.engine.errors import StorageError

    connection = connections[storage.alias]  # type: ignore[attr-defined]
    run = ActiveRun(storage, thread_id, durability="sync", lease_seconds=30)
    run.open()
    connection.connection.execute("PRAGMA query_only = ON")
    try:
        with pytest.raises(OperationalError):
            storage.acquire(f"{thread_id}-2", "run-2", seconds=30)
        state, delta = apply_update({}, {"n": 1}, {}, origin="test")
        with pytest.raises(StorageError, match="refused the checkpoint write"):
            run.write(source="input", status="in_progress", state=state, delta=delta)
        assert not connection.connection.in_transaction
    finally:
        connection.connection.execute("PRAGMA query_only = OFF")
        run.close(flush=False, raise_errors=False)
    assert storage.thread_info(thread_id).head_version == 0  # type: ignore[union-attr]
    assert storage.thread_info(f"{thread_id}-2") is None


@pytest.mark.parametrize("storage_url", ["sqlite"], indirect=True)
def test_sqlite_connection_is_djangos_in_each_thread_and_event_loop(storage: Storage) -> None:
    # The hot path reads this thread's wrapper from Django's storage directly: it must
    # be the one connections[alias] gives, in this thread, another, and an event loop.
    import asyncio
    import threading

    from criogen.storage.orm.base import sqlite_connection

    alias = storage.alias  # type: ignore[attr-defined]
    assert sqlite_connection(alias) is connections[alias]
    seen: list[tuple[Any, Any]] = []

    def other() -> None:
        first = sqlite_connection(alias)  # none yet in this thread: Django makes it
        seen.append((first, sqlite_connection(alias)))
        seen.append((connections[alias], connections[alias]))

    worker = threading.Thread(target=other)
    worker.start()
    worker.join()
    (first, again), (django, _) = seen
    assert first is again is django and first is not connections[alias]

    async def in_a_loop() -> tuple[Any, Any]:
        return sqlite_connection(alias), connections[alias]

    mine, djangos = asyncio.run(in_a_loop())
    assert mine is djangos


@pytest.mark.parametrize("storage_url", ["sqlite", "postgres"], indirect=True)
def test_a_run_moves_its_threads_updated_at_when_it_starts_and_when_it_ends(
    storage: Storage, thread_id: str
) -> None:
    from criogen.storage.models import Thread

    alias = storage.alias  # type: ignore[attr-defined]
    threads = Thread.objects.using(alias)
    seen: list[Any] = []

    def updated_at(tid: str) -> Any:
        return threads.values_list("updated_at", flat=True).get(pk=tid)

    wf = three_steps(seen, storage, thread_id, probe=updated_at)
    wf.compile(storage=storage, durability="sync").thread(thread_id).run({"x": 1})

    first, *_, last = reversed(storage.history(thread_id))
    # In the middle of the run (after step a) the thread still shows the run's start:
    # its mid-run steps update the head without moving the lists' order.
    assert seen == [first.created_at]
    assert updated_at(thread_id) == last.created_at
