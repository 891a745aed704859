"""Demo data: an operator account, an API token and example runs that keep the inbox busy.

``python manage.py criogen_demo`` seeds the demo; ``--serve`` then starts the server
and a feeder that tops the inbox up whenever operators have settled the waiting runs.
Everything the demo creates uses thread ids starting with ``demo-``, so ``--reset``
removes exactly that and nothing else. Runs go through the same services as the API
and the dashboard, on the configured runner.
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.db import transaction

from criogen.services.assistants import ensure_default_assistants
from criogen.services.runs import create_run, wait_run
from criogen.storage.models import Run, Thread

logger = logging.getLogger("criogen.demo")

PREFIX = "demo-"
OPERATOR = "operator"
CREDENTIALS = Path(settings.BASE_DIR) / "var" / "demo-credentials.json"
MIN_WAITING = 2
"""The feeder keeps at least this many demo refunds waiting for approval."""


@dataclass(frozen=True)
class Seed:
    """One example thread: its id, graph and the input of its first run."""

    thread_id: str
    graph_id: str
    input: dict[str, Any]
    what: str


SEEDS = [
    Seed(
        "demo-refund-1",
        "support",
        {"messages": [{"type": "human", "content": "Please refund order 42."}], "user_id": "c-7"},
        "a refund waiting for approval",
    ),
    Seed(
        "demo-review-1",
        "review",
        {"title": "Refunds", "body": "We guarantee a refund in full."},
        "a document waiting for an editor",
    ),
    Seed("demo-failed-1", "steps", {"n": 0, "fail": True}, "a failed run to retry"),
    Seed("demo-done-1", "steps", {"n": 0}, "a completed run"),
    Seed(
        "demo-faq-1",
        "faq",
        {"messages": [{"type": "human", "content": "How long do refunds take?"}]},
        "an answer found in the FAQ collection",
    ),
]


def ensure_operator() -> tuple[Any, dict[str, str]]:
    """The ``operator`` account (in the Operators group) and its demo credentials.

    The password and API token are made once and kept in ``var/demo-credentials.json``
    (the database keeps only hashes), so every later ``make demo`` can show them again.
    """
    from criogen.storage.models import ApiToken

    saved = _read_credentials()
    users = get_user_model()
    group, _ = Group.objects.get_or_create(name="Operators")
    group.permissions.add(
        Permission.objects.get(codename="operate", content_type__app_label="criogen")
    )
    user = users.objects.filter(username=OPERATOR).first()
    if user is None or "password" not in saved:
        import secrets

        saved["password"] = secrets.token_urlsafe(9)
        if user is None:
            user = users.objects.create_user(OPERATOR, password=saved["password"])
        else:
            user.set_password(saved["password"])
        user.is_staff = user.is_superuser = True
        user.save()
    user.groups.add(group)
    token = saved.get("token")
    if not token or not any(t.matches(token) for t in ApiToken.objects.filter(user=user)):
        _, token = ApiToken.issue(user, name="demo")
        saved["token"] = token
    saved["username"] = OPERATOR
    CREDENTIALS.parent.mkdir(parents=True, exist_ok=True)
    CREDENTIALS.write_text(json.dumps(saved, indent=2))
    CREDENTIALS.chmod(0o600)
    return user, saved


def _read_credentials() -> dict[str, str]:
    try:
        data = json.loads(CREDENTIALS.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def seed(*, owner: Any, timeout: float = 30.0) -> list[tuple[Seed, str]]:
    """Run each example whose thread does not exist yet; return (seed, outcome) pairs."""
    ensure_default_assistants()
    if "faq" in settings.CRIOGEN_ASSISTANTS:
        from criogen import registry
        from criogen.examples.faq import load_documents

        load_documents(registry.storage())
    done: list[tuple[Seed, str]] = []
    for item in SEEDS:
        if item.graph_id not in settings.CRIOGEN_ASSISTANTS:
            done.append((item, f"skipped: graph {item.graph_id!r} is not registered"))
            continue
        if Thread.objects.filter(pk=item.thread_id).exists():
            done.append((item, "already there"))
            continue
        run = start(item.thread_id, item.graph_id, item.input, owner=owner)
        run = wait_run(run=run, timeout=timeout)
        done.append((item, run.status))
    return done


def start(thread_id: str, graph_id: str, input: dict[str, Any], *, owner: Any) -> Run:
    """Create the thread's first run (the thread is created with it)."""
    with transaction.atomic():
        return create_run(
            thread_id=thread_id,
            assistant_id=graph_id,
            input=input,
            if_not_exists="create",
            metadata={"demo": True},
            owner=owner,
        )


def top_up(*, owner: Any) -> list[Run]:
    """Start refund conversations until ``MIN_WAITING`` demo refunds wait; return their runs."""
    if "support" not in settings.CRIOGEN_ASSISTANTS:
        return []
    waiting = Thread.objects.filter(
        pk__startswith=f"{PREFIX}refund-", head_status="suspended"
    ).count()
    started: list[Run] = []
    number = Thread.objects.filter(pk__startswith=f"{PREFIX}refund-").count()
    while waiting + len(started) < MIN_WAITING:
        number += 1
        while Thread.objects.filter(pk=f"{PREFIX}refund-{number}").exists():
            number += 1
        order = "43" if number % 2 else "42"
        run = start(
            f"{PREFIX}refund-{number}",
            "support",
            {
                "messages": [{"type": "human", "content": f"Please refund order {order}."}],
                "user_id": f"c-{number}",
            },
            owner=owner,
        )
        started.append(run)
    return started


def reset() -> int:
    """Delete every demo thread (with its runs and checkpoints); return how many."""
    deleted = 0
    for thread_id in Thread.objects.filter(pk__startswith=PREFIX).values_list("pk", flat=True):
        Run.objects.filter(thread_id=thread_id).delete()
        deleted += Thread.objects.filter(pk=thread_id).delete()[0] > 0
    return deleted


def start_feeder(*, owner: Any, every: float = 10.0) -> threading.Event:
    """Top the inbox up every ``every`` seconds in a daemon thread; set the event to stop."""
    stop = threading.Event()

    def loop() -> None:
        from django.db import close_old_connections

        while not stop.wait(every):
            try:
                top_up(owner=owner)
            except Exception:
                logger.exception("demo feeder failed; trying again in %ss", every)
            finally:
                close_old_connections()

    threading.Thread(target=loop, name="criogen-demo-feeder", daemon=True).start()
    return stop
