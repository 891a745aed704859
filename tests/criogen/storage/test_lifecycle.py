"""A thread's creation and deletion with their audit events, in one round trip on
PostgreSQL and one short transaction on SQLite (criogen.storage.orm.lifecycle)."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from django.contrib.auth import get_user_model
from django.db import IntegrityError, connections
from django.test.utils import CaptureQueriesContext

from criogen import START, Storage, Workflow
from criogen.engine.store import AuditRecord
from criogen.storage.models import (
    Assistant,
    Claim,
    DeadlineFiring,
    Decision,
    Effect,
    LangGraphCheckpoint,
    Run,
    Thread,
)


@pytest.fixture(params=["sqlite", "postgres"])
def orm(request: pytest.FixtureRequest, django_db_blocker: Any) -> Iterator[Any]:
    """The ORM storage on each SQL backend, audit on."""
    url = str(request.getfixturevalue(f"{request.param}_url"))
    with django_db_blocker.unblock():
        yield Storage(url, audit=True)


def steps(storage: Storage, thread_id: str) -> str:
    """Run START -> a -> b on ``thread_id``; the head's id."""
    wf = Workflow()
    wf.add_node("a", lambda s: {"a": 1})
    wf.add_node("b", lambda s: {"b": 1})
    wf.add_edge(START, "a").add_edge("a", "b")
    wf.compile(storage=storage, durability="sync").thread(thread_id).run({"x": 1})
    head = storage.head(thread_id)
    assert head is not None
    return head.id


def busy_thread_rows(orm: Any, thread_id: str) -> dict[str, Any]:
    """A row in each table that refers to the thread (the run ended); the run."""
    db = orm.alias
    user = get_user_model().objects.db_manager(db).create_user(f"u-{uuid.uuid4().hex[:8]}")
    assistant = Assistant.objects.using(db).create(graph_id="steps")
    run = Run.objects.using(db).create(
        thread_id=thread_id, assistant=assistant, graph_id="steps", status="success"
    )
    Decision.objects.using(db).create(
        thread_id=thread_id, version=1, checkpoint_id="c", call_id="k", tool="t", digest="d",
        decision="approve",
    )  # fmt: skip
    Effect.objects.using(db).create(
        key=uuid.uuid4().hex, thread_id=thread_id, checkpoint_id="c", call_id="k", tool="t",
        args="{}",
    )  # fmt: skip
    Claim.objects.using(db).create(thread_id=thread_id, user=user, version=1)
    DeadlineFiring.objects.using(db).create(
        thread_id=thread_id,
        checkpoint_id=uuid.uuid4().hex,
        interrupt_id="i",
        kind="remind",
        run=run,
    )
    LangGraphCheckpoint.objects.using(db).create(
        thread_id=thread_id, checkpoint_id="lg", type="json", checkpoint=b"{}"
    )
    return {"run": run, "assistant": assistant}


def rows_of(orm: Any, thread_id: str) -> dict[str, int]:
    """How many rows of each table that refers to threads belong to ``thread_id``."""
    return {
        rel.related_model._meta.db_table: rel.related_model.objects.using(orm.alias)
        .filter(**{rel.field.name: thread_id})
        .count()
        for rel in Thread._meta.related_objects
    }


def test_an_idle_thread_goes_with_every_row_that_refers_to_it_and_one_event(
    orm: Any, thread_id: str
) -> None:
    head = steps(orm, thread_id)
    made = busy_thread_rows(orm, thread_id)
    other = f"{thread_id}-other"
    steps(orm, other)
    # Another thread's firing that names this thread's run: it stays, without the run.
    DeadlineFiring.objects.using(orm.alias).create(
        thread_id=other,
        checkpoint_id=uuid.uuid4().hex,
        interrupt_id="i",
        kind="remind",
        run=made["run"],
    )
    kept = rows_of(orm, other)
    assert sum(rows_of(orm, thread_id).values()) >= 9

    gone = AuditRecord("delete", thread_id, "olga", {}, door="api")
    with CaptureQueriesContext(connections[orm.alias]) as queries:
        assert orm.delete_idle_thread(thread_id, audit=gone) is True

    if orm.vendor == "postgresql":
        assert len(queries.captured_queries) == 1  # one round trip, one commit
    assert not Thread.objects.using(orm.alias).filter(pk=thread_id).exists()
    assert set(rows_of(orm, thread_id).values()) == {0}
    assert rows_of(orm, other) == kept
    firing = DeadlineFiring.objects.using(orm.alias).get(thread_id=other)
    assert firing.run_id is None
    assert orm.head(other) is not None
    (event,) = [e for e in orm.audit_events(thread_id=thread_id) if e.action == "delete"]
    assert (event.actor, event.door, event.before) == ("olga", "api", head)


def test_a_missing_thread_is_false_and_records_nothing(orm: Any, thread_id: str) -> None:
    gone = AuditRecord("delete", thread_id, "olga", {}, door="api")
    assert orm.delete_idle_thread(thread_id, audit=gone) is False
    assert orm.audit_events(thread_id=thread_id) == []


@pytest.mark.parametrize("status", ["pending", "running"])
def test_a_thread_with_an_active_run_is_left_whole(orm: Any, thread_id: str, status: str) -> None:
    steps(orm, thread_id)
    made = busy_thread_rows(orm, thread_id)
    Run.objects.using(orm.alias).filter(pk=made["run"].pk).update(status=status)
    before = rows_of(orm, thread_id)

    gone = AuditRecord("delete", thread_id, "olga", {}, door="api")
    assert orm.delete_idle_thread(thread_id, audit=gone) is None

    assert Thread.objects.using(orm.alias).filter(pk=thread_id).exists()
    assert rows_of(orm, thread_id) == before
    assert [e.action for e in orm.audit_events(thread_id=thread_id)] == []


def test_a_live_lease_keeps_the_thread_and_an_expired_one_does_not(
    orm: Any, thread_id: str
) -> None:
    steps(orm, thread_id)
    assert orm.acquire(thread_id, "run-1", seconds=30)
    assert orm.delete_idle_thread(thread_id) is None
    assert orm.head(thread_id) is not None

    Thread.objects.using(orm.alias).filter(pk=thread_id).update(lease_expires=time.time() - 1)
    assert orm.delete_idle_thread(thread_id) is True
    assert orm.head(thread_id) is None


def test_a_new_thread_and_its_event_are_one_statement(orm: Any, thread_id: str) -> None:
    row = Thread(id=thread_id, metadata={"owner": "alice", "n": 1})
    born = AuditRecord("create", thread_id, "alice", {"metadata": row.metadata}, door="api")
    with CaptureQueriesContext(connections[orm.alias]) as queries:
        orm.insert_audited(row, born)

    if orm.vendor == "postgresql":
        assert len(queries.captured_queries) == 1
    stored = Thread.objects.using(orm.alias).get(pk=thread_id)
    assert stored.metadata == {"owner": "alice", "n": 1}
    assert stored.created_at == row.created_at
    assert not row._state.adding
    (event,) = orm.audit_events(thread_id=thread_id)
    assert (event.action, event.actor, event.details) == ("create", "alice", born.details)

    # The same id again: refused, and no second event.
    with pytest.raises(IntegrityError):
        orm.insert_audited(Thread(id=thread_id), born)
    assert len(orm.audit_events(thread_id=thread_id)) == 1


def test_a_run_created_while_the_delete_waits_for_the_row_keeps_the_thread(
    postgres_url: str, thread_id: str, django_db_blocker: Any
) -> None:
    """PostgreSQL: a run is created (thread row locked, a pending run inserted) while the
    delete waits for the row; once it commits, the delete must not take the thread from
    under the run: it reports the thread busy (the service then cancels and retries)."""
    with django_db_blocker.unblock():
        orm = Storage(postgres_url, audit=True)
        steps(orm, thread_id)
        made = busy_thread_rows(orm, thread_id)
        dsn = postgres_url.replace("postgres://", "postgresql://", 1)
        outcome: list[Any] = []

        def delete() -> None:
            try:
                outcome.append(orm.delete_idle_thread(thread_id))
            except Exception as exc:  # noqa: BLE001 - the test reports it
                outcome.append(exc)
            finally:
                connections.close_all()

        with psycopg.connect(dsn) as creator, psycopg.connect(dsn, autocommit=True) as watcher:
            creator.execute("SELECT 1 FROM criogen_thread WHERE id = %s FOR UPDATE", [thread_id])
            # A new pending run on the thread, as create_run inserts it.
            creator.execute(
                "CREATE TEMP TABLE fresh AS SELECT * FROM criogen_run WHERE run_id = %s",
                [made["run"].pk],
            )
            creator.execute("UPDATE fresh SET run_id = gen_random_uuid(), status = 'pending'")
            (fresh,) = creator.execute(
                "INSERT INTO criogen_run SELECT * FROM fresh RETURNING run_id"
            ).fetchone()  # type: ignore[misc]
            creator.execute(
                "UPDATE criogen_thread SET updated_at = now() WHERE id = %s", [thread_id]
            )
            worker = threading.Thread(target=delete)
            worker.start()
            # The delete waits for the row lock the creator holds.
            deadline = time.monotonic() + 30
            waiting = 0
            while not waiting and time.monotonic() < deadline:
                time.sleep(0.01)
                (waiting,) = watcher.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                    " AND wait_event_type = 'Lock'"
                ).fetchone()  # type: ignore[misc]
            assert waiting, "the delete did not wait for the thread's row"
            creator.commit()
            worker.join(30)
        assert outcome == [None]
        assert Thread.objects.using(orm.alias).filter(pk=thread_id).exists()
        assert Run.objects.using(orm.alias).filter(pk=fresh, status="pending").exists()


def test_a_delete_signal_receiver_still_hears_of_the_rows_deleted(orm: Any, thread_id: str) -> None:
    from django.db.models.signals import post_delete

    steps(orm, thread_id)
    made = busy_thread_rows(orm, thread_id)
    heard: list[Any] = []

    def receiver(sender: Any, instance: Any, **kwargs: Any) -> None:
        heard.append(instance.pk)

    post_delete.connect(receiver, sender=Run)
    try:
        assert orm.delete_idle_thread(thread_id) is True
    finally:
        post_delete.disconnect(receiver, sender=Run)
    assert heard == [made["run"].pk]
    assert set(rows_of(orm, thread_id).values()) == {0}


def test_a_save_signal_receiver_still_hears_of_the_new_row(orm: Any, thread_id: str) -> None:
    from django.db.models.signals import post_save

    heard: list[Any] = []

    def receiver(sender: Any, instance: Any, created: bool, **kwargs: Any) -> None:
        heard.append((instance.pk, created))

    row = Thread(id=thread_id)
    born = AuditRecord("create", thread_id, "alice", {}, door="api")
    post_save.connect(receiver, sender=Thread)
    try:
        orm.insert_audited(row, born)
    finally:
        post_save.disconnect(receiver, sender=Thread)
    assert heard == [(thread_id, True)]
    assert [e.action for e in orm.audit_events(thread_id=thread_id)] == ["create"]


# -- a deletion for an owner: the API's, who may see the thread checked in the statement --


def owned_by_someone(orm: Any, thread_id: str) -> int:
    """Give ``thread_id`` a new owner; their primary key."""
    user = get_user_model().objects.db_manager(orm.alias).create_user(f"o-{uuid.uuid4().hex[:8]}")
    Thread.objects.using(orm.alias).filter(pk=thread_id).update(owner=user)
    return int(user.pk)


OWNER_CASES = {
    "own": True,
    "another's": False,
    "own, busy": None,
    "another's, busy": False,  # never None: the caller would cancel another's runs
    "missing": False,
}


def delete_for(orm: Any, case: str) -> tuple[Any, dict[str, int], list[tuple[str, bool]]]:
    """Make the thread of ``case`` and delete it for its owner or another user: the
    answer, the rows left that refer to it, and its events (action, with a ``before``)."""
    thread_id = f"t-{uuid.uuid4()}"
    asking = owned_by_someone(orm, f"{thread_id}-none")  # an owner of no such thread
    if case != "missing":
        steps(orm, thread_id)
        made = busy_thread_rows(orm, thread_id)
        owner = owned_by_someone(orm, thread_id)
        if case.startswith("own"):
            asking = owner
        if case.endswith("busy"):
            Run.objects.using(orm.alias).filter(pk=made["run"].pk).update(status="running")
    gone = AuditRecord("delete", thread_id, "alice", {}, door="api")
    answer = orm.delete_idle_thread_for(thread_id, owner=asking, audit=gone)
    events = [(e.action, bool(e.before)) for e in orm.audit_events(thread_id=thread_id)]
    return answer, rows_of(orm, thread_id), events


@pytest.mark.parametrize("case", OWNER_CASES)
def test_a_deletion_for_an_owner_answers_as_the_collectors_path_does(orm: Any, case: str) -> None:
    from django.db.models.signals import pre_delete

    fast = delete_for(orm, case)

    def receiver(**kwargs: Any) -> None:
        pass

    # A delete receiver sends the deletion through the ORM's collector: the general path.
    pre_delete.connect(receiver, sender=Thread)
    try:
        general = delete_for(orm, case)
    finally:
        pre_delete.disconnect(receiver, sender=Thread)

    assert fast == general
    answer, rows, events = fast
    assert answer is OWNER_CASES[case]
    if answer:
        assert set(rows.values()) == {0}
        assert events == [("delete", True)]
    else:
        assert events == []
        if case != "missing":
            assert sum(rows.values()) >= 9


def test_the_owners_idle_thread_goes_in_one_statement(orm: Any, thread_id: str) -> None:
    steps(orm, thread_id)
    owner = owned_by_someone(orm, thread_id)
    gone = AuditRecord("delete", thread_id, "alice", {}, door="api")
    with CaptureQueriesContext(connections[orm.alias]) as queries:
        assert orm.delete_idle_thread_for(thread_id, owner=owner, audit=gone) is True
    if orm.vendor == "postgresql":
        assert len(queries.captured_queries) == 1
    assert not Thread.objects.using(orm.alias).filter(pk=thread_id).exists()


def test_a_receiver_connected_after_a_deletion_hears_of_the_next(orm: Any) -> None:
    """Whether a receiver listens is kept between deletions: connecting (or
    disconnecting) one is seen at the next."""
    from django.db.models.signals import post_delete

    first, second, third = (f"t-{uuid.uuid4()}" for _ in range(3))
    runs = {}
    for tid in (first, second, third):
        steps(orm, tid)
        runs[tid] = busy_thread_rows(orm, tid)["run"].pk
    assert orm.delete_idle_thread(first) is True
    heard: list[Any] = []

    def receiver(sender: Any, instance: Any, **kwargs: Any) -> None:
        heard.append(instance.pk)

    post_delete.connect(receiver, sender=Run)
    try:
        assert orm.delete_idle_thread(second) is True
    finally:
        post_delete.disconnect(receiver, sender=Run)
    assert heard == [runs[second]]
    with CaptureQueriesContext(connections[orm.alias]) as queries:
        assert orm.delete_idle_thread(third) is True
    if orm.vendor == "postgresql":
        assert len(queries.captured_queries) == 1
    assert heard == [runs[second]]
