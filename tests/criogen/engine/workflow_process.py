"""A plain script (no Django settings) that runs one workflow operation in its own process.

The process tests start it with ``python workflow_process.py COMMAND URL THREAD [ARG]``:

- ``run``: run the ``approval`` workflow on THREAD; it suspends at ``ask``.
- ``resume``: resume THREAD with the JSON value ARG.
- ``hang``: run the ``approval`` workflow with ``sync`` durability and a 1 s lease; node
  ``work`` creates the file ARG and then sleeps, so the test can SIGKILL it mid-node.

It prints the result as one JSON line: ``{"status", "state", "version"}``, or
``{"error": code}``. The tests import :func:`build` to run the same graph themselves.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from criogen import END, START, Storage, Workflow, suspend
from criogen.engine.errors import CriogenError

HANG_ENV = "CRIOGEN_TEST_HANG_MARKER"


def work(state: dict[str, Any]) -> dict[str, Any]:
    marker = os.environ.get(HANG_ENV)
    if marker:
        Path(marker).write_text(str(os.getpid()))
        time.sleep(120)  # killed long before this ends
    return {"steps": ["work"], "pid": os.getpid()}


def ask(state: dict[str, Any]) -> dict[str, Any]:
    answer = suspend("approve?", {"amount": state.get("amount")})
    return {"steps": ["ask"], "answer": answer}


def build() -> Workflow:
    """START -> prepare -> work -> ask -> done -> END (``ask`` suspends)."""
    wf = Workflow(reducers={"steps": "append"}, name="approval")
    wf.add_node("prepare", lambda state: {"steps": ["prepare"]})
    wf.add_node("work", work)
    wf.add_node("ask", ask)
    wf.add_node("done", lambda state: {"steps": ["done"], "done_pid": os.getpid()})
    wf.add_edge(START, "prepare")
    wf.add_edge("prepare", "work")
    wf.add_edge("work", "ask")
    wf.add_edge("ask", "done")
    wf.add_edge("done", END)
    return wf


def main(argv: list[str]) -> int:
    command, url, thread_id, *rest = argv
    storage = Storage(url)
    app = build().compile(storage=storage, durability="sync", lease_seconds=1.0)
    thread = app.thread(thread_id)
    try:
        if command == "run":
            result = thread.run({"amount": 42})
        elif command == "resume":
            result = thread.resume(json.loads(rest[0]))
        elif command == "hang":
            os.environ[HANG_ENV] = rest[0]
            result = thread.run({"amount": 42})
        else:
            raise SystemExit(f"unknown command {command!r}")
    except CriogenError as exc:
        print(json.dumps({"error": exc.code}))
        return 1
    finally:
        storage.close()
    print(
        json.dumps(
            {"status": result.status, "state": result.state, "version": result.checkpoint.version}
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
