"""criogen.outbound: the address policy, the URL check, the connection to the checked
address, the deadline, and the sender's records and retries.

No test opens a connection outside 127.0.0.0/8 and ::1: names resolve through stub
resolvers, and the listeners are on loopback addresses the test allows explicitly.
"""

from __future__ import annotations

import io
import ipaddress
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpcore
import pytest
from django.core import mail
from django.core.mail.backends.locmem import EmailBackend
from django.db import transaction
from django.utils import timezone

from criogen import outbound, runner
from criogen.engine.errors import InvalidArgument
from criogen.outbound import (
    OutboundRefused,
    check_address,
    check_webhook_url,
    resolve_checked,
)
from criogen.services.runs import create_run, wait_run
from criogen.storage.models import OutboundAttempt
from tests.listeners import Listener, Trickle

# -- the address check -------------------------------------------------------------------

REFUSED = {
    "127.0.0.1": "loopback",
    "127.8.9.10": "loopback",
    "::1": "loopback",
    "10.0.0.8": "private",
    "172.16.5.4": "private",
    "192.168.1.1": "private",
    "fd12:3456::1": "private",
    "169.254.10.20": "link-local",
    "fe80::1": "link-local",
    "169.254.169.254": "metadata",
    "169.254.170.2": "metadata",
    "fd00:ec2::254": "metadata",
    "100.100.100.200": "metadata",
    "168.63.129.16": "metadata",
    "100.64.0.1": "100.64.0.0/10",
    "0.0.0.0": "unspecified",  # noqa: S104 - an address under test, not a bind
    "::": "unspecified",
    "224.0.0.251": "multicast",
    "ff02::1": "multicast",
    "240.0.0.1": "private",  # 240.0.0.0/4: Python counts it private
    "::ffff:127.0.0.1": "loopback",
    "::ffff:169.254.169.254": "metadata",
    "64:ff9b::a9fe:a9fe": "metadata",
    "2002:a00:1::": "private",
}


@pytest.mark.parametrize(("address", "reason"), sorted(REFUSED.items()))
def test_it_refuses_internal_and_metadata_addresses(address: str, reason: str) -> None:
    with pytest.raises(OutboundRefused) as caught:
        check_address(address, allow=[])

    assert reason in caught.value.message
    assert caught.value.code == "outbound_refused"


@pytest.mark.parametrize("address", ["93.184.215.14", "2606:4700:4700::1111", "::ffff:8.8.8.8"])
def test_it_lets_public_addresses_through(address: str) -> None:
    assert check_address(address, allow=[]) == ipaddress.ip_address(address)


def test_the_allow_list_takes_networks_and_addresses() -> None:
    allow = ["10.1.0.0/16", "127.0.0.2", "[::1]"]

    assert str(check_address("10.1.2.3", allow=allow)) == "10.1.2.3"
    assert str(check_address("127.0.0.2", allow=allow)) == "127.0.0.2"
    assert str(check_address("::1", allow=allow)) == "::1"
    for refused in ("10.2.0.1", "127.0.0.1", "169.254.169.254"):
        with pytest.raises(OutboundRefused):
            check_address(refused, allow=allow)


class StubResolver:
    """Answers from a table, counts the look-ups; never touches the network."""

    def __init__(self, table: dict[str, list[str]]) -> None:
        self.table = table
        self.asked: list[str] = []

    def __call__(self, host: str, port: int) -> list[str]:
        self.asked.append(host)
        if host not in self.table:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return self.table[host]


@pytest.mark.parametrize(
    ("answers", "reason"),
    [
        (["127.0.0.1"], "loopback"),
        (["10.20.30.40"], "private"),
        (["169.254.169.254"], "metadata"),
        (["fd00:ec2::254"], "metadata"),
        (["fe80::1%eth0"], "link-local"),
        # Every address is checked, not only the first one.
        (["93.184.215.14", "192.168.0.10"], "private"),
    ],
)
def test_a_name_that_resolves_to_an_internal_address_is_refused(
    answers: list[str], reason: str
) -> None:
    resolver = StubResolver({"hooks.example.com": answers})

    with pytest.raises(OutboundRefused) as caught:
        resolve_checked("hooks.example.com", 443, allow=[], resolver=resolver)

    assert reason in caught.value.message
    assert "hooks.example.com" in caught.value.message
    assert resolver.asked == ["hooks.example.com"]


def test_a_public_name_resolves_to_its_checked_addresses() -> None:
    resolver = StubResolver({"hooks.example.com": ["93.184.215.14", "2606:2800:21f::1"]})

    found = resolve_checked("hooks.example.com", 443, allow=[], resolver=resolver)

    assert [str(a) for a in found] == ["93.184.215.14", "2606:2800:21f::1"]


def test_an_address_literal_is_not_looked_up_and_a_name_without_address_is_refused() -> None:
    resolver = StubResolver({})

    assert [str(a) for a in resolve_checked("[::1]", 80, allow=["::1"], resolver=resolver)] == [
        "::1"
    ]
    assert resolver.asked == []
    with pytest.raises(httpcore.ConnectError):
        resolve_checked("nowhere.example", 80, allow=[], resolver=resolver)
    with pytest.raises(OutboundRefused, match="no address"):
        resolve_checked("empty.example", 80, allow=[], resolver=StubResolver({"empty.example": []}))


def test_an_allowed_name_may_resolve_to_internal_addresses() -> None:
    resolver = StubResolver({"hooks.internal": ["10.0.0.5"], "a.corp.example": ["10.0.0.6"]})
    allow = ["hooks.internal", "*.corp.example"]

    assert [str(a) for a in resolve_checked("hooks.internal", 80, allow=allow, resolver=resolver)]
    assert [str(a) for a in resolve_checked("a.corp.example", 80, allow=allow, resolver=resolver)]
    resolver.table["corp.example"] = ["10.0.0.7"]  # the suffix allows subdomains only
    with pytest.raises(OutboundRefused):
        resolve_checked("corp.example", 80, allow=allow, resolver=resolver)


# -- the URL's form ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "http://[::1",
        "ftp://example.com/hook",
        "file:///etc/passwd",
        "gopher://127.0.0.1:6379/_INFO",
        "http://",
        "http:///path",
        "example.com/hook",
        "http://exa mple.com/",
        "http://example.com:99999/",
        "http://example.com/\x00",
        "https://" + "a" * 2100 + ".com/",
        42,
    ],
)
def test_a_malformed_webhook_url_is_an_invalid_argument_naming_the_field(url: Any) -> None:
    with pytest.raises(InvalidArgument) as caught:
        check_webhook_url(url)

    assert caught.value.details["field"] == "webhook"


@pytest.mark.parametrize(
    "url",
    [
        "https://hooks.example.com/criogen?token=x",
        "http://127.0.0.1:8000/hook",
        "http://[::1]:8000/hook",
        "https://user:secret@münchen.example/hook",
    ],
)
def test_a_well_formed_webhook_url_passes_whatever_its_address(url: str) -> None:
    assert check_webhook_url(url) == url


def test_no_webhook_is_none() -> None:
    assert check_webhook_url(None) is None
    assert check_webhook_url("") is None


# -- the connection ----------------------------------------------------------------------


@pytest.fixture
def listener() -> Iterator[Listener]:
    hook = Listener()
    yield hook
    hook.close()


def test_it_connects_to_the_checked_address_and_keeps_the_host_name(settings: Any) -> None:
    hook = Listener("127.0.0.2")
    settings.CRIOGEN_OUTBOUND_ALLOW = ["127.0.0.2"]
    try:
        # The name exists only in the stub: the socket went to the address it checked.
        resolver = StubResolver({"hooks.example.com": ["127.0.0.2"]})
        url = f"http://user:pw@hooks.example.com:{hook.port}/done?x=1"
        status = outbound._post_json(url, {"a": 1}, deadline=10, resolver=resolver)
    finally:
        hook.close()

    assert status == 204
    (got,) = hook.received
    assert got["body"] == {"a": 1}
    assert got["headers"]["Host"] == f"hooks.example.com:{hook.port}"
    assert got["headers"]["Authorization"] == "Basic dXNlcjpwdw=="


def test_a_name_resolving_to_a_refused_address_never_connects(
    settings: Any, listener: Listener
) -> None:
    settings.CRIOGEN_OUTBOUND_ALLOW = []
    resolver = StubResolver({"rebind.example.com": ["127.0.0.1"]})

    with pytest.raises(OutboundRefused, match="loopback"):
        outbound._post_json(
            f"http://rebind.example.com:{listener.port}/", {}, deadline=10, resolver=resolver
        )

    assert listener.received == []


def test_a_trickling_listener_is_cut_off_at_the_deadline(settings: Any) -> None:
    slow = Trickle(every=0.3)  # each byte well within any per-read timeout
    settings.CRIOGEN_OUTBOUND_ALLOW = ["127.0.0.2"]
    started = time.monotonic()
    try:
        with pytest.raises(httpcore.TimeoutException, match="deadline of 1.5 s"):
            outbound._post_json(f"http://127.0.0.2:{slow.port}/", {}, deadline=1.5)
        took = time.monotonic() - started
    finally:
        slow.close()

    assert 1.4 < took < 2.5, took


# -- the sender: records and retries (in-process, SQLite) ----------------------------------


def attempts(**filters: Any) -> list[OutboundAttempt]:
    return list(OutboundAttempt.objects.filter(**filters).order_by("attempt", "created_at"))


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("inprocess_runner")
@pytest.mark.parametrize("host", ["127.0.0.1", "[::1]", "localhost"])
def test_a_run_webhook_to_loopback_is_refused_by_default_and_recorded(
    thread_id: str, settings: Any, host: str
) -> None:
    settings.CRIOGEN_OUTBOUND_ALLOW = []
    hook = Listener("::1" if host == "[::1]" else "127.0.0.1")
    try:
        url = f"http://{host}:{hook.port}/hook?token=secret"
        run = create_run(
            thread_id=thread_id,
            assistant_id="steps",
            input={"n": 0},
            webhook=url,
            if_not_exists="create",
        )
        assert wait_run(run=run, timeout=20).status == "success"
        runner.drain(timeout=20)
        assert outbound.drain(timeout=30)
    finally:
        hook.close()

    assert hook.received == []
    (refused,) = attempts(run_id=str(run.pk))
    assert (refused.kind, refused.outcome, refused.attempt) == ("run", "refused", 1)
    assert "loopback" in refused.error
    assert refused.target == f"http://{host}:{hook.port}/hook"  # no query: it may hold secrets
    assert refused.thread_id == thread_id
    assert refused.retry_at is None


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("inprocess_runner")
def test_a_failing_webhook_is_retried_with_backoff_and_every_attempt_recorded(
    thread_id: str, settings: Any, listener: Listener
) -> None:
    settings.CRIOGEN_OUTBOUND_ALLOW = ["127.0.0.1"]
    settings.CRIOGEN_OUTBOUND_BACKOFF_SECONDS = 0.2
    settings.CRIOGEN_OUTBOUND_ATTEMPTS = 4
    statuses = [503, 429]
    hook = Listener(statuses=statuses)
    try:
        outbound.send_webhook(
            kind="run", url=f"http://127.0.0.1:{hook.port}/h", payload={"x": 1}, run_id="r-1"
        )
        assert outbound.drain(timeout=30)
    finally:
        hook.close()

    rows = attempts(run_id="r-1")
    assert [(r.attempt, r.outcome, r.status_code) for r in rows] == [
        (1, "failed", 503),
        (2, "failed", 429),
        (3, "delivered", 204),
    ]
    assert [r.retry_at is not None for r in rows] == [True, True, False]
    # Exponential backoff: 0.2 s, then 0.4 s (measured where the listener heard them).
    gaps = [b - a for a, b in zip(hook.times, hook.times[1:], strict=False)]
    assert gaps[0] >= 0.2 and gaps[1] >= 0.4, gaps
    assert rows[1].retry_at - rows[0].retry_at >= timedelta(seconds=0.2)  # type: ignore[operator]
    assert [h["body"] for h in hook.received] == [{"x": 1}] * 3


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("inprocess_runner")
def test_a_refused_or_client_error_webhook_is_not_retried(settings: Any) -> None:
    settings.CRIOGEN_OUTBOUND_ALLOW = ["127.0.0.1"]
    settings.CRIOGEN_OUTBOUND_BACKOFF_SECONDS = 0.05
    hook = Listener(statuses=[404])
    try:
        outbound.send_webhook(
            kind="run", url=f"http://127.0.0.1:{hook.port}/", payload={}, run_id="r-404"
        )
        outbound.send_webhook(
            kind="run", url="http://169.254.169.254/latest/meta-data/", payload={}, run_id="r-md"
        )
        outbound.send_webhook(kind="run", url="http://[::1", payload={}, run_id="r-bad")
        assert outbound.drain(timeout=30)
    finally:
        hook.close()

    assert [(r.outcome, r.status_code) for r in attempts(run_id="r-404")] == [("failed", 404)]
    (metadata,) = attempts(run_id="r-md")
    assert (metadata.outcome, metadata.target) == (
        "refused",
        "http://169.254.169.254/latest/meta-data/",
    )
    assert "metadata" in metadata.error
    (bad,) = attempts(run_id="r-bad")
    assert bad.outcome == "refused" and "not a valid URL" in bad.error


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("inprocess_runner")
def test_a_malformed_webhook_never_reaches_the_runner(thread_id: str) -> None:
    with pytest.raises(InvalidArgument) as caught:
        create_run(
            thread_id=thread_id,
            assistant_id="steps",
            input={"n": 0},
            webhook="http://[::1",
            if_not_exists="create",
        )
    assert caught.value.details["field"] == "webhook"


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("inprocess_runner")
def test_a_stored_malformed_webhook_does_not_stop_the_threads_next_run(thread_id: str) -> None:
    from criogen.storage.models import Run

    with transaction.atomic():  # the run starts when this commits
        first = create_run(
            thread_id=thread_id, assistant_id="steps", input={"n": 0}, if_not_exists="create"
        )
        # A row written before URLs were checked: the runner must still start the next run.
        Run.objects.filter(pk=first.pk).update(kwargs={"webhook": "http://[::1"})
    second = create_run(thread_id=thread_id, assistant_id="steps", input={"n": 0})

    assert wait_run(run=second, timeout=20).status == "success"
    assert outbound.drain(timeout=30)
    (bad,) = attempts(run_id=str(first.pk))
    assert bad.outcome == "refused"


class SpyBackend(EmailBackend):
    """Django's in-memory mail backend that notes which thread sent each message."""

    threads: list[str] = []

    def send_messages(self, messages: Any) -> int:
        type(self).threads.append(threading.current_thread().name)
        return super().send_messages(messages)


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("inprocess_runner")
def test_the_reminder_email_is_sent_and_recorded_off_the_callers_thread(settings: Any) -> None:
    settings.EMAIL_BACKEND = f"{__name__}.SpyBackend"
    SpyBackend.threads = []

    outbound.send_email(
        subject="Waiting", body="b", recipients=["boss@example.com"], thread_id="t-mail"
    )
    assert outbound.drain(timeout=30)

    (sent,) = mail.outbox
    assert sent.to == ["boss@example.com"]
    (row,) = attempts(thread_id="t-mail")
    assert (row.kind, row.outcome, row.target, row.attempt) == (
        "email",
        "delivered",
        "boss@example.com",
        1,
    )
    assert SpyBackend.threads and threading.current_thread().name not in SpyBackend.threads
    assert all(name.startswith("criogen-outbound") for name in SpyBackend.threads)


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("inprocess_runner")
def test_a_crons_run_webhook_goes_through_the_sender_as_a_cron_call(
    settings: Any, listener: Listener
) -> None:
    from criogen.services.crons import fire_due_crons
    from criogen.storage.models import Cron

    settings.CRIOGEN_OUTBOUND_ALLOW = []
    cron = Cron.objects.create(
        assistant_id="steps",
        schedule="0 9 * * *",
        payload={"input": {"n": 0}, "webhook": f"http://localhost:{listener.port}/cron"},
        on_run_completed="keep",
        next_run_date=timezone.now() - timedelta(minutes=1),
    )

    (run_id,) = fire_due_crons()
    runner.drain(timeout=20)
    assert outbound.drain(timeout=30)

    assert listener.received == []
    (row,) = attempts(run_id=run_id)
    assert (row.kind, row.outcome, row.cron_id) == ("cron", "refused", str(cron.pk))


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("inprocess_runner")
def test_a_cron_stored_with_a_malformed_webhook_still_starts_its_runs() -> None:
    from criogen.services.crons import fire_due_crons
    from criogen.storage.models import Cron

    Cron.objects.create(
        assistant_id="steps",
        schedule="0 9 * * *",
        payload={"input": {"n": 0}, "webhook": "http://[::1"},
        on_run_completed="keep",
        next_run_date=timezone.now() - timedelta(minutes=1),
    )

    (run_id,) = fire_due_crons()

    from criogen.storage.models import Run

    run = wait_run(run=Run.objects.get(pk=run_id), timeout=20)
    assert run.status == "success"
    assert run.kwargs["webhook"] is None


_EXITING = """
import sys, time
import django
django.setup()
from django.core.management import call_command
call_command("migrate", verbosity=0)
from criogen import outbound
for i in range(20):
    outbound.send_webhook(kind="run", url=f"http://127.0.0.2:{sys.argv[1]}/", payload={}, run_id=i)
time.sleep(0.5)
print("exiting", flush=True)
"""


def test_a_process_exits_within_a_deadline_however_many_calls_wait(tmp_path: Path) -> None:
    slow = Trickle("127.0.0.2", every=0.3)
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "criogen.settings",
        "DATABASE_URL": f"sqlite:///{tmp_path / 'exit.db'}",
        "CRIOGEN_OUTBOUND_ALLOW": "127.0.0.2",
        "CRIOGEN_OUTBOUND_DEADLINE_SECONDS": "2",
        "CRIOGEN_OUTBOUND_WORKERS": "1",
    }
    try:
        with subprocess.Popen(  # noqa: S603 - our own interpreter and code
            [sys.executable, "-c", _EXITING, str(slow.port)],
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        ) as child:
            assert child.stdout is not None
            assert child.stdout.readline().strip() == "exiting"
            started = time.monotonic()
            assert child.wait(timeout=60) == 0
            took = time.monotonic() - started
    finally:
        slow.close()

    # The attempt in flight ends by its deadline; the 19 queued calls are dropped, not
    # sent one after the other (that would take 19 deadlines).
    assert took < 2 + 3, took
    assert slow.accepted == 1


@pytest.mark.django_db(transaction=True)
def test_a_call_made_in_a_transaction_leaves_on_commit_and_never_on_rollback(
    settings: Any, listener: Listener
) -> None:
    settings.CRIOGEN_OUTBOUND_ALLOW = ["127.0.0.1"]
    url = f"http://127.0.0.1:{listener.port}/h"

    class Rollback(Exception):
        pass

    with pytest.raises(Rollback), transaction.atomic():
        outbound.send_webhook(kind="run", url=url, payload={"n": 1}, run_id="r-rolled-back")
        raise Rollback
    with transaction.atomic():
        outbound.send_webhook(kind="run", url=url, payload={"n": 2}, run_id="r-committed")
        assert outbound.drain(timeout=30)  # nothing queued before the commit
        assert listener.received == []
    assert outbound.drain(timeout=30)

    assert [h["body"] for h in listener.received] == [{"n": 2}]
    assert not attempts(run_id="r-rolled-back")


@pytest.mark.django_db(transaction=True)
def test_the_sweep_deletes_attempt_records_past_their_retention(settings: Any) -> None:
    from django.core.management import call_command

    now = timezone.now()
    mine = f"prune-{time.monotonic_ns()}"

    def record(age: int, outcome: str) -> None:
        OutboundAttempt.objects.create(
            kind="run",
            target="https://hooks.example.com/h",
            outcome=outcome,
            thread_id=mine,
            created_at=now - timedelta(seconds=age),
        )

    def left() -> list[str]:
        rows = OutboundAttempt.objects.filter(thread_id=mine).order_by("created_at")
        return [r.outcome for r in rows]

    for age, outcome in [(7200, "delivered"), (5000, "failed"), (3000, "delivered")]:
        record(age, outcome)
    settings.CRIOGEN_OUTBOUND_RETENTION_SECONDS = 0  # 0: keep them all
    assert outbound.prune_attempts(now=now) == 0
    assert left() == ["delivered", "failed", "delivered"]

    settings.CRIOGEN_OUTBOUND_RETENTION_SECONDS = 3600
    assert outbound.prune_attempts(now=now) >= 2
    assert left() == ["delivered"]  # younger than the retention: kept

    record(4000, "refused")  # the periodic sweep (and criogen_sweep) prunes them too
    out = io.StringIO()
    call_command("criogen_sweep", "--no-reap", "--no-deadlines", stdout=out)
    assert json.loads(out.getvalue())["outbound"] >= 1
    assert left() == ["delivered"]
