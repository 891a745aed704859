"""A double-clicked "Yes, rewind" makes one fork: the form carries the head the page
showed, and the one rewind implementation refuses a head that moved on (stale_head).
Sequentially over the test client, and concurrently from two processes against a
live server on SQLite and on PostgreSQL."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
import time
from typing import Any

import pytest
from django.test import Client

from criogen import registry
from criogen.storage.models import AuditEvent, Thread
from criogen.storage.models import Checkpoint as CheckpointRow
from tests.dashboard.conftest import new_thread_id

HX = {"HTTP_HX_REQUEST": "true"}


def _completed_thread(owner: Any = None) -> Thread:
    tid = new_thread_id("rw")
    registry.get_graph("steps").thread(tid).run({"n": 0}, durability="sync")
    Thread.objects.filter(pk=tid).update(owner=owner, metadata={"graph_id": "steps"})
    return Thread.objects.get(pk=tid)


def test_two_posts_with_the_same_head_make_one_fork(
    monkeypatch: pytest.MonkeyPatch, as_operator: Client
) -> None:
    monkeypatch.setattr(registry.storage(), "audit_enabled", True)
    t = _completed_thread()
    first = CheckpointRow.objects.filter(thread_id=t.pk).order_by("version").first()
    assert first is not None
    form = {"rewind": "", "checkpoint": first.pk, "expected": t.head_id}

    ok = as_operator.post(f"/ui/threads/{t.pk}/act/", form, **HX)
    again = as_operator.post(f"/ui/threads/{t.pk}/act/", form, **HX)

    assert ok.status_code == 200 and "Rewound" in ok.content.decode()
    assert "moved on" in again.content.decode()
    forks = CheckpointRow.objects.filter(thread_id=t.pk, source="fork")
    assert forks.count() == 1
    (event,) = AuditEvent.objects.filter(thread_id=t.pk, action="rewind")
    assert (event.actor, event.door, event.before) == ("olga", "ui", t.head_id)


_CLICK = textwrap.dedent(
    """
    import re, sys, time
    import httpx

    url, user, password, thread_id, checkpoint, expected, at = sys.argv[1:8]
    with httpx.Client(base_url=url, timeout=30, follow_redirects=True) as web:
        page = web.get("/accounts/login/")
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
        web.post(
            "/accounts/login/",
            data={"username": user, "password": password, "csrfmiddlewaretoken": token},
            headers={"Referer": url + "/accounts/login/"},
        )
        page = web.get(f"/ui/threads/{thread_id}/")
        token = web.cookies["csrftoken"]
        time.sleep(max(0.0, float(at) - time.time()))
        answer = web.post(
            f"/ui/threads/{thread_id}/act/",
            data={"rewind": "", "checkpoint": checkpoint, "expected": expected},
            headers={"X-CSRFToken": token, "HX-Request": "true", "Referer": url},
        )
        print(answer.status_code, "Rewound" in answer.text)
    """
)


@pytest.mark.browser
@pytest.mark.parametrize("database", ["sqlite", "postgres"])
def test_two_processes_clicking_rewind_at_once_make_one_fork(
    request: pytest.FixtureRequest, database: str
) -> None:
    from tests.dashboard.live_server import PASSWORD

    server = request.getfixturevalue(
        "dashboard_server" if database == "sqlite" else "pg_dashboard_server"
    )
    thread_id = f"rw2-{time.time_ns()}"

    def make(client: Any) -> tuple[str, str]:
        client.threads.create(thread_id=thread_id, metadata={"graph_id": "steps"})
        client.runs.wait(thread_id, "steps", input={"n": 0})
        history = client.threads.get_history(thread_id, limit=10)
        return history[-1]["checkpoint"]["checkpoint_id"], history[0]["checkpoint"]["checkpoint_id"]

    first, head = server.call(make)
    at = str(time.time() + 4.0)  # both log in first, then post at the same moment
    clicks = [
        subprocess.Popen(  # noqa: S603 - our own interpreter and script
            [
                sys.executable,
                "-c",
                _CLICK,
                server.url,
                "olga",
                PASSWORD,
                thread_id,
                first,
                head,
                at,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outcomes = []
    for click in clicks:
        out, err = click.communicate(timeout=120)
        assert click.returncode == 0, err
        outcomes.append(out.split())
    assert sorted(o[1] for o in outcomes) == ["False", "True"], outcomes
    assert all(o[0] == "200" for o in outcomes), outcomes

    history = server.call(lambda c: c.threads.get_history(thread_id, limit=20))
    forks = [s for s in history if s["metadata"].get("source") == "fork"]
    assert len(forks) == 1, [s["metadata"] for s in history]
    assert re.fullmatch(r"[0-9a-f-]{36}", forks[0]["checkpoint"]["checkpoint_id"])
