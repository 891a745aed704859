"""The storage contract: one suite, run against every backend (memory, SQLite, PostgreSQL).

Each test talks to the ``Storage`` protocol directly, writing checkpoints the way the
engine does (a version one above the head, a delta of the keys that changed), so a new
backend passes this file or is not a backend.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from criogen import START, Storage, Workflow
from criogen.engine.checkpoints import (
    Checkpoint,
    CheckpointId,
    CheckpointWrite,
    RunId,
    ThreadId,
    new_id,
    utcnow,
)
from criogen.engine.errors import CheckpointNotFound, LeaseLost, StorageError, ThreadNotFound
from criogen.engine.state import Change, Delta
from criogen.engine.store import AuditRecord
from tests.conftest import own_database_url

LEASE = 30.0


@dataclass
class Line:
    """Builds a thread's checkpoints as :class:`ActiveRun` does: versions, value versions."""

    thread_id: str
    run_id: str = field(default_factory=new_id)
    version: int = 0
    values: dict[str, int] = field(default_factory=dict)
    state: dict[str, Any] = field(default_factory=dict)
    last_id: str | None = None

    def next(
        self,
        delta: Delta,
        *,
        source: str = "step",
        status: str = "in_progress",
        fork_of: Checkpoint | None = None,
        after: int | None = None,
        version: int | None = None,
    ) -> CheckpointWrite:
        """The next write of this line; call :meth:`commit` once storage accepted it."""
        number = self.version + 1 if version is None else version
        prev: dict[str, int] = {}
        if fork_of is not None:
            values = dict(fork_of.value_versions)
            state = dict(fork_of.state)
        else:
            values = dict(self.values)
            state = dict(self.state)
            for key, change in delta.items():
                if change.op == "append" and key in values:
                    prev[key] = values[key]
                    state[key] = [*state.get(key, []), *change.value]
                elif change.op == "append":
                    state[key] = list(change.value)
                else:
                    state[key] = change.value
                values[key] = number
        checkpoint = Checkpoint(
            id=CheckpointId(new_id()),
            thread_id=ThreadId(self.thread_id),
            run_id=RunId(self.run_id),
            version=number,
            source=source,  # type: ignore[arg-type]
            status=status,  # type: ignore[arg-type]
            state=state,
            next=("b",) if status == "in_progress" else (),
            metadata={"step": number},
            parent_id=CheckpointId(self.last_id) if self.last_id else None,
            created_at=utcnow(),
            value_versions=values,
        )
        return CheckpointWrite(checkpoint, delta, self.version if after is None else after, prev)

    def commit(self, write: CheckpointWrite) -> Checkpoint:
        cp = write.checkpoint
        self.version, self.values, self.state, self.last_id = (
            cp.version,
            dict(cp.value_versions),
            dict(cp.state),
            cp.id,
        )
        return cp

    def write(self, storage: Storage, delta: Delta, **kwargs: Any) -> Checkpoint:
        """Write the next checkpoint under this line's lease and return it."""
        w = self.next(delta, **kwargs)
        storage.write([w], lease_id=self.run_id)
        return self.commit(w)


def sets(**values: Any) -> Delta:
    return {key: Change("set", value) for key, value in values.items()}


def appends(**values: list[Any]) -> Delta:
    return {key: Change("append", value) for key, value in values.items()}


@pytest.fixture
def line(storage: Storage, thread_id: str) -> Line:
    """A thread whose lease this test's run holds."""
    line = Line(thread_id)
    assert storage.acquire(thread_id, line.run_id, seconds=LEASE)
    return line


# -- leases ---------------------------------------------------------------------------


def test_it_creates_the_thread_when_a_lease_is_first_taken(
    storage: Storage, thread_id: str
) -> None:
    assert storage.thread_info(thread_id) is None

    assert storage.acquire(thread_id, "run-1", seconds=LEASE)

    info = storage.thread_info(thread_id)
    assert info is not None
    assert (info.thread_id, info.head_version, info.head_status, info.lease_id) == (
        thread_id,
        0,
        None,
        "run-1",
    )
    assert storage.head(thread_id) is None
    assert storage.history(thread_id) == []


def test_it_refuses_a_second_lease_while_the_first_is_alive(
    storage: Storage, thread_id: str
) -> None:
    assert storage.acquire(thread_id, "run-1", seconds=LEASE)

    assert not storage.acquire(thread_id, "run-2", seconds=LEASE)
    assert storage.acquire(thread_id, "run-1", seconds=LEASE)  # the holder may re-take it
    assert storage.thread_info(thread_id).lease_id == "run-1"  # type: ignore[union-attr]


def test_it_renews_only_the_holders_lease(storage: Storage, thread_id: str) -> None:
    assert storage.acquire(thread_id, "run-1", seconds=0.3)

    assert storage.renew(thread_id, "run-1", seconds=LEASE)
    assert not storage.renew(thread_id, "run-2", seconds=LEASE)
    assert not storage.renew("no-such-thread-" + thread_id, "run-1", seconds=LEASE)
    time.sleep(0.4)  # past the first lease: the renewal kept it alive
    assert not storage.acquire(thread_id, "run-2", seconds=LEASE)


def test_it_releases_only_for_the_holder(storage: Storage, thread_id: str) -> None:
    assert storage.acquire(thread_id, "run-1", seconds=LEASE)

    storage.release(thread_id, "run-2")  # not the holder: nothing happens
    assert not storage.acquire(thread_id, "run-2", seconds=LEASE)
    storage.release(thread_id, "run-1")
    assert storage.thread_info(thread_id).lease_id is None  # type: ignore[union-attr]
    assert storage.acquire(thread_id, "run-2", seconds=LEASE)


def test_it_lets_another_run_take_an_expired_lease(storage: Storage, thread_id: str) -> None:
    assert storage.acquire(thread_id, "run-1", seconds=0.1)
    time.sleep(0.25)

    assert storage.thread_info(thread_id).lease_id is None  # type: ignore[union-attr]
    assert storage.acquire(thread_id, "run-2", seconds=LEASE)
    assert not storage.renew(thread_id, "run-1", seconds=LEASE)  # run-1 lost it
    assert storage.thread_info(thread_id).lease_id == "run-2"  # type: ignore[union-attr]


# -- writes ---------------------------------------------------------------------------


def test_it_appends_checkpoints_and_moves_the_head(storage: Storage, line: Line) -> None:
    first = line.write(storage, sets(order=42), source="input")
    second = line.write(storage, sets(total=10), status="completed")

    head = storage.head(line.thread_id)
    assert head is not None
    assert head.id == second.id
    assert head.version == 2
    assert head.parent_id == first.id
    assert head.state == {"order": 42, "total": 10}
    assert head.status == "completed"
    assert head.source == "step"
    assert head.run_id == line.run_id
    assert head.metadata == {"step": 2}
    assert head.created_at == second.created_at
    info = storage.thread_info(line.thread_id)
    assert (info.head_version, info.head_status) == (2, "completed")  # type: ignore[union-attr]


def test_it_refuses_a_write_that_does_not_follow_the_head(storage: Storage, line: Line) -> None:
    line.write(storage, sets(a=1))

    racing = line.next(sets(a=2), after=0, version=1)  # a second v1
    with pytest.raises(StorageError) as exc:
        storage.write([racing], lease_id=line.run_id)
    assert exc.value.code == "storage_error"
    ahead = line.next(sets(a=3), after=5, version=6)
    with pytest.raises(StorageError):
        storage.write([ahead], lease_id=line.run_id)
    head = storage.head(line.thread_id)
    assert head is not None
    assert (head.version, head.state) == (1, {"a": 1})


def test_it_refuses_a_write_under_a_lease_the_run_does_not_hold(
    storage: Storage, thread_id: str
) -> None:
    line = Line(thread_id)
    assert storage.acquire(thread_id, "someone-else", seconds=LEASE)

    with pytest.raises(LeaseLost) as exc:
        storage.write([line.next(sets(a=1))], lease_id=line.run_id)

    assert exc.value.code == "lease_lost"
    assert exc.value.thread_id == thread_id
    assert storage.head(thread_id) is None


def test_a_refused_batch_changes_nothing(storage: Storage, line: Line) -> None:
    line.write(storage, sets(a=1, steps=["x"]))
    good = line.next(appends(steps=["y"]) | sets(a=2))
    bad = CheckpointWrite(
        line.next(sets(a=3), version=3).checkpoint, sets(a=3), after=7, prev_versions={}
    )

    with pytest.raises(StorageError):
        storage.write([good, bad], lease_id=line.run_id)

    head = storage.head(line.thread_id)
    assert head is not None
    assert (head.version, head.state) == (1, {"a": 1, "steps": ["x"]})
    assert [cp.version for cp in storage.history(line.thread_id)] == [1]
    # No value row of the refused batch was left behind: the same version writes cleanly.
    line.write(storage, appends(steps=["z"]))
    assert storage.head(line.thread_id).state == {"a": 1, "steps": ["x", "z"]}  # type: ignore[union-attr]


def test_a_batch_over_two_threads_is_all_or_nothing(storage: Storage, thread_id: str) -> None:
    one, two = Line(thread_id + "-1"), Line(thread_id + "-2")
    for each in (one, two):  # held by some run; lease_id=None writes regardless
        assert storage.acquire(each.thread_id, "holder", seconds=LEASE)
    good = one.next(sets(a=1))
    bad = two.next(sets(b=1), after=3, version=4)

    with pytest.raises(StorageError):
        storage.write([good, bad], lease_id=None)
    assert storage.head(one.thread_id) is None

    storage.write([good, two.next(sets(b=1))], lease_id=None)
    assert storage.head(one.thread_id).state == {"a": 1}  # type: ignore[union-attr]
    assert storage.head(two.thread_id).state == {"b": 1}  # type: ignore[union-attr]


def test_it_writes_a_batch_of_one_thread_in_order(storage: Storage, line: Line) -> None:
    first = line.next(sets(a=1), source="input")
    line.commit(first)
    second = line.next(appends(steps=["a"]))
    line.commit(second)
    third = line.next(appends(steps=["b"]), status="completed")
    line.commit(third)

    storage.write([first, second, third], lease_id=line.run_id)

    assert [(cp.version, cp.state) for cp in storage.history(line.thread_id)] == [
        (3, {"a": 1, "steps": ["a", "b"]}),
        (2, {"a": 1, "steps": ["a"]}),
        (1, {"a": 1}),
    ]


# -- reads ----------------------------------------------------------------------------


def test_it_reads_any_checkpoint_by_id_with_its_state(storage: Storage, line: Line) -> None:
    cps = [line.write(storage, sets(n=i)) for i in range(3)]

    for cp in cps:
        got = storage.get_checkpoint(line.thread_id, cp.id)
        assert got == cp


def test_it_raises_checkpoint_not_found_for_an_unknown_id(
    storage: Storage, line: Line, thread_id: str
) -> None:
    cp = line.write(storage, sets(n=1))

    with pytest.raises(CheckpointNotFound) as exc:
        storage.get_checkpoint(thread_id, new_id())
    assert exc.value.code == "checkpoint_not_found"
    with pytest.raises(CheckpointNotFound):  # a real id, but of another thread
        storage.get_checkpoint("other-" + thread_id, cp.id)


def test_history_is_newest_first_and_pages_without_skipping_or_repeating(
    storage: Storage, line: Line
) -> None:
    for i in range(7):
        line.write(storage, sets(n=i))

    assert [cp.version for cp in storage.history(line.thread_id)] == [7, 6, 5, 4, 3, 2, 1]
    pages: list[list[int]] = []
    before: int | None = None
    while True:
        page = storage.history(line.thread_id, limit=3, before=before)
        if not page:
            break
        pages.append([cp.version for cp in page])
        before = page[-1].version
    assert pages == [[7, 6, 5], [4, 3, 2], [1]]
    assert [cp.state["n"] for cp in storage.history(line.thread_id, limit=2)] == [6, 5]
    assert [cp.version for cp in storage.history(line.thread_id, before=100)] == [
        7,
        6,
        5,
        4,
        3,
        2,
        1,
    ]
    assert storage.history(line.thread_id, limit=0) == []
    assert storage.history(line.thread_id, before=1) == []
    assert storage.history("no-such-" + line.thread_id) == []


def test_it_keeps_an_append_key_as_a_chain_of_appended_items(storage: Storage, line: Line) -> None:
    v1 = line.write(storage, sets(steps=["a"], n=0))
    v2 = line.write(storage, appends(steps=["b"]))
    v3 = line.write(storage, sets(n=1))
    v4 = line.write(storage, appends(steps=["c", {"d": [1, 2]}]) | sets(n=2))
    v5 = line.write(storage, sets(steps=["reset"]))
    v6 = line.write(storage, appends(steps=["e"]))

    states = [
        storage.get_checkpoint(line.thread_id, cp.id).state for cp in (v1, v2, v3, v4, v5, v6)
    ]
    assert states == [
        {"steps": ["a"], "n": 0},
        {"steps": ["a", "b"], "n": 0},
        {"steps": ["a", "b"], "n": 1},
        {"steps": ["a", "b", "c", {"d": [1, 2]}], "n": 2},
        {"steps": ["reset"], "n": 2},
        {"steps": ["reset", "e"], "n": 2},
    ]
    # The unchanged key points at the write that holds it; it is not copied.
    assert v3.value_versions == {"steps": 2, "n": 3}


def test_an_append_chain_may_start_without_a_whole_value(storage: Storage, line: Line) -> None:
    line.write(storage, appends(log=["one"]))
    line.write(storage, appends(log=["two"]))

    assert storage.head(line.thread_id).state == {"log": ["one", "two"]}  # type: ignore[union-attr]


def test_a_fork_copies_the_value_versions_of_the_checkpoint_it_forks(
    storage: Storage, line: Line
) -> None:
    line.write(storage, sets(steps=["a"], n=0))
    v2 = line.write(storage, appends(steps=["b"]) | sets(n=1))
    v3 = line.write(storage, appends(steps=["c"]) | sets(n=2))

    fork = line.write(storage, {}, source="fork", fork_of=v2)
    after_fork = line.write(storage, appends(steps=["x"]))

    assert fork.value_versions == v2.value_versions
    assert storage.get_checkpoint(line.thread_id, fork.id).state == {"steps": ["a", "b"], "n": 1}
    assert storage.head(line.thread_id).state == {"steps": ["a", "b", "x"], "n": 1}  # type: ignore[union-attr]
    assert after_fork.version == 5
    # The old line is untouched by the fork's appends.
    assert storage.get_checkpoint(line.thread_id, v3.id).state == {"steps": ["a", "b", "c"], "n": 2}


def test_a_history_page_has_the_states_its_checkpoints_have_one_at_a_time(
    storage: Storage, line: Line
) -> None:
    # A page's states share their append chains (ORM storage walks each once): lines
    # that fork, a reset, empty appends and a chain without a whole value must come out
    # as each checkpoint's own state does.
    line.write(storage, appends(log=["one"]) | sets(steps=["a"], n=0))
    v2 = line.write(storage, appends(steps=["b"], log=[]) | sets(n=1))
    line.write(storage, appends(steps=[], log=["two"]))
    line.write(storage, appends(steps=["c"]) | sets(n=2))
    line.write(storage, {}, source="fork", fork_of=v2)
    line.write(storage, appends(steps=["x"], log=["three"]))
    line.write(storage, sets(n=3))
    line.write(storage, sets(steps=["reset"]))
    line.write(storage, appends(steps=["y", {"z": [1]}]))

    page = storage.history(line.thread_id)
    assert [cp.state for cp in page] == [
        storage.get_checkpoint(line.thread_id, cp.id).state for cp in page
    ]
    assert page[0].state == {"steps": ["reset", "y", {"z": [1]}], "log": ["one", "three"], "n": 3}
    assert page[5].state == {"steps": ["a", "b", "c"], "log": ["one", "two"], "n": 2}
    for start, cp in enumerate(page):
        three = storage.history(line.thread_id, limit=3, before=cp.version + 1)
        assert three == page[start : start + 3]
    # No two states share a list, not even two that point at the same value row.
    assert page[2].value_versions["steps"] == page[3].value_versions["steps"]
    page[2].state["steps"].append("changed")
    assert page[3].state["steps"] == ["a", "b", "x"]


def test_it_round_trips_the_checkpoint_fields(storage: Storage, line: Line) -> None:
    w = line.next(sets(order={"id": 42, "lines": [1.5, None, True, "é"]}), status="suspended")
    cp = w.checkpoint
    full = Checkpoint(
        id=cp.id,
        thread_id=cp.thread_id,
        run_id=cp.run_id,
        version=cp.version,
        source="suspend",
        status="suspended",
        state=cp.state,
        next=("ask", "check"),
        interrupts=({"id": new_id(), "node": "ask", "reason": "approve?", "payload": [1]},),
        tasks={"done": {"check": {"ok": True}}, "resumes": {}},
        error=None,
        parent_id=None,
        created_at=cp.created_at,
        metadata={"step": 1, "actor": "alice"},
        value_versions=cp.value_versions,
    )
    storage.write([CheckpointWrite(full, w.delta, 0, {})], lease_id=line.run_id)

    assert storage.head(line.thread_id) == full
    assert storage.history(line.thread_id) == [full]


# -- threads --------------------------------------------------------------------------


def test_it_deletes_a_thread_with_all_its_checkpoints(storage: Storage, line: Line) -> None:
    cp = line.write(storage, sets(a=1))
    line.write(storage, appends(steps=["x"]))

    assert storage.delete_thread(line.thread_id) is True

    assert storage.head(line.thread_id) is None
    assert storage.history(line.thread_id) == []
    assert storage.thread_info(line.thread_id) is None
    with pytest.raises(CheckpointNotFound):
        storage.get_checkpoint(line.thread_id, cp.id)
    assert storage.delete_thread(line.thread_id) is False
    # The id is free again: a new line starts at version 1.
    again = Line(line.thread_id)
    assert storage.acquire(line.thread_id, again.run_id, seconds=LEASE)
    assert again.write(storage, sets(b=2)).version == 1
    assert storage.head(line.thread_id).state == {"b": 2}  # type: ignore[union-attr]


def test_an_idle_thread_is_deleted_and_a_held_one_is_left_alone(
    storage_url: str, thread_id: str, django_db_blocker: Any
) -> None:
    with django_db_blocker.unblock():
        storage = Storage(storage_url, audit=True)
        line = Line(thread_id)
        assert storage.acquire(thread_id, line.run_id, seconds=LEASE)
        head = line.write(storage, sets(a=1))
        gone = AuditRecord("delete", thread_id, "olga", {}, door="api")

        # Held: nothing changes, no event.
        assert storage.delete_idle_thread(thread_id, audit=gone) is None
        assert storage.head(thread_id) == head
        assert storage.audit_events(thread_id=thread_id) == []

        storage.release(thread_id, line.run_id)
        assert storage.delete_idle_thread(thread_id, audit=gone) is True
        assert storage.thread_info(thread_id) is None
        assert storage.history(thread_id) == []
        (event,) = storage.audit_events(thread_id=thread_id)
        assert (event.action, event.actor, event.before) == ("delete", "olga", head.id)
        assert storage.delete_idle_thread(thread_id, audit=gone) is False
        assert len(storage.audit_events(thread_id=thread_id)) == 1


def test_a_thread_created_again_under_a_deleted_ones_id_has_only_its_own_audit_trail(
    storage_url: str, thread_id: str, django_db_blocker: Any, tmp_path: Path
) -> None:
    # It reads the whole log, so a database of its own: the session's holds other
    # tests' events, some sealed with keys this storage does not have.
    backend = storage_url.split(":", 1)[0]
    own = nullcontext(storage_url) if backend == "memory" else own_database_url(backend, tmp_path)
    with django_db_blocker.unblock(), own as url:
        storage = Storage(url, audit=True)
        first = Line(thread_id)
        assert storage.acquire(thread_id, first.run_id, seconds=LEASE)
        w = first.next(sets(secret="first owner's"), source="input")
        w = dataclasses.replace(w, audit=AuditRecord("input", thread_id, "olga", {}, door="api"))
        storage.write([w], lease_id=first.run_id)
        first.commit(w)
        storage.record_audit("update_state", thread_id=thread_id, actor="olga", door="ui")
        gone = AuditRecord("delete", thread_id, "olga", {}, door="api", before=w.checkpoint.id)
        assert storage.delete_thread(thread_id, audit=gone)
        # Once deleted, its whole trail stays readable under its id.
        assert [e.action for e in storage.audit_events(thread_id=thread_id)] == [
            "delete",
            "update_state",
            "input",
        ]

        time.sleep(0.002)  # a clock that moves on between the two threads
        again = Line(thread_id)
        assert storage.acquire(thread_id, again.run_id, seconds=LEASE)
        w = again.next(sets(b=2), source="input")
        w = dataclasses.replace(w, audit=AuditRecord("input", thread_id, "ivan", {}, door="api"))
        storage.write([w], lease_id=again.run_id)
        again.commit(w)

        # The thread of today shows only its own events; the log keeps them all.
        assert [(e.action, e.actor) for e in storage.audit_events(thread_id=thread_id)] == [
            ("input", "ivan")
        ]
        everything = [e for e in storage.audit_events(limit=1000) if e.thread_id == thread_id]
        assert [e.action for e in everything] == ["input", "delete", "update_state", "input"]
        storage.close()


def test_it_lists_thread_ids_most_recently_updated_first(storage: Storage, thread_id: str) -> None:
    lines = [Line(f"{thread_id}-{i}") for i in range(3)]
    for one in lines:
        storage.acquire(one.thread_id, one.run_id, seconds=LEASE)
        one.write(storage, sets(a=1))
        time.sleep(0.002)
    lines[0].write(storage, sets(a=2))  # the oldest becomes the newest

    ids = storage.thread_ids(limit=3)
    assert ids == [lines[0].thread_id, lines[2].thread_id, lines[1].thread_id]
    assert storage.thread_ids(limit=2, offset=1) == [lines[2].thread_id, lines[1].thread_id]


def test_it_reads_the_heads_of_many_threads_at_once(storage: Storage, thread_id: str) -> None:
    lines = [Line(f"{thread_id}-{i}") for i in range(3)]
    for n, one in enumerate(lines):
        storage.acquire(one.thread_id, one.run_id, seconds=LEASE)
        one.write(storage, sets(n=n) | appends(log=["a"]))
        one.write(storage, appends(log=[n]))
    storage.acquire(f"{thread_id}-empty", "run-e", seconds=LEASE)  # a thread, no checkpoint

    wanted = [one.thread_id for one in lines] + [f"{thread_id}-empty", f"{thread_id}-unknown"]
    heads = storage.heads(wanted)

    assert set(heads) == {one.thread_id for one in lines}
    for one in lines:
        assert heads[one.thread_id] == storage.head(one.thread_id)
    assert heads[lines[2].thread_id].state == {"n": 2, "log": ["a", 2]}
    assert storage.heads([]) == {}


# -- leases and writes in one round trip ------------------------------------------------


def test_acquire_head_takes_the_lease_and_tells_the_head(storage: Storage, thread_id: str) -> None:
    assert storage.acquire_head(thread_id, "run-1", seconds=LEASE) == (True, None)
    line = Line(thread_id, run_id="run-1")
    line.write(storage, sets(a=1))
    head = line.write(storage, appends(steps=["x"]))

    assert storage.acquire_head(thread_id, "run-2", seconds=LEASE) == (False, None)
    assert storage.acquire_head(thread_id, "run-1", seconds=LEASE) == (True, head)
    storage.release(thread_id, "run-1")
    taken, seen = storage.acquire_head(thread_id, "run-2", seconds=LEASE)
    assert taken and seen == head and seen is not None
    assert seen.state == {"a": 1, "steps": ["x"]}
    assert storage.thread_info(thread_id).lease_id == "run-2"  # type: ignore[union-attr]


def test_write_and_release_writes_then_gives_the_lease_back(storage: Storage, line: Line) -> None:
    line.write(storage, sets(a=1))
    last = line.next(sets(a=2), status="completed")

    storage.write_and_release([last], lease_id=line.run_id)
    line.commit(last)

    info = storage.thread_info(line.thread_id)
    assert info is not None and (info.head_version, info.lease_id) == (2, None)
    assert storage.head(line.thread_id) == last.checkpoint
    assert storage.acquire(line.thread_id, "next-run", seconds=LEASE)


def test_a_refused_write_and_release_keeps_the_lease(storage: Storage, line: Line) -> None:
    line.write(storage, sets(a=1))
    stale = line.next(sets(a=2), after=0, version=1)

    with pytest.raises(StorageError):
        storage.write_and_release([stale], lease_id=line.run_id)

    assert storage.thread_info(line.thread_id).lease_id == line.run_id  # type: ignore[union-attr]
    assert storage.head(line.thread_id).state == {"a": 1}  # type: ignore[union-attr]


# -- history maintenance: rollback, compaction, copy ------------------------------------


def _next_run(storage: Storage, line: Line) -> Line:
    """The same thread continued by another run, which takes the lease."""
    storage.release(line.thread_id, line.run_id)
    other = dataclasses.replace(line, run_id=new_id(), values=dict(line.values))
    assert storage.acquire(line.thread_id, other.run_id, seconds=LEASE)
    return other


def test_rollback_removes_a_runs_checkpoints_and_moves_the_head_back(
    storage: Storage, line: Line
) -> None:
    line.write(storage, sets(a=1) | appends(log=["one"]), source="input")
    kept = line.write(storage, appends(log=["two"]), status="completed")
    second = _next_run(storage, line)
    second.write(storage, sets(a=2) | appends(log=["three"]), source="input")
    gone = second.write(storage, appends(log=["four"]))

    assert storage.rollback_run(line.thread_id, second.run_id) == 2

    assert storage.head(line.thread_id) == kept
    assert [cp.version for cp in storage.history(line.thread_id)] == [2, 1]
    info = storage.thread_info(line.thread_id)
    assert info is not None and (info.head_version, info.head_status) == (2, "completed")
    with pytest.raises(CheckpointNotFound):
        storage.get_checkpoint(line.thread_id, gone.id)
    # Their value rows went too: the versions are free for the next write.
    again = dataclasses.replace(line, run_id=second.run_id, values=dict(line.values))
    assert again.write(storage, appends(log=["three again"])).version == 3
    assert storage.head(line.thread_id).state == {  # type: ignore[union-attr]
        "a": 1,
        "log": ["one", "two", "three again"],
    }


def test_rollback_of_a_run_that_wrote_nothing_changes_nothing(storage: Storage, line: Line) -> None:
    head = line.write(storage, sets(a=1))

    assert storage.rollback_run(line.thread_id, "another-run") == 0
    assert storage.rollback_run(f"{line.thread_id}-unknown", line.run_id) == 0

    assert storage.history(line.thread_id) == [head]


def test_rollback_of_the_only_run_empties_the_thread(storage: Storage, line: Line) -> None:
    line.write(storage, sets(a=1))
    line.write(storage, sets(a=2))

    assert storage.rollback_run(line.thread_id, line.run_id) == 2

    assert storage.head(line.thread_id) is None
    info = storage.thread_info(line.thread_id)
    assert info is not None and (info.head_version, info.head_status) == (0, None)
    assert Line(line.thread_id, run_id=line.run_id).write(storage, sets(b=1)).version == 1


def test_compaction_keeps_only_the_head_and_the_values_it_reads(
    storage_url: str, thread_id: str, django_db_blocker: Any
) -> None:
    with django_db_blocker.unblock():
        storage = Storage(storage_url, audit=True)
        line = Line(thread_id)
        assert storage.acquire(thread_id, line.run_id, seconds=LEASE)
        old = line.write(storage, sets(a=1, big="x" * 100) | appends(log=["one"]))
        line.write(storage, appends(log=["two"]))
        line.write(storage, sets(a=2, big=None))
        head = line.write(storage, appends(log=["three"]), status="completed")
        event = AuditRecord("prune", thread_id, "olga", {"kept": head.id}, door="python")

        assert storage.compact_thread(thread_id, audit=event) == 3

        assert storage.history(thread_id) == [head]
        assert storage.head(thread_id) == head
        with pytest.raises(CheckpointNotFound):
            storage.get_checkpoint(thread_id, old.id)
        # The append chain the head reads is kept: the thread goes on from it.
        assert line.write(storage, appends(log=["four"])).state["log"] == [
            "one",
            "two",
            "three",
            "four",
        ]
        assert storage.head(thread_id).state == {  # type: ignore[union-attr]
            "a": 2,
            "big": None,
            "log": ["one", "two", "three", "four"],
        }
        assert [(e.action, e.actor) for e in storage.audit_events(thread_id=thread_id)] == [
            ("prune", "olga")
        ]
        assert storage.compact_thread(thread_id) == 1  # v4, before the new head
        assert storage.compact_thread(thread_id) == 0
        assert storage.compact_thread(f"{thread_id}-unknown") == 0
        storage.close()


def test_a_copy_has_the_whole_history_under_new_ids(
    storage_url: str, thread_id: str, django_db_blocker: Any
) -> None:
    with django_db_blocker.unblock():
        storage = Storage(storage_url, audit=True)
        line = Line(thread_id)
        assert storage.acquire(thread_id, line.run_id, seconds=LEASE)
        v1 = line.write(storage, sets(n=0) | appends(steps=["a"]), source="input")
        line.write(storage, appends(steps=["b"]) | sets(n=1))
        line.write(storage, {}, source="fork", fork_of=v1)
        line.write(storage, appends(steps=["x"]), status="suspended")
        original = storage.history(thread_id)
        copy_id = f"{thread_id}-copy"
        event = AuditRecord("copy", copy_id, "olga", {"from": thread_id}, door="api")

        head_id = storage.copy_thread(thread_id, copy_id, audit=event)

        copied = storage.history(copy_id)
        assert head_id == copied[0].id
        assert [(c.version, c.source, c.status, c.state, c.run_id) for c in copied] == [
            (c.version, c.source, c.status, c.state, c.run_id) for c in original
        ]
        assert not {c.id for c in copied} & {c.id for c in original}
        # Parent links follow the new ids.
        ids = dict(zip([c.id for c in original], [c.id for c in copied], strict=True))
        assert [c.parent_id for c in copied] == [
            ids[c.parent_id] if c.parent_id else None for c in original
        ]
        assert all(c.thread_id == copy_id for c in copied)
        info = storage.thread_info(copy_id)
        assert info is not None
        assert (info.head_version, info.head_status, info.lease_id) == (4, "suspended", None)
        assert storage.history(thread_id) == original  # the source is untouched
        (audited,) = storage.audit_events(thread_id=copy_id)
        assert (audited.action, audited.after) == ("copy", head_id)
        # The copy goes on by itself.
        fork = Line(copy_id, version=4, values=dict(copied[0].value_versions))
        fork.state, fork.last_id = dict(copied[0].state), copied[0].id
        assert storage.acquire(copy_id, fork.run_id, seconds=LEASE)
        fork.write(storage, appends(steps=["y"]))
        assert storage.head(copy_id).state == {"n": 0, "steps": ["a", "x", "y"]}  # type: ignore[union-attr]
        assert storage.head(thread_id).state == {"n": 0, "steps": ["a", "x"]}  # type: ignore[union-attr]

        with pytest.raises(StorageError):
            storage.copy_thread(thread_id, copy_id)
        assert storage.history(copy_id)[0].version == 5
        with pytest.raises(ThreadNotFound):
            storage.copy_thread(f"{thread_id}-unknown", f"{thread_id}-other")
        # A thread without checkpoints copies to an empty thread.
        assert storage.acquire(f"{thread_id}-empty", "run-e", seconds=LEASE)
        assert storage.copy_thread(f"{thread_id}-empty", f"{thread_id}-empty-copy") is None
        assert storage.head(f"{thread_id}-empty-copy") is None
        empty = storage.thread_info(f"{thread_id}-empty-copy")
        assert empty is not None and (empty.head_version, empty.lease_id) == (0, None)
        storage.close()


# -- listeners ------------------------------------------------------------------------


def _steps_workflow() -> Workflow:
    wf = Workflow(reducers={"steps": "append"})
    wf.add_node("a", lambda s: {"steps": ["a"]})
    wf.add_node("b", lambda s: {"steps": ["b"]})
    wf.add_edge(START, "a")
    wf.add_edge("a", "b")
    return wf


@pytest.mark.parametrize("durability", ["sync", "async", "exit"])
def test_listeners_see_each_batch_after_it_is_committed(
    storage: Storage, thread_id: str, durability: str
) -> None:
    seen: list[tuple[int, str, bool, Any]] = []
    lock = threading.Lock()

    def listener(writes: Any) -> None:
        for w in writes:
            # Reading it back proves the commit happened before the call.
            stored = storage.get_checkpoint(w.checkpoint.thread_id, w.checkpoint.id)
            with lock:
                seen.append(
                    (w.checkpoint.version, w.checkpoint.source, stored == w.checkpoint, w.updates)
                )

    def broken(writes: Any) -> None:
        raise RuntimeError("a listener bug must not break the run")

    storage.add_listener(broken)
    storage.add_listener(listener)
    storage.add_listener(listener)  # added once only
    try:
        result = (
            _steps_workflow()
            .compile(storage=storage, durability=durability)
            .thread(thread_id)
            .run({"steps": ["in"]})
        )
    finally:
        storage.remove_listener(listener)
        storage.remove_listener(broken)
        storage.close()

    assert result.state == {"steps": ["in", "a", "b"]}
    if durability == "exit":
        assert [entry[:3] for entry in seen] == [(1, "step", True)]
    else:
        assert seen == [
            (1, "input", True, None),
            (2, "step", True, {"a": {"steps": ["a"]}}),
            (3, "step", True, {"b": {"steps": ["b"]}}),
        ]


# -- a run's first write creates its thread (a thread id nobody else knows yet) ----------


def _creating(line: Line, delta: Delta, **kwargs: Any) -> CheckpointWrite:
    """``line``'s next write, creating its thread (as ActiveRun's ``new_thread``)."""
    return dataclasses.replace(line.next(delta, **kwargs), new_thread=LEASE)


def test_a_creating_write_makes_the_thread_held_by_the_writers_lease(
    storage: Storage, thread_id: str
) -> None:
    line = Line(thread_id)
    first = _creating(line, sets(a=1), source="input")

    storage.write([first], lease_id=line.run_id)
    line.commit(first)

    info = storage.thread_info(thread_id)
    assert info is not None
    assert (info.head_version, info.head_status, info.lease_id) == (1, "in_progress", line.run_id)
    assert storage.head(thread_id) == first.checkpoint
    assert not storage.acquire(thread_id, "another-run", seconds=LEASE)
    # The next write moves the head as every write does.
    assert line.write(storage, sets(a=2)).version == 2
    assert storage.head(thread_id).state == {"a": 2}  # type: ignore[union-attr]


def test_a_creating_write_that_ends_the_run_leaves_the_thread_free(
    storage: Storage, thread_id: str
) -> None:
    line = Line(thread_id)
    only = _creating(line, sets(a=1), status="completed")

    storage.write_and_release([only], lease_id=line.run_id)

    info = storage.thread_info(thread_id)
    assert info is not None and (info.head_version, info.lease_id) == (1, None)
    assert storage.head(thread_id).state == {"a": 1}  # type: ignore[union-attr]
    assert storage.acquire(thread_id, "next-run", seconds=LEASE)


def test_a_batch_that_creates_the_thread_writes_every_checkpoint(
    storage: Storage, thread_id: str
) -> None:
    line = Line(thread_id)
    first = _creating(line, sets(a=1), source="input")
    line.commit(first)
    second = line.next(appends(steps=["x"]))
    line.commit(second)

    storage.write([first, second], lease_id=line.run_id)

    assert [cp.version for cp in storage.history(thread_id)] == [2, 1]
    assert storage.head(thread_id).state == {"a": 1, "steps": ["x"]}  # type: ignore[union-attr]
    assert storage.thread_info(thread_id).lease_id == line.run_id  # type: ignore[union-attr]


@pytest.mark.parametrize("holder", [None, "another-run"])
@pytest.mark.parametrize("verb", ["write", "write_and_release"])
def test_a_creating_write_on_a_thread_that_exists_is_refused_and_writes_nothing(
    storage: Storage, thread_id: str, holder: str | None, verb: str
) -> None:
    # The thread was created meanwhile: by a run that holds it, or held and given back.
    assert storage.acquire(thread_id, holder or "gone", seconds=LEASE)
    if holder is None:
        storage.release(thread_id, "gone")
    line = Line(thread_id)

    with pytest.raises(LeaseLost, match="created by someone else"):
        getattr(storage, verb)([_creating(line, sets(a=1))], lease_id=line.run_id)

    info = storage.thread_info(thread_id)
    assert info is not None and (info.head_version, info.lease_id) == (0, holder)
    assert storage.head(thread_id) is None


def test_a_write_that_does_not_touch_moves_the_head_but_not_the_threads_place(
    storage: Storage, thread_id: str
) -> None:
    older, newer = Line(f"{thread_id}-older"), Line(f"{thread_id}-newer")
    for one in (older, newer):
        assert storage.acquire(one.thread_id, one.run_id, seconds=LEASE)
        one.write(storage, sets(a=1))
        time.sleep(0.002)
    assert storage.thread_ids(limit=2) == [newer.thread_id, older.thread_id]

    # A run's mid-run step: the head moves, updated_at (the lists' order) stays.
    step = dataclasses.replace(older.next(sets(a=2)), touch=False)
    storage.write([step], lease_id=older.run_id)
    older.commit(step)
    assert storage.head(older.thread_id).state == {"a": 2}  # type: ignore[union-attr]
    assert storage.thread_ids(limit=2) == [newer.thread_id, older.thread_id]

    # A batch with one touching write moves it.
    quiet = dataclasses.replace(older.next(sets(a=3)), touch=False)
    older.commit(quiet)
    loud = older.next(sets(a=4), status="completed")
    older.commit(loud)
    storage.write([quiet, loud], lease_id=older.run_id)
    assert storage.thread_ids(limit=2) == [older.thread_id, newer.thread_id]
