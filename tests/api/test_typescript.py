"""The official TypeScript client (``@langchain/langgraph-sdk``) against the server:
create a thread, run ``steps``, read state and history, stream, resume ``hitl``.

Needs Node.js and ``npm install`` in ``tests/api/ts`` (the package is pinned there);
without them the test is skipped, or fails when ``CI=true``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from tests.api.conftest import Server
from tests.conftest import need_service

TS = Path(__file__).resolve().parent / "ts"


def test_the_typescript_client_runs_threads_state_history_and_resume(server: Server) -> None:
    node = shutil.which("node")
    installed = (TS / "node_modules" / "@langchain" / "langgraph-sdk").is_dir()
    need_service(
        "Node.js with @langchain/langgraph-sdk", bool(node) and installed, f"cd {TS} && npm ci"
    )
    done = subprocess.run(
        [str(node), "smoke.mjs", server.url, server.tokens["alice"]],
        cwd=TS,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1])["ok"] is True
