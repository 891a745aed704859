"""schemathesis against the live OpenAPI schema: generated requests to every operation
get no 500, only documented status codes, and responses (SSE events included) that
match the schema. It runs on the auth-off server (every request an operator), whose
data no other test depends on."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.api.conftest import Server


def test_generated_requests_get_no_500_and_match_the_schema(
    open_server: Server, tmp_path: Path
) -> None:
    st = Path(sys.executable).with_name("st")
    done = subprocess.run(
        [
            str(st),
            "run",
            open_server.url + "/openapi.json",
            "--checks",
            "not_a_server_error,status_code_conformance,response_schema_conformance",
            "--phases",
            "examples,fuzzing",
            # A thread's live feed never ends by itself: it is tested in test_runs.py.
            "--exclude-operation-id",
            "join_thread_stream",
            "--max-examples",
            "6",
            "--generation-deterministic",
            "--request-timeout",
            "30",
            "--no-color",
        ],
        cwd=tmp_path,  # schemathesis keeps its example database in the working directory
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
