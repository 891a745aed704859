"""The door × verb matrix: every operator verb, from every door that offers it, makes the
same change and exactly one audit event naming the actor (``by``) and the door; a second
call with the same stale ``expected`` is refused (``already_decided`` for answers,
``stale_head`` otherwise; 409 over the REST API) and changes nothing — no checkpoint, no
run, no audit event. On SQLite here, and on PostgreSQL through
:func:`test_the_matrix_on_postgresql` (this module again, in a pytest of its own whose
database is PostgreSQL).

The doors, as these tests drive them:

- ``python``: the engine's thread verbs (``thread.resume()``, ``approve()``, …) and
  ``criogen.services`` (what every door calls), actor ``alice`` (a script acting for her);
- ``api``: a real request through Django's test client, with oscar's API token (an
  operator: he may act on every thread);
- ``ui``: the dashboard's real form (``/ui/threads/<id>/act/``, htmx), olga signed in;
- ``deadline``: :func:`criogen.services.deadlines.fire_deadlines` and the TTL sweep
  (:func:`criogen.services.threads.sweep_threads`), actor ``system``;
- ``cron``: :func:`criogen.services.crons.fire_due_crons`, actor ``cron:<id>``.

============================  ======  =======  ======  ========  ======
verb                          python  api      ui      deadline  cron
============================  ======  =======  ======  ========  ======
answer a workflow (resume)    yes     yes      yes     yes       —
approve (agent)               yes     yes      yes     —         —
reject (agent)                yes     yes      yes     yes       —
edit (agent)                  yes     yes      yes     —         —
respond (agent)               yes     yes      —       —         —
rewind                        yes     —        yes     —         —
retry                         yes     —        yes     —         —
update_state                  yes     yes      —       —         —
cancel a run                  yes     yes      —       —         —
delete                        yes     yes      —       yes (TTL) yes
copy                          yes     yes      —       —         —
prune (keep_latest)           yes     yes      —       yes (TTL) —
set TTL                       yes     yes      —       —         —
create thread                 yes     yes      —       —         —
============================  ======  =======  ======  ========  ======

An answer to an agent's approval is audited as ``decide`` from every door and verb
(``approve()``, ``reject()``, ``respond()`` included), the decisions in its details.

A dash is a door that does not offer the verb: the REST API has no rewind or retry (a
run from an earlier ``checkpoint_id`` is a new run, not the rewind verb), the dashboard
answers, rewinds and retries only, the deadline service applies a suspension's default
(this test graph's agent defaults to reject) and the TTL policies, and a cron starts runs
and deletes the stateless threads it made.

Compare-and-set (``expected``) is what answers, rewind, retry and update_state take. The
others: a second delete finds no thread (False / 404) and a second cancel finds an ended
run — both write nothing; a second create with the same id is a Conflict (409) that writes
nothing; copy and prune are not refused (a second copy is a new thread, a second prune
keeps the one checkpoint left), and are asserted as such.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.utils import timezone

from criogen import registry, runner
from criogen.engine.errors import CriogenError
from criogen.registry import get_graph
from criogen.services import crons, deadlines, runs, threads
from criogen.storage.models import AuditEvent, Checkpoint, Run, Thread
from tests.conftest import client_for
from tests.dashboard.conftest import (
    TEST_ASSISTANTS,
    new_thread_id,
    suspended_workflow,
    waiting_agent,
)
from tests.dashboard.test_double_rewind import _completed_thread

__all__ = ["suspended_workflow", "waiting_agent"]  # fixtures reused from the dashboard's

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("inprocess_runner"),
]

BACKEND = os.environ.get("CRIOGEN_VERB_MATRIX_BACKEND", "sqlite")
"""The database this run of the matrix is on (``postgresql`` in the inner pytest)."""

LATER = timedelta(hours=25)
"""Past every deadline of the test graphs (24 h)."""

HX = {"HTTP_HX_REQUEST": "true"}
SCRIPT = "alice"
"""The Python door's actor: a script acting for alice."""


@pytest.fixture(autouse=True)
def _graphs(settings: Any) -> Iterator[None]:
    """The dashboard's test graphs and the deadline graphs, audit on, auth on."""
    settings.CRIOGEN_ASSISTANTS = {
        **TEST_ASSISTANTS,
        "deadlines": "tests.criogen.services.deadline_graphs:workflow",
        "deadline-agent": "tests.criogen.services.deadline_graphs:agent",
    }
    settings.CRIOGEN_AUDIT = True
    settings.CRIOGEN_AUTH_ENABLED = True
    registry.reset()
    registry.storage().audit_enabled = True
    yield
    registry.reset()


@pytest.fixture(autouse=True, scope="module")
def _close_other_sessions(django_db_setup: None, django_db_blocker: Any) -> Iterator[None]:
    """On PostgreSQL, end the sessions the API's worker threads and the runner's keep
    open on the test database, so that pytest-django can drop it afterwards."""
    yield
    if connection.vendor != "postgresql":
        return
    with django_db_blocker.unblock(), connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
    connection.close()


# -- what a call changed -------------------------------------------------------------------


@dataclass(frozen=True)
class Tally:
    """How many rows of each kind there are (the whole database: a copy is a new thread)."""

    checkpoints: int
    runs: int
    audit: int
    threads: int
    last_event: int

    @classmethod
    def now(cls) -> Tally:
        last = AuditEvent.objects.order_by("-pk").values_list("pk", flat=True).first()
        return cls(
            Checkpoint.objects.count(),
            Run.objects.count(),
            AuditEvent.objects.count(),
            Thread.objects.count(),
            last or 0,
        )

    def events_since(self) -> list[tuple[str, str | None, str]]:
        """(action, actor, door) of the audit events written since this tally."""
        return list(
            AuditEvent.objects.filter(pk__gt=self.last_event)
            .order_by("pk")
            .values_list("action", "actor", "door")
        )


def settle() -> None:
    """Wait for the runs a call started (the in-process runner) to end."""
    assert runner.drain(timeout=60), "runs still executing after 60 s"


def head_of(thread_id: str) -> Any:
    return get_graph_thread(thread_id).head


def get_graph_thread(thread_id: str) -> Any:
    graph_id = (Thread.objects.get(pk=thread_id).metadata or {}).get("graph_id")
    return get_graph(graph_id).thread(thread_id)


def refused_code(call: Callable[[], Any]) -> str:
    """The ``code`` of the CriogenError ``call`` raises (it must raise one)."""
    with pytest.raises(CriogenError) as caught:
        call()
    return str(caught.value.code)


# -- the doors -----------------------------------------------------------------------------


@dataclass
class Doors:
    """The REST API (oscar's token) and the dashboard (olga signed in), in-process."""

    web: Client
    ui: Client
    token: str

    def api(self, method: str, path: str, body: Any = None) -> Any:
        call = getattr(self.web, method)
        kwargs: dict[str, Any] = {"headers": {"x-api-key": self.token}}
        if body is not None:
            kwargs.update(data=json.dumps(body), content_type="application/json")
        return call(path, **kwargs)

    def act(self, thread_id: str, form: dict[str, Any]) -> str:
        """Post the thread page's action form (as htmx does); the partial it returns."""
        response = self.ui.post(f"/ui/threads/{thread_id}/act/", form, **HX)
        assert response.status_code == 200, response.content[:500]
        return str(response.content.decode())


@pytest.fixture
def doors(persona: Any) -> Doors:
    from criogen.storage.models import ApiToken

    oscar = persona("oscar")
    token = ApiToken.issue(oscar, name="matrix")[1]
    return Doors(Client(), client_for(persona("olga")), token)


ACTORS = {"python": SCRIPT, "api": "oscar", "ui": "olga", "deadline": "system"}


def _refused_over_http(response: Any, code: str) -> None:
    assert response.status_code == 409, (response.status_code, response.content[:500])
    assert response.json()["code"] == code, response.json()


# -- answers: a workflow's resume ------------------------------------------------------------


@pytest.mark.parametrize(
    "door",
    [
        "python",
        "api",
        "ui",
        "deadline",
    ],
)
def test_resume_a_workflow(door: str, doors: Doors, suspended_workflow: Any) -> None:
    if door == "deadline":
        tid = new_thread_id("dl")
        made = runs.create_run(
            thread_id=tid,
            assistant_id="deadlines",
            input={"options": {"deadline": "24h", "default": "yes"}},
            if_not_exists="create",
        )
        settle()
        assert runs.wait_run(run=made, timeout=10).status == "interrupted"
    else:
        tid = suspended_workflow().pk
    expected = head_of(tid).id
    before = Tally.now()

    def call() -> Any:
        if door == "python":
            return get_graph_thread(tid).resume("yes", by=SCRIPT, door="python", expected=expected)
        if door == "api":
            graph = Thread.objects.get(pk=tid).metadata["graph_id"]
            return doors.api(
                "post",
                f"/threads/{tid}/runs",
                {"assistant_id": graph, "command": {"resume": "yes"}},
            )
        if door == "ui":
            return doors.act(tid, {"resume": "", "value": '"yes"', "expected": expected})
        return deadlines.fire_deadlines(now=timezone.now() + LATER)

    first = call()
    settle()
    if door == "api":
        assert first.status_code == 200, first.content[:500]
    assert get_graph_thread(tid).state["answer"] == "yes"
    assert head_of(tid).status == "completed"
    assert before.events_since() == [("resume", ACTORS[door], door)]

    after = Tally.now()
    if door == "python":
        assert refused_code(call) == "already_decided"
    elif door == "api":
        _refused_over_http(call(), "already_decided")
    elif door == "ui":
        assert "already" in call().lower()
    else:
        assert call() == {"defaults": 0, "reminders": 0, "overdue": 0}
    settle()
    assert Tally.now() == after


# -- answers: an agent's approval ------------------------------------------------------------

DECISIONS: dict[str, dict[str, Any]] = {
    "approve": {"type": "approve"},
    "reject": {"type": "reject", "message": "not this one"},
    "edit": {
        "type": "edit",
        "edited_action": {"name": "issue_refund", "args": {"order_id": "43", "amount": 5.0}},
    },
    "respond": {"type": "respond", "message": "refund handled by phone"},
}
TOOL_SAYS = {
    "approve": "refunded 10.00 EUR on order 42",
    "reject": "not this one",
    "edit": "refunded 5.00 EUR on order 43",
    "respond": "refund handled by phone",
}
UI_FORMS = {
    "approve": {"approve": ""},
    "reject": {"reject": "", "reason": "not this one"},
    "edit": {"edit": "", "args-0": json.dumps({"order_id": "43", "amount": 5.0})},
}


def _tool_results(thread_id: str) -> list[str]:
    messages = get_graph_thread(thread_id).state.get("messages", [])
    return [str(m.get("content")) for m in messages if m.get("type") == "tool"]


@pytest.mark.parametrize(
    ("door", "decision"),
    [
        *[("python", d) for d in DECISIONS],
        *[("api", d) for d in DECISIONS],
        *[("ui", d) for d in UI_FORMS],
        ("deadline", "reject"),
    ],
)
def test_answer_an_agent(door: str, decision: str, doors: Doors, waiting_agent: Any) -> None:
    if door == "deadline":
        tid = new_thread_id("dla")
        message = {"type": "human", "content": "refund order 42"}
        runs.create_run(
            thread_id=tid,
            assistant_id="deadline-agent",
            input={"messages": [message]},
            if_not_exists="create",
        )
        settle()
    else:
        tid = waiting_agent().pk
    head = head_of(tid)
    assert head.status == "suspended"
    expected = head.id
    before = Tally.now()

    def call() -> Any:
        if door == "python":
            agent = get_graph_thread(tid)
            options = {"by": SCRIPT, "door": "python", "expected": expected}
            if decision == "approve":
                return agent.approve(**options)
            if decision == "reject":
                return agent.reject("not this one", **options)
            if decision == "respond":
                return agent.respond("refund handled by phone", **options)
            return agent.resume({"decisions": [DECISIONS["edit"]]}, **options)
        if door == "api":
            graph = Thread.objects.get(pk=tid).metadata["graph_id"]
            command = {"resume": {"decisions": [DECISIONS[decision]]}}
            return doors.api(
                "post", f"/threads/{tid}/runs", {"assistant_id": graph, "command": command}
            )
        if door == "ui":
            return doors.act(tid, {**UI_FORMS[decision], "expected": expected})
        return deadlines.fire_deadlines(now=timezone.now() + LATER)

    first = call()
    settle()
    if door == "api":
        assert first.status_code == 200, first.content[:500]
    said = _tool_results(tid)
    if door == "deadline":
        assert any("rejected by the system" in s for s in said), said
    else:
        assert any(TOOL_SAYS[decision] in s for s in said), said
    assert head_of(tid).status == "completed"
    events = before.events_since()
    # One verb for one action: every door audits an answer to an approval as "decide",
    # with the decision it recorded in the event's details.
    assert events == [("decide", ACTORS[door], door)], events
    (event,) = [e for e in registry.storage().audit_events(thread_id=tid) if e.action == "decide"]
    recorded = event.details["decisions"]
    assert [d["type"] for d in recorded] == ["reject" if door == "deadline" else decision]

    after = Tally.now()
    if door == "python":
        assert refused_code(call) == "already_decided"
    elif door == "api":
        _refused_over_http(call(), "already_decided")
    elif door == "ui":
        assert "already" in call().lower()
    else:
        assert call() == {"defaults": 0, "reminders": 0, "overdue": 0}
    settle()
    assert Tally.now() == after


# -- rewind and retry ------------------------------------------------------------------------


@pytest.mark.parametrize("door", ["python", "ui"])
def test_rewind(door: str, doors: Doors) -> None:
    tid = _completed_thread().pk
    first = Checkpoint.objects.filter(thread_id=tid).order_by("version").first()
    assert first is not None
    target = get_graph_thread(tid).checkpoint(first.pk)
    expected = head_of(tid).id
    before = Tally.now()

    def call() -> Any:
        if door == "python":
            return get_graph_thread(tid).rewind(
                first.pk, by=SCRIPT, door="python", expected=expected
            )
        return doors.act(tid, {"rewind": "", "checkpoint": first.pk, "expected": expected})

    call()
    head = head_of(tid)
    assert (head.source, head.state) == ("fork", target.state)
    assert before.events_since() == [("rewind", ACTORS[door], door)]
    after = Tally.now()
    if door == "python":
        assert refused_code(call) == "stale_head"
    else:
        assert "moved on" in call()
    assert Tally.now() == after


def _failed_thread() -> str:
    """A ``flaky`` thread whose first run failed (a retry succeeds: the order has an id)."""
    tid = new_thread_id("fail")
    with pytest.raises(CriogenError):
        get_graph("flaky").thread(tid).run({"explode": True, "order": tid}, durability="sync")
    Thread.objects.filter(pk=tid).update(metadata={"graph_id": "flaky"})
    return tid


@pytest.mark.parametrize("door", ["python", "ui"])
def test_retry(door: str, doors: Doors) -> None:
    tid = _failed_thread()
    expected = head_of(tid).id
    assert head_of(tid).status == "failed"
    before = Tally.now()

    def call() -> Any:
        if door == "python":
            return get_graph_thread(tid).retry(by=SCRIPT, door="python", expected=expected)
        return doors.act(tid, {"retry": "", "expected": expected})

    call()
    settle()
    assert head_of(tid).status == "completed"
    assert get_graph_thread(tid).state["charged"] is True
    assert before.events_since() == [("retry", ACTORS[door], door)]
    after = Tally.now()
    if door == "python":
        assert refused_code(call) == "stale_head"
    else:
        assert "moved on" in call()
    settle()
    assert Tally.now() == after


# -- update_state ----------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["workflow", "agent"])
@pytest.mark.parametrize("door", ["python", "api"])
def test_update_state(door: str, kind: str, doors: Doors, waiting_agent: Any) -> None:
    tid = _completed_thread().pk if kind == "workflow" else waiting_agent().pk
    values = {"n": 41} if kind == "workflow" else {"vip": True}
    expected = head_of(tid).id
    before = Tally.now()

    def call() -> Any:
        if door == "python":
            return get_graph_thread(tid).update_state(
                values, by=SCRIPT, door="python", expected=expected
            )
        return doors.api(
            "post", f"/threads/{tid}/state", {"values": values, "checkpoint_id": expected}
        )

    first = call()
    if door == "api":
        assert first.status_code == 200, first.content[:500]
    head = head_of(tid)
    assert head.source == "fork"
    assert {k: head.state[k] for k in values} == values
    assert before.events_since() == [("update_state", ACTORS[door], door)]
    after = Tally.now()
    if door == "python":
        assert refused_code(call) == "stale_head"
    else:
        _refused_over_http(call(), "stale_head")
    assert Tally.now() == after


# -- cancel ---------------------------------------------------------------------------------


@pytest.mark.parametrize("door", ["python", "api"])
def test_cancel_a_run(door: str, doors: Doors) -> None:
    tid = _completed_thread().pk
    run = runs.create_run(thread_id=tid, assistant_id="steps", input={"sleep": 2})
    before = Tally.now()

    def call() -> Any:
        if door == "python":
            return runs.cancel_run(run=run, by=SCRIPT, door="python")
        return doors.api("post", f"/threads/{tid}/runs/{run.run_id}/cancel")

    first = call()
    if door == "api":
        assert first.status_code in (200, 202, 204), first.content[:500]
    settle()
    run.refresh_from_db()
    assert (run.status, run.cancelled_by) == ("interrupted", ACTORS[door])
    assert before.events_since() == [("cancel", ACTORS[door], door)]
    after = Tally.now()
    second = call()
    if door == "api":
        assert second.status_code < 500, second.content[:500]
    settle()
    assert Tally.now() == after


# -- delete, copy, prune ----------------------------------------------------------------------


def _expire(tid: str, strategy: str) -> None:
    Thread.objects.filter(pk=tid).update(
        ttl_minutes=5, ttl_strategy=strategy, expires_at=timezone.now() - timedelta(seconds=1)
    )


@pytest.mark.parametrize("door", ["python", "api", "deadline"])
def test_delete(door: str, doors: Doors) -> None:
    tid = _completed_thread().pk
    before = Tally.now()

    def call() -> Any:
        if door == "python":
            return threads.delete_thread(thread_id=tid, by=SCRIPT, door="python")
        if door == "api":
            return doors.api("delete", f"/threads/{tid}")
        _expire(tid, "delete")
        return threads.sweep_threads()

    first = call()
    assert first in (True, {"deleted": 1, "pruned": 0}) or first.status_code == 204
    assert not Thread.objects.filter(pk=tid).exists()
    assert not Checkpoint.objects.filter(thread_id=tid).exists()
    assert before.events_since() == [("delete", ACTORS[door], door)]
    after = Tally.now()
    second = call()
    if door == "api":
        assert second.status_code == 404
    else:
        assert second in (False, {"deleted": 0, "pruned": 0})
    assert Tally.now() == after


def test_delete_from_a_cron(owner: Any) -> None:
    """A stateless cron's run deletes its thread when it ends: one ``delete`` by
    ``cron:<id>``, door ``cron``; firing the same tick again starts nothing."""
    cron = crons.create_cron(
        assistant_id="steps",
        thread_id=None,
        schedule="* * * * *",
        payload={"input": {"n": 0}},
        on_run_completed="delete",
        owner=owner,
    )
    before = Tally.now()
    when = timezone.now() + timedelta(minutes=2)
    (run_id,) = crons.fire_due_crons(now=when)
    settle()
    # One read: the run goes with its thread, which may be deleted by now (then the
    # audit below says by whom).
    tid = Run.objects.filter(pk=run_id).values_list("thread_id", flat=True).first()
    deadline = time.monotonic() + 30
    while tid is not None and Thread.objects.filter(pk=tid).exists():
        assert time.monotonic() < deadline, "the cron's thread was not deleted"
        time.sleep(0.05)
    assert before.events_since() == [("delete", f"cron:{cron.cron_id}", "cron")]
    after = Tally.now()
    assert crons.fire_due_crons(now=when) == []
    settle()
    assert Tally.now() == after


@pytest.mark.parametrize("door", ["python", "api"])
def test_copy(door: str, doors: Doors) -> None:
    tid = _completed_thread().pk
    source = head_of(tid)
    before = Tally.now()

    def call() -> str:
        if door == "python":
            return threads.copy_thread(thread_id=tid, by=SCRIPT, door="python")
        response = doors.api("post", f"/threads/{tid}/copy")
        assert response.status_code == 200, response.content[:500]
        return str(response.json()["thread_id"])

    new = call()
    assert new != tid
    assert Checkpoint.objects.filter(thread_id=new).count() == source.version
    assert head_of(new).state == source.state
    assert before.events_since() == [("copy", ACTORS[door], door)]
    assert AuditEvent.objects.get(pk__gt=before.last_event).thread_id == new
    # Not compare-and-set: a second copy is another new thread, audited once more.
    again = Tally.now()
    assert call() not in (tid, new)
    assert again.events_since() == [("copy", ACTORS[door], door)]


@pytest.mark.parametrize("door", ["python", "api", "deadline"])
def test_prune(door: str, doors: Doors) -> None:
    tid = _completed_thread().pk
    state = head_of(tid).state
    assert Checkpoint.objects.filter(thread_id=tid).count() > 1
    before = Tally.now()

    def call() -> Any:
        if door == "python":
            return threads.prune_thread(
                thread_id=tid, strategy="keep_latest", by=SCRIPT, door="python"
            )
        if door == "api":
            body = {"thread_ids": [tid], "strategy": "keep_latest"}
            response = doors.api("post", "/threads/prune", body)
            assert response.status_code == 200, response.content[:500]
            return response.json()
        _expire(tid, "keep_latest")
        return threads.sweep_threads()

    pruned = call()
    assert pruned == "pruned" or {k: pruned[k] for k in ("pruned", "deleted")} == {
        "pruned": 1,
        "deleted": 0,
    }
    assert Checkpoint.objects.filter(thread_id=tid).count() == 1
    assert head_of(tid).state == state
    assert before.events_since() == [("prune", ACTORS[door], door)]
    # Not compare-and-set: pruning again keeps the one checkpoint left.
    call()
    assert Checkpoint.objects.filter(thread_id=tid).count() == 1
    assert head_of(tid).state == state


# -- set TTL and create thread -------------------------------------------------------------


def _set_ttl(door: str, doors: Doors, tid: str) -> None:
    if door == "python":
        threads.set_thread_ttl(
            thread=Thread.objects.get(pk=tid), minutes=60, strategy="delete", by=SCRIPT
        )
    else:
        response = doors.api("patch", f"/threads/{tid}", {"ttl": 60})
        assert response.status_code == 200, response.content[:500]


@pytest.mark.parametrize("door", ["python", "api"])
def test_set_ttl(door: str, doors: Doors) -> None:
    tid = _completed_thread().pk
    before = Tally.now()
    _set_ttl(door, doors, tid)
    row = Thread.objects.get(pk=tid)
    assert (row.ttl_minutes, row.ttl_strategy) == (60, "delete")
    assert timedelta(minutes=59) < row.expires_at - timezone.now() <= timedelta(minutes=60)
    assert (Tally.now().checkpoints, Tally.now().runs) == (before.checkpoints, before.runs)


@pytest.mark.parametrize("door", ["python", "api"])
def test_set_ttl_is_audited(door: str, doors: Doors) -> None:
    tid = _completed_thread().pk
    before = Tally.now()
    _set_ttl(door, doors, tid)
    assert [(actor, d) for _, actor, d in before.events_since()] == [(ACTORS[door], door)]


def _create(door: str, doors: Doors, tid: str, owner: Any) -> Any:
    if door == "python":
        from criogen.selectors import viewer

        return threads.create_thread(who=viewer(owner), thread_id=tid)
    return doors.api("post", "/threads", {"thread_id": tid})


@pytest.mark.parametrize("door", ["python", "api"])
def test_create_thread(door: str, doors: Doors, owner: Any) -> None:
    tid = f"new-{uuid.uuid4().hex[:10]}"
    made = _create(door, doors, tid, owner)
    if door == "api":
        assert made.status_code == 200, made.content[:500]
    row = Thread.objects.get(pk=tid)
    assert row.owner.get_username() == ("alice" if door == "python" else "oscar")
    after = Tally.now()
    if door == "python":
        assert refused_code(lambda: _create(door, doors, tid, owner)) == "conflict"
    else:
        _refused_over_http(_create(door, doors, tid, owner), "conflict")
    assert Tally.now() == after


@pytest.mark.parametrize("door", ["python", "api"])
def test_create_thread_is_audited(door: str, doors: Doors, owner: Any) -> None:
    before = Tally.now()
    _create(door, doors, f"new-{uuid.uuid4().hex[:10]}", owner)
    assert [(actor, d) for _, actor, d in before.events_since()] == [(ACTORS[door], door)]


# -- the same matrix on PostgreSQL -----------------------------------------------------------


def test_the_database_is_the_one_asked_for() -> None:
    assert connection.vendor == BACKEND


@pytest.mark.postgres
@pytest.mark.skipif(BACKEND != "sqlite", reason="the inner run itself")
def test_the_matrix_on_postgresql() -> None:
    """This module in a pytest of its own whose database is PostgreSQL."""
    from tests.servers import run_module_on_postgresql

    done = run_module_on_postgresql(__file__, {"CRIOGEN_VERB_MATRIX_BACKEND": "postgresql"})
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
