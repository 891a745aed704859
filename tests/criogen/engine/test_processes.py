"""Two processes on one database share threads: one suspends, another resumes.

Both children are plain scripts (no Django settings): ``Storage(url)`` configures Django
and checks the migrations by itself, as a user's script would.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from criogen import Storage
from tests.criogen.engine.workflow_process import HANG_ENV, build

SCRIPT = Path(__file__).with_name("workflow_process.py")


def child(*args: str) -> tuple[dict[str, Any], int]:
    """Run the workflow script in a new process; its JSON answer and its pid."""
    env = {k: v for k, v in os.environ.items() if k not in ("DJANGO_SETTINGS_MODULE", HANG_ENV)}
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPT), *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out, err = proc.communicate(timeout=120)
    lines = [line for line in out.splitlines() if line.startswith("{")]
    assert lines, f"no answer from {args[0]!r} (exit {proc.returncode}): {err}"
    return json.loads(lines[-1]), proc.pid


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_a_thread_suspended_by_one_process_is_resumed_by_another(
    backend: str, request: pytest.FixtureRequest, thread_id: str, django_db_blocker: Any
) -> None:
    url = str(request.getfixturevalue(f"{backend}_url"))
    with django_db_blocker.unblock():
        storage = Storage(url)  # migrate once here, before two processes race to check
        th = build().compile(storage=storage).thread(thread_id)

        paused, pid_a = child("run", url, thread_id)
        assert paused["status"] == "suspended"
        assert th.head is not None and th.head.status == "suspended"
        assert th.state["pid"] == pid_a

        done, pid_b = child("resume", url, thread_id, json.dumps({"approved": True}))
        assert done["status"] == "completed"
        assert done["state"]["answer"] == {"approved": True}

        assert pid_a != pid_b
        assert th.state == {
            "amount": 42,
            "steps": ["prepare", "work", "ask", "done"],
            "pid": pid_a,
            "answer": {"approved": True},
            "done_pid": pid_b,
        }
        history = list(reversed(th.history()))
        assert [cp.version for cp in history] == list(range(1, len(history) + 1))
        assert history[-1].version == done["version"]
        assert len({cp.run_id for cp in history}) == 2
        storage.close()


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_another_process_sees_a_thread_suspended_here_and_resumes_it(
    backend: str, request: pytest.FixtureRequest, thread_id: str, django_db_blocker: Any
) -> None:
    url = str(request.getfixturevalue(f"{backend}_url"))
    with django_db_blocker.unblock():
        storage = Storage(url)
        th = build().compile(storage=storage).thread(thread_id)
        assert th.run({"amount": 5}).status == "suspended"

        again, _ = child("run", url, thread_id)  # a new turn is refused over there too
        assert again == {"error": "thread_suspended"}
        done, pid_b = child("resume", url, thread_id, '"yes"')

        assert done["status"] == "completed"
        assert th.state["answer"] == "yes"
        assert th.state["done_pid"] == pid_b != os.getpid()
        assert th.head is not None and th.head.status == "completed"
        storage.close()
