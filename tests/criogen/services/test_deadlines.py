"""criogen.services.deadlines: default outcomes and reminders of suspensions."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.core import mail
from django.utils import timezone

from criogen import outbound, registry, runner
from criogen.registry import get_graph
from criogen.selectors import thread_status
from criogen.services.deadlines import _resume_value, fire_deadlines, parse_when
from criogen.services.runs import create_run, retry_thread, wait_run
from criogen.storage.models import DeadlineFiring, Run, Thread

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("inprocess_runner")]

LATER = timedelta(hours=25)


@pytest.fixture(autouse=True)
def _graph(settings: Any) -> Iterator[None]:
    settings.CRIOGEN_ASSISTANTS = {
        **settings.CRIOGEN_ASSISTANTS,
        "deadlines": "tests.criogen.services.deadline_graphs:workflow",
        "deadline-agent": "tests.criogen.services.deadline_graphs:agent",
    }
    registry.reset()
    yield
    registry.reset()


@pytest.fixture
def audit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry.storage(), "audit_enabled", True)


def suspend_with(thread_id: str, webhook: str | None = None, **options: Any) -> Run:
    run = create_run(
        thread_id=thread_id,
        assistant_id="deadlines",
        input={"options": options},
        if_not_exists="create",
        webhook=webhook,
    )
    run = wait_run(run=run, timeout=10)
    assert run.status == "interrupted"
    runner.drain(timeout=10)
    assert outbound.drain(timeout=30)  # the run's own webhook is posted after its status
    return run


def after(delta: timedelta) -> datetime:
    return timezone.now() + delta


def settle(thread_id: str) -> None:
    for run in Run.objects.filter(thread_id=thread_id):
        wait_run(run=run, timeout=10)


@pytest.mark.parametrize(
    ("value", "seconds"),
    [("90s", 90), ("30m", 1800), ("24h", 86400), ("7d", 604800), ("2w", 1209600), (5, 5)],
)
def test_it_reads_durations_after_the_suspension(value: Any, seconds: int) -> None:
    base = datetime(2026, 1, 1, tzinfo=UTC)
    assert parse_when(value, base) == base + timedelta(seconds=seconds)


def test_it_reads_an_iso_time_and_ignores_nonsense() -> None:
    base = datetime(2026, 1, 1, tzinfo=UTC)
    assert parse_when("2026-02-01T10:00:00Z", base) == datetime(2026, 2, 1, 10, tzinfo=UTC)
    assert parse_when("soon", base) is None
    assert parse_when(True, base) is None


def test_a_passed_deadline_resumes_with_the_default_once_as_the_system(
    thread_id: str, audit: None
) -> None:
    suspend_with(thread_id, deadline="24h", default="reject")

    assert fire_deadlines(now=after(LATER)) == {"defaults": 1, "reminders": 0, "overdue": 0}
    assert fire_deadlines(now=after(LATER)) == {"defaults": 0, "reminders": 0, "overdue": 0}
    settle(thread_id)

    # Run.metadata is sealed (a text column, ciphertext with a key): no JSON lookups on it.
    (fired,) = [
        r for r in Run.objects.filter(thread_id=thread_id) if r.metadata.get("reason") == "deadline"
    ]
    assert (fired.status, fired.command) == ("success", {"resume": "reject"})
    assert fired.metadata["resumed_by"] == "system"
    assert get_graph("deadlines").thread(thread_id).state["answer"] == "reject"
    assert DeadlineFiring.objects.get(thread_id=thread_id).run_id == fired.pk
    events = registry.storage().audit_events(thread_id=thread_id)
    # One event: the answer, by the system, from the deadline door.
    assert [(e.action, e.actor, e.door) for e in events] == [("resume", "system", "deadline")]
    assert fire_deadlines(now=after(LATER * 2)) == {"defaults": 0, "reminders": 0, "overdue": 0}


def test_nothing_happens_before_the_deadline(thread_id: str) -> None:
    suspend_with(thread_id, deadline="24h", default="approve")

    assert fire_deadlines(now=after(timedelta(hours=23))) == {
        "defaults": 0,
        "reminders": 0,
        "overdue": 0,
    }
    assert Run.objects.filter(thread_id=thread_id).count() == 1


@pytest.mark.parametrize("options", [{"deadline": "1h", "default": "wait"}, {"deadline": "1h"}])
def test_without_a_default_the_suspension_keeps_waiting(
    thread_id: str, options: dict[str, Any]
) -> None:
    suspend_with(thread_id, **options)

    assert fire_deadlines(now=after(LATER)) == {"defaults": 0, "reminders": 0, "overdue": 0}
    assert Thread.objects.get(pk=thread_id).head_status == "suspended"


def test_default_fail_turns_the_suspension_into_a_failure(thread_id: str) -> None:
    suspend_with(thread_id, deadline="1h", default="fail")

    assert fire_deadlines(now=after(LATER)) == {"defaults": 1, "reminders": 0, "overdue": 0}

    thread = Thread.objects.get(pk=thread_id)
    head = get_graph("deadlines").thread(thread_id).head
    assert thread_status(thread) == "error"
    assert (head.source, head.error["code"], head.error["node"]) == (
        "failure",
        "deadline_passed",
        "ask",
    )
    assert fire_deadlines(now=after(LATER)) == {"defaults": 0, "reminders": 0, "overdue": 0}
    # Retrying asks the person again.
    retried = wait_run(run=retry_thread(thread_id=thread_id, by="alice"), timeout=10)
    assert retried.status == "interrupted"


def test_a_thread_with_a_decision_on_its_way_is_left_alone(thread_id: str) -> None:
    suspend_with(thread_id, deadline="1h", default="approve")
    Run.objects.filter(thread_id=thread_id).update(status="pending")

    assert fire_deadlines(now=after(LATER)) == {"defaults": 0, "reminders": 0, "overdue": 0}
    Run.objects.filter(thread_id=thread_id).update(status="interrupted")


class _Hooks(BaseHTTPRequestHandler):
    received: list[dict[str, Any]] = []

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).received.append(json.loads(body))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def webhook() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    received: list[dict[str, Any]] = []
    handler = type("Hooks", (_Hooks,), {"received": received})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/hook", received
    server.shutdown()
    server.server_close()


def test_a_reminder_emails_the_operators_and_posts_the_runs_webhook_once(
    thread_id: str, webhook: tuple[str, list[dict[str, Any]]], settings: Any
) -> None:
    url, received = webhook
    # Loopback is refused by default: this test's listener is allowed explicitly.
    settings.CRIOGEN_OUTBOUND_ALLOW = ["127.0.0.1"]
    User.objects.create_user("boss", email="boss@example.com", is_staff=True)
    operator = User.objects.create_user("op", email="op@example.com")
    operator.user_permissions.add(Permission.objects.get(codename="operate"))
    User.objects.create_user("viewer", email="viewer@example.com")
    run = suspend_with(thread_id, webhook=url, remind="1h", deadline="24h", default="reject")

    assert fire_deadlines(now=after(timedelta(hours=2))) == {
        "defaults": 0,
        "reminders": 1,
        "overdue": 0,
    }
    assert fire_deadlines(now=after(timedelta(hours=3))) == {
        "defaults": 0,
        "reminders": 0,
        "overdue": 0,
    }
    assert outbound.drain(timeout=30)  # the e-mail and the webhook leave off this thread

    (email,) = mail.outbox
    assert sorted(email.to) == ["boss@example.com", "op@example.com"]
    assert thread_id in email.subject and "approve refund" in email.subject
    assert "then: reject" in email.body
    # The run's webhook also got the run itself when it ended interrupted.
    assert [h["status"] for h in received if "event" not in h] == ["interrupted"]
    (hook,) = [h for h in received if h.get("event") == "reminder"]
    assert (hook["event"], hook["thread_id"], hook["run_id"]) == (
        "reminder",
        thread_id,
        str(run.pk),
    )
    assert hook["interrupt"]["deadline"] == "24h"


def test_an_agent_approval_default_becomes_an_hitl_response() -> None:
    class Head:
        interrupts = ({"id": "i1", "reason": "approval", "calls": [{"id": "c1"}, {"id": "c2"}]},)

    approve = {**Head.interrupts[0], "default": "approve"}
    reject = {**Head.interrupts[0], "default": "reject"}

    assert _resume_value(Head, [approve]) == {"decisions": [{"type": "approve"}] * 2}
    decisions = _resume_value(Head, [reject])["decisions"]
    assert [d["type"] for d in decisions] == ["reject", "reject"]
    assert "deadline" in decisions[0]["message"]


def test_an_agents_per_tool_deadline_rejects_the_call_once_as_the_system(
    thread_id: str, audit: None
) -> None:
    run = create_run(
        thread_id=thread_id,
        assistant_id="deadline-agent",
        input={"messages": [{"type": "human", "content": "refund 42"}]},
        if_not_exists="create",
    )
    assert wait_run(run=run, timeout=10).status == "interrupted"
    (interrupt,) = get_graph("deadline-agent").thread(thread_id).head.interrupts
    assert (interrupt["deadline"], interrupt["default"]) == ("24h", "reject")

    assert fire_deadlines(now=after(LATER)) == {"defaults": 1, "reminders": 0, "overdue": 0}
    assert fire_deadlines(now=after(LATER)) == {"defaults": 0, "reminders": 0, "overdue": 0}
    settle(thread_id)

    thread = get_graph("deadline-agent").thread(thread_id)
    assert thread.head.status == "completed"
    (decision,) = thread.decisions()
    assert (decision.decision, decision.actor) == ("reject", "system")
    tool_message = next(m for m in thread.messages if m["type"] == "tool")
    assert tool_message["status"] == "error" and "deadline" in tool_message["content"]
