"""Claims (criogen.services.claims) on SQLite and on PostgreSQL with Redis: claim,
take-over (audited), the claim ends when the suspension is answered, and two processes
claiming at once: exactly one wins.

Each check runs the service in ``manage.py shell`` processes against the database of a
dashboard server, as another process of a deployment would.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]

_PRELUDE = """
import json
from django.contrib.auth import get_user_model
from criogen.engine.errors import CriogenError
from criogen.selectors import claim_of
from criogen.services.claims import claim_thread, release_claim
from criogen.storage.models import AuditEvent, Thread
User = get_user_model()
def out(value):
    print("OUT=" + json.dumps(value))
def holder(tid):
    claim = claim_of(Thread.objects.get(pk=tid))
    return claim.user.get_username() if claim else None
def audit(tid):
    qs = AuditEvent.objects.filter(thread_id=tid, action__startswith="claim").order_by("pk")
    return [[e.action, e.actor, e.door, json.loads(e.details).get("from")] for e in qs]
"""


def _shell(server: Any, code: str) -> Any:
    return json.loads(server.manage("shell", "-c", _PRELUDE + code).split("OUT=", 1)[1])


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def server(request: pytest.FixtureRequest) -> Any:
    name = "dashboard_server" if request.param == "sqlite" else "pg_dashboard_server"
    return request.getfixturevalue(name)


def test_claim_take_over_release_are_audited_and_an_answer_ends_the_claim(server: Any) -> None:
    tid = server.start_hitl(prefix="claim")
    result = _shell(
        server,
        f"""
tid = {tid!r}
olga, oscar = User.objects.get(username="olga"), User.objects.get(username="oscar")
steps = []
claim_thread(tid, by=olga, door="ui")
steps.append(holder(tid))
claim_thread(tid, by=olga, door="ui")  # again: nothing new
try:
    claim_thread(tid, by=oscar, door="ui")
except CriogenError as exc:
    steps.append([exc.code, exc.details.get("claimed_by")])
claim_thread(tid, by=oscar, door="ui", take_over=True)
steps.append(holder(tid))
steps.append(release_claim(tid, by=olga, door="ui"))  # olga no longer holds it
steps.append(release_claim(tid, by=oscar, door="ui"))
steps.append(holder(tid))
claim_thread(tid, by=olga, door="ui")
out({{"steps": steps, "audit": audit(tid)}})
""",
    )
    assert result["steps"] == ["olga", ["conflict", "olga"], "oscar", False, True, None]
    assert result["audit"] == [
        ["claim", "olga", "ui", None],
        ["claim_taken_over", "oscar", "ui", "olga"],
        ["claim_released", "oscar", "ui", None],
        ["claim", "olga", "ui", None],
    ]

    # Answering the suspension moves the head on: the claim no longer holds the thread.
    server.call(lambda c: c.runs.wait(tid, "hitl", command={"resume": {"decision": "approve"}}))
    after = _shell(
        server,
        f"""
tid = {tid!r}
t = Thread.objects.get(pk=tid)
try:
    claim_thread(tid, by=User.objects.get(username="oscar"), door="ui")
    refused = None
except CriogenError as exc:
    refused = exc.code
out({{"holder": holder(tid), "status": t.head_status, "refused": refused}})
""",
    )
    assert after["holder"] is None
    if after["status"] == "suspended":  # the graph asked again: a new, unclaimed suspension
        assert after["refused"] is None
    else:
        assert after["refused"] == "not_suspended"


@pytest.mark.reliability_variants("sqlite")  # the race that matters is PostgreSQL's
def test_two_processes_claiming_at_once_one_wins(server: Any) -> None:
    tid = server.start_hitl(prefix="race")
    code = (
        _PRELUDE
        + f"""
import time
who = __WHO__
user = User.objects.get(username=who)
start = __START__
time.sleep(max(0.0, start - time.time()))
try:
    claim_thread({tid!r}, by=user, door="python")
    out("won")
except CriogenError as exc:
    out(exc.code)
"""
    )
    import time

    start = time.time() + 4.0  # both processes are up and waiting by then
    procs = [
        subprocess.Popen(  # noqa: S603 - this venv's python running manage.py
            [
                sys.executable,
                "manage.py",
                "shell",
                "-c",
                code.replace("__WHO__", repr(who)).replace("__START__", repr(start)),
            ],
            cwd=ROOT,
            env=server.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for who in ("olga", "oscar")
    ]
    outcomes = []
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=60)
        assert proc.returncode == 0, stderr
        outcomes.append(json.loads(stdout.split("OUT=", 1)[1]))
    assert sorted(outcomes) == ["conflict", "won"]
    winner = ("olga", "oscar")[outcomes.index("won")]
    final = _shell(server, f"out({{'holder': holder({tid!r}), 'audit': audit({tid!r})}})")
    assert final["holder"] == winner
    assert final["audit"] == [["claim", winner, "python", None]]
