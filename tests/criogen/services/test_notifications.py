"""criogen.services.notifications: an assistant's ``metadata.notify`` is told, once, when
one of its runs leaves the thread suspended, and when a claimed suspension waits past
its deadline: a Slack-compatible webhook (a real loopback listener) and an e-mail
(Django's locmem backend), through criogen.outbound (retries, OutboundAttempt rows),
with an audit event committed together with the once-row. In process on the test
database: SQLite, and PostgreSQL through :func:`test_this_module_on_postgresql` (this
module again, in a pytest of its own whose database is PostgreSQL; the API test,
tests/api/test_notifications.py, runs on both too)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core import mail
from django.db import connection
from django.utils import timezone

from criogen import outbound, registry, runner
from criogen.engine.errors import InvalidArgument
from criogen.services.assistants import create_assistant, update_assistant
from criogen.services.claims import claim_thread
from criogen.services.deadlines import fire_deadlines
from criogen.services.notifications import notify_suspension
from criogen.services.runs import create_run, wait_run
from criogen.storage.models import Claim, DeadlineFiring, OutboundAttempt, Run
from tests.listeners import Listener

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("inprocess_runner")]

INNER = "CRIOGEN_NOTIFICATIONS_ON_POSTGRESQL"
"""Set in the inner run of this module on PostgreSQL."""


@pytest.fixture(autouse=True)
def _graph(settings: Any) -> Iterator[None]:
    settings.CRIOGEN_ASSISTANTS = {
        **settings.CRIOGEN_ASSISTANTS,
        "deadlines": "tests.criogen.services.deadline_graphs:workflow",
    }
    # Loopback is refused by default: this test's listener is allowed explicitly.
    settings.CRIOGEN_OUTBOUND_ALLOW = ["127.0.0.1"]
    settings.CRIOGEN_OUTBOUND_BACKOFF_SECONDS = 0.05
    settings.CRIOGEN_PUBLIC_URL = "https://criogen.example.com"
    registry.reset()
    yield
    registry.reset()


@pytest.fixture
def listener() -> Iterator[Listener]:
    hooks = Listener()
    yield hooks
    hooks.close()


@pytest.fixture
def audit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry.storage(), "audit_enabled", True)


def suspend(thread_id: str, assistant_id: str, **options: Any) -> Run:
    run = create_run(
        thread_id=thread_id,
        assistant_id=assistant_id,
        input={"options": options},
        if_not_exists="create",
    )
    run = wait_run(run=run, timeout=10)
    assert run.status == "interrupted"
    runner.drain(timeout=10)
    assert outbound.drain(timeout=30)
    return run


def test_a_suspension_posts_one_slack_compatible_webhook_and_one_email(
    thread_id: str, listener: Listener, audit: None
) -> None:
    url = f"http://127.0.0.1:{listener.port}/hook"
    assistant = create_assistant(
        graph_id="deadlines",
        name="Refunds",
        metadata={"notify": {"webhook": url, "email": ["ops@example.com"]}},
    )
    run = suspend(thread_id, str(assistant.assistant_id))

    (hook,) = [r["body"] for r in listener.received]
    page = f"https://criogen.example.com/ui/threads/{thread_id}/"
    assert hook["text"].startswith("Waiting for a decision: approve refund (Refunds")
    assert f"<{page}|open the thread>" in hook["text"]
    assert (hook["event"], hook["thread_id"], hook["run_id"], hook["url"]) == (
        "suspension",
        thread_id,
        str(run.pk),
        page,
    )
    assert hook["assistant_id"] == str(assistant.assistant_id)
    assert hook["graph_id"] == "deadlines"
    assert hook["interrupts"][0]["reason"] == "approve refund"
    head = registry.get_graph("deadlines").thread(thread_id).head
    assert hook["checkpoint_id"] == head.id

    (email,) = mail.outbox
    assert email.to == ["ops@example.com"]
    assert thread_id in email.subject and "approve refund" in email.subject
    assert page in email.body

    rows = OutboundAttempt.objects.filter(thread_id=thread_id).order_by("kind")
    assert [(r.kind, r.outcome, r.attempt) for r in rows] == [
        ("email", "delivered", 1),
        ("notify", "delivered", 1),
    ]
    events = registry.storage().audit_events(thread_id=thread_id)
    (notified,) = [e for e in events if e.action == "notify"]
    assert (notified.actor, notified.details["checkpoint_id"]) == ("system", head.id)
    assert notified.details["email"] == ["ops@example.com"]

    # Once per suspension: a second call (a retried hook, another worker) sends nothing.
    assert notify_suspension(run.pk) is False
    assert outbound.drain(timeout=30)
    assert len(listener.received) == 1 and len(mail.outbox) == 1
    assert DeadlineFiring.objects.filter(thread_id=thread_id, kind="notify").count() == 1


def test_a_failing_webhook_is_retried_with_backoff(thread_id: str) -> None:
    hooks = Listener(statuses=[500])
    try:
        url = f"http://127.0.0.1:{hooks.port}/hook"
        assistant = create_assistant(graph_id="deadlines", metadata={"notify": {"webhook": url}})
        suspend(thread_id, str(assistant.assistant_id))
        assert [r["body"]["event"] for r in hooks.received] == ["suspension", "suspension"]
    finally:
        hooks.close()
    rows = OutboundAttempt.objects.filter(thread_id=thread_id, kind="notify").order_by("attempt")
    assert [(r.attempt, r.outcome, r.status_code) for r in rows] == [
        (1, "failed", 500),
        (2, "delivered", 204),
    ]
    assert rows[0].retry_at is not None
    assert mail.outbox == []


def test_nothing_is_sent_for_an_assistant_without_notify(thread_id: str, audit: None) -> None:
    assistant = create_assistant(graph_id="deadlines", metadata={"team": "refunds"})
    run = suspend(thread_id, str(assistant.assistant_id))

    assert notify_suspension(run.pk) is False
    assert not OutboundAttempt.objects.filter(thread_id=thread_id).exists()
    assert not DeadlineFiring.objects.filter(thread_id=thread_id).exists()
    assert mail.outbox == []
    events = registry.storage().audit_events(thread_id=thread_id)
    assert "notify" not in [e.action for e in events]


def test_a_reminder_also_reaches_the_assistants_channels(
    thread_id: str, listener: Listener
) -> None:
    """And a claimed suspension waiting past its reminder names its holder, who gets the
    e-mail too."""
    url = f"http://127.0.0.1:{listener.port}/hook"
    assistant = create_assistant(
        graph_id="deadlines",
        metadata={"notify": {"webhook": url, "email": "ops@example.com"}},
    )
    suspend(thread_id, str(assistant.assistant_id), remind="1h", deadline="24h")
    holder = User.objects.create_user("olga", email="olga@example.com", is_staff=True)
    claim_thread(thread_id, by=holder, door="ui")
    later = timezone.now() + timedelta(hours=2)

    assert fire_deadlines(now=later) == {"defaults": 0, "reminders": 1, "overdue": 0}
    assert fire_deadlines(now=later) == {"defaults": 0, "reminders": 0, "overdue": 0}
    assert outbound.drain(timeout=30)

    assert [r["body"]["event"] for r in listener.received] == ["suspension", "reminder"]
    reminder = listener.received[1]["body"]
    assert reminder["text"].startswith("Waiting for a decision: approve refund")
    assert reminder["interrupts"][0]["deadline"] == "24h"
    assert reminder["claimed_by"] == "olga" and "claimed by olga since" in reminder["text"]
    # The suspension's e-mail; then the operators' own reminder (olga is staff) and the
    # assistant's, sent side by side.
    assert mail.outbox[0].to == ["ops@example.com"]
    reminders = sorted(mail.outbox[1:], key=lambda m: len(m.to))
    assert [m.to for m in reminders] == [
        ["olga@example.com"],
        ["ops@example.com", "olga@example.com"],
    ]
    assert "Deadline: 24h" in reminders[1].body and "claimed by olga" in reminders[1].subject


@pytest.mark.parametrize(
    ("notify", "field"),
    [
        ("https://hooks.example.com", "metadata.notify"),
        ({"slack": "https://hooks.example.com"}, "metadata.notify"),
        ({"webhook": "ftp://hooks.example.com/x"}, "metadata.notify.webhook"),
        ({"webhook": 42}, "metadata.notify.webhook"),
        ({"email": "not an address"}, "metadata.notify.email"),
        ({"email": ["ops@example.com", 7]}, "metadata.notify.email"),
        ({"email": {"to": "ops@example.com"}}, "metadata.notify.email"),
        ({"claimed_overdue_seconds": 0}, "metadata.notify.claimed_overdue_seconds"),
        ({"claimed_overdue_seconds": "1h"}, "metadata.notify.claimed_overdue_seconds"),
        ({"claimed_overdue_seconds": True}, "metadata.notify.claimed_overdue_seconds"),
    ],
)
def test_a_bad_notify_setting_is_refused_naming_the_field(notify: Any, field: str) -> None:
    with pytest.raises(InvalidArgument) as raised:
        create_assistant(graph_id="deadlines", metadata={"notify": notify})
    assert raised.value.details["field"] == field
    assistant = create_assistant(graph_id="deadlines")
    with pytest.raises(InvalidArgument) as raised:
        update_assistant(assistant_id=str(assistant.assistant_id), metadata={"notify": notify})
    assert raised.value.details["field"] == field


def test_the_notification_is_not_taken_for_an_answer(
    thread_id: str, listener: Listener, audit: None
) -> None:
    """``who_decided`` reads the first audit event after a suspension as its answer when
    nothing else names one: the system's ``notify`` event must not count."""
    from criogen.selectors.audit import who_decided
    from criogen.storage.models import Thread

    url = f"http://127.0.0.1:{listener.port}/hook"
    assistant = create_assistant(graph_id="deadlines", metadata={"notify": {"webhook": url}})
    suspend(thread_id, str(assistant.assistant_id))
    head = registry.get_graph("deadlines").thread(thread_id).head
    events = registry.storage().audit_events(thread_id=thread_id)
    assert "notify" in [e.action for e in events]

    assert who_decided(Thread.objects.get(pk=thread_id), head.id)[0] == ""


def test_the_link_is_the_dashboards_thread_page_for_any_thread_id() -> None:
    """The dashboard's own route (a "/" in an id is spelled ~2F there), absolute with
    CRIOGEN_PUBLIC_URL."""
    from django.test import override_settings

    from criogen.services.notifications import thread_url

    with override_settings(CRIOGEN_PUBLIC_URL=""):
        assert thread_url("t-1") == "/ui/threads/t-1/"
        assert thread_url("team/a b") == "/ui/threads/team~2Fa%20b/"
    with override_settings(CRIOGEN_PUBLIC_URL="https://criogen.example.com/"):
        assert thread_url("t-1") == "https://criogen.example.com/ui/threads/t-1/"


# -- one transaction: the once-row, the audit event, the calls ------------------------------


class RefusedAuditInsert:
    """A database trigger that makes the insert of one thread's ``action`` audit event
    fail: a real failure between the once-row and the audit event, on SQLite and
    PostgreSQL alike."""

    def __init__(self, thread_id: str, action: str = "notify") -> None:
        self.name = f"refuse_{action}_{uuid.uuid4().hex[:12]}"
        self.when = f"NEW.action = '{action}' AND NEW.thread_id = '{thread_id}'"

    def __enter__(self) -> RefusedAuditInsert:
        when = self.when
        with connection.cursor() as cursor:
            if connection.vendor == "postgresql":
                cursor.execute(
                    f"CREATE FUNCTION {self.name}() RETURNS trigger AS $$ BEGIN "
                    f"IF {when} THEN RAISE EXCEPTION 'injected failure'; END IF; "
                    "RETURN NEW; END $$ LANGUAGE plpgsql"
                )
                cursor.execute(
                    f"CREATE TRIGGER {self.name} BEFORE INSERT ON criogen_audit_event "
                    f"FOR EACH ROW EXECUTE FUNCTION {self.name}()"
                )
            else:
                cursor.execute(
                    f"CREATE TRIGGER {self.name} BEFORE INSERT ON criogen_audit_event "
                    f"WHEN {when} BEGIN SELECT RAISE(ABORT, 'injected failure'); END"
                )
        return self

    def __exit__(self, *exc: object) -> None:
        with connection.cursor() as cursor:
            if connection.vendor == "postgresql":
                cursor.execute(f"DROP TRIGGER {self.name} ON criogen_audit_event")
                cursor.execute(f"DROP FUNCTION {self.name}()")
            else:
                cursor.execute(f"DROP TRIGGER {self.name}")


def test_a_failure_before_the_audit_event_records_nothing_and_the_retry_notifies_once(
    thread_id: str, listener: Listener, audit: None
) -> None:
    """Before, the once-row committed on its own: a failure at the audit event left the
    suspension marked as notified, unaudited, and nothing was ever sent."""
    url = f"http://127.0.0.1:{listener.port}/hook"
    assistant = create_assistant(
        graph_id="deadlines", metadata={"notify": {"webhook": url, "email": "ops@example.com"}}
    )
    with RefusedAuditInsert(thread_id):
        run = suspend(thread_id, str(assistant.assistant_id))  # the runner's notify fails

    assert not DeadlineFiring.objects.filter(thread_id=thread_id).exists()
    assert "notify" not in [e.action for e in registry.storage().audit_events(thread_id=thread_id)]
    assert listener.received == [] and mail.outbox == []
    assert not OutboundAttempt.objects.filter(thread_id=thread_id).exists()

    # The next try (another worker, a retried hook) notifies, once.
    assert notify_suspension(run.pk) is True
    assert notify_suspension(run.pk) is False
    assert outbound.drain(timeout=30)
    assert [r["body"]["event"] for r in listener.received] == ["suspension"]
    assert [m.to for m in mail.outbox] == [["ops@example.com"]]
    assert DeadlineFiring.objects.filter(thread_id=thread_id, kind="notify").count() == 1
    events = registry.storage().audit_events(thread_id=thread_id)
    assert [e.details["event"] for e in events if e.action == "notify"] == ["suspension"]


def test_a_failed_reminder_records_nothing_and_the_next_sweep_sends_it_once(
    thread_id: str, listener: Listener, audit: None
) -> None:
    url = f"http://127.0.0.1:{listener.port}/hook"
    assistant = create_assistant(graph_id="deadlines", metadata={"notify": {"webhook": url}})
    suspend(thread_id, str(assistant.assistant_id), remind="1h")
    later = timezone.now() + timedelta(hours=2)
    with (
        RefusedAuditInsert(thread_id, "deadline_reminder"),
        pytest.raises(Exception, match="injected"),
    ):
        fire_deadlines(now=later)
    assert outbound.drain(timeout=30)
    assert [r["body"]["event"] for r in listener.received] == ["suspension"]
    assert not DeadlineFiring.objects.filter(thread_id=thread_id, kind="reminder").exists()

    assert fire_deadlines(now=later) == {"defaults": 0, "reminders": 1, "overdue": 0}
    assert fire_deadlines(now=later) == {"defaults": 0, "reminders": 0, "overdue": 0}
    assert outbound.drain(timeout=30)
    assert [r["body"]["event"] for r in listener.received] == ["suspension", "reminder"]


# -- overdue: a claimed suspension past its deadline -------------------------------------------


def claimed(thread_id: str, listener: Listener, metadata: dict[str, Any], **options: Any) -> User:
    url = f"http://127.0.0.1:{listener.port}/hook"
    notify = {"webhook": url, "email": "ops@example.com", **metadata}
    assistant = create_assistant(graph_id="deadlines", name="Refunds", metadata={"notify": notify})
    suspend(thread_id, str(assistant.assistant_id), **options)
    holder = User.objects.create_user(f"olga-{thread_id[-8:]}", email="olga@example.com")
    claim_thread(thread_id, by=holder, door="ui")
    mail.outbox.clear()
    return holder


def test_a_claimed_suspension_past_its_deadline_notifies_once_naming_the_holder(
    thread_id: str, audit: None
) -> None:
    hooks = Listener(statuses=[204, 500])  # the overdue call fails once: retried
    try:
        holder = claimed(thread_id, hooks, {}, deadline="24h")
        name = holder.get_username()
        before = timezone.now() + timedelta(hours=23)
        later = timezone.now() + timedelta(hours=25)

        assert fire_deadlines(now=before) == {"defaults": 0, "reminders": 0, "overdue": 0}
        assert fire_deadlines(now=later) == {"defaults": 0, "reminders": 0, "overdue": 1}
        assert fire_deadlines(now=later) == {"defaults": 0, "reminders": 0, "overdue": 0}
        assert outbound.drain(timeout=30)
        events = [r["body"] for r in hooks.received]
    finally:
        hooks.close()

    assert [e["event"] for e in events] == ["suspension", "overdue", "overdue"]
    overdue = events[1]
    assert overdue["text"].startswith("Overdue: approve refund (Refunds, thread ")
    assert f"claimed by {name} since " in overdue["text"]
    assert (overdue["claimed_by"], overdue["default"], overdue["thread_id"]) == (
        name,
        None,
        thread_id,
    )
    assert overdue["claimed_since"] and overdue["due"]
    assert overdue["interrupts"][0]["deadline"] == "24h"
    rows = OutboundAttempt.objects.filter(thread_id=thread_id, kind="notify").order_by(
        "created_at", "attempt"
    )
    assert [(r.attempt, r.outcome) for r in rows] == [
        (1, "delivered"),
        (1, "failed"),
        (2, "delivered"),
    ]
    (email,) = mail.outbox
    assert email.to == ["ops@example.com", "olga@example.com"]
    assert "still waiting" in email.body and f"claimed by {name}" in email.subject
    (fired,) = DeadlineFiring.objects.filter(thread_id=thread_id, kind="overdue")
    assert fired.interrupt_id == overdue["interrupts"][0]["id"]
    (event,) = [
        e
        for e in registry.storage().audit_events(thread_id=thread_id)
        if e.action == "notify" and e.details["event"] == "overdue"
    ]
    assert (event.actor, event.details["claimed_by"]) == ("system", name)
    assert event.details["email"] == ["ops@example.com", "olga@example.com"]


def test_an_unclaimed_suspension_past_its_deadline_is_not_overdue(
    thread_id: str, listener: Listener
) -> None:
    url = f"http://127.0.0.1:{listener.port}/hook"
    assistant = create_assistant(graph_id="deadlines", metadata={"notify": {"webhook": url}})
    suspend(thread_id, str(assistant.assistant_id), deadline="1h")

    assert fire_deadlines(now=timezone.now() + timedelta(hours=2))["overdue"] == 0
    assert outbound.drain(timeout=30)
    assert [r["body"]["event"] for r in listener.received] == ["suspension"]


def test_an_overdue_claim_whose_default_applies_says_so_and_the_default_applies(
    thread_id: str, listener: Listener
) -> None:
    claimed(thread_id, listener, {}, deadline="1h", default="reject")

    later = timezone.now() + timedelta(hours=2)
    assert fire_deadlines(now=later) == {"defaults": 1, "reminders": 0, "overdue": 1}
    runner.drain(timeout=10)
    assert outbound.drain(timeout=30)

    overdue = next(r["body"] for r in listener.received if r["body"]["event"] == "overdue")
    assert overdue["default"] == "reject"
    assert 'the default "reject" applies now' in mail.outbox[0].body
    assert registry.get_graph("deadlines").thread(thread_id).state["answer"] == "reject"


def test_without_a_deadline_a_claim_is_overdue_after_claimed_overdue_seconds(
    thread_id: str, listener: Listener
) -> None:
    holder = claimed(thread_id, listener, {"claimed_overdue_seconds": 3600})
    claim = Claim.objects.get(thread_id=thread_id)
    assert fire_deadlines(now=claim.since + timedelta(minutes=59))["overdue"] == 0
    assert fire_deadlines(now=claim.since + timedelta(minutes=61))["overdue"] == 1
    assert fire_deadlines(now=claim.since + timedelta(hours=5))["overdue"] == 0
    assert outbound.drain(timeout=30)

    events = [r["body"] for r in listener.received]
    assert [e["event"] for e in events] == ["suspension", "overdue"]
    assert events[1]["claimed_by"] == holder.get_username()
    assert events[1]["due"] == (claim.since + timedelta(hours=1)).isoformat()
    (fired,) = DeadlineFiring.objects.filter(thread_id=thread_id, kind="overdue")
    assert fired.interrupt_id == ""


def test_without_a_deadline_or_the_setting_a_claim_is_never_overdue(
    thread_id: str, listener: Listener
) -> None:
    claimed(thread_id, listener, {})

    assert fire_deadlines(now=timezone.now() + timedelta(days=30))["overdue"] == 0
    assert outbound.drain(timeout=30)
    assert [r["body"]["event"] for r in listener.received] == ["suspension"]


@pytest.mark.postgres
@pytest.mark.skipif(bool(os.environ.get(INNER)), reason="the inner run itself")
def test_this_module_on_postgresql() -> None:
    from tests.servers import run_module_on_postgresql

    done = run_module_on_postgresql(__file__, {INNER: "1"})
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert " passed" in done.stdout


@pytest.mark.skipif(not os.environ.get(INNER), reason="only the inner run")
def test_the_inner_run_is_on_postgresql() -> None:
    assert connection.vendor == "postgresql"
