"""schemathesis against the live OpenAPI schema: generated requests to every operation
get no 500, only documented status codes, and responses (SSE events included) that
match the schema. It runs on the auth-off server (every request an operator), whose
data no other test depends on."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx

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


THREAD = {"thread_id": "$response.body#/thread_id"}
RUN = {**THREAD, "run_id": "$response.body#/run_id"}
STEPS = {"requestBody": {"assistant_id": "steps", "input": {"n": 1}}}
FIXED = {"x-schemathesis": {"merge_body": False}}
LINKS: dict[str, dict[str, dict[str, Any]]] = {
    # A new thread: read it, change it, read its state and history, run on it, copy
    # and delete it.
    "create_thread": {
        "GetThread": {"operationId": "get_thread", "parameters": THREAD},
        "PatchThread": {"operationId": "patch_thread", "parameters": THREAD},
        "GetState": {"operationId": "get_thread_state", "parameters": THREAD},
        "UpdateState": {"operationId": "update_thread_state", "parameters": THREAD},
        "GetHistory": {"operationId": "get_thread_history", "parameters": THREAD},
        "PostHistory": {"operationId": "post_thread_history", "parameters": THREAD},
        "CopyThread": {"operationId": "copy_thread", "parameters": THREAD},
        "ListRuns": {"operationId": "list_runs", "parameters": THREAD},
        "CreateRun": {"operationId": "create_run", "parameters": THREAD, **STEPS, **FIXED},
        "WaitRun": {"operationId": "wait_run", "parameters": THREAD, **STEPS, **FIXED},
        "DeleteThread": {"operationId": "delete_thread", "parameters": THREAD},
    },
    # A new run: read it, join it, cancel it, delete it.
    "create_run": {
        "GetRun": {"operationId": "get_run", "parameters": RUN},
        "JoinRun": {"operationId": "join_run", "parameters": RUN},
        "CancelRun": {"operationId": "cancel_run", "parameters": RUN},
        "DeleteRun": {"operationId": "delete_run", "parameters": RUN},
        "GetThreadOfRun": {"operationId": "get_thread", "parameters": THREAD},
    },
    "create_assistant": {
        "GetAssistant": {
            "operationId": "get_assistant",
            "parameters": {"assistant_id": "$response.body#/assistant_id"},
        },
        "PatchAssistant": {
            "operationId": "patch_assistant",
            "parameters": {"assistant_id": "$response.body#/assistant_id"},
        },
        "DeleteAssistant": {
            "operationId": "delete_assistant",
            "parameters": {"assistant_id": "$response.body#/assistant_id"},
        },
    },
    "create_cron": {
        "PatchCron": {
            "operationId": "patch_cron",
            "parameters": {"cron_id": "$response.body#/cron_id"},
        },
        "DeleteCron": {
            "operationId": "delete_cron",
            "parameters": {"cron_id": "$response.body#/cron_id"},
        },
    },
}
"""OpenAPI links (the schema django-ninja generates declares none): what a created
thread, run, assistant or cron leads to. A run on a new thread gets a valid body, so
the chain reaches the run's own operations."""


def linked_schema(url: str, target: Path) -> Path:
    """The live schema with :data:`LINKS` added to the 200 responses, saved to ``target``."""
    schema = httpx.get(url + "/openapi.json", timeout=30).json()
    found = set()
    for item in schema["paths"].values():
        for op in item.values():
            links = LINKS.get(op.get("operationId", ""))
            if links:
                op["responses"]["200"]["links"] = links
                found.add(op["operationId"])
    assert found == set(LINKS), set(LINKS) - found
    target.write_text(json.dumps(schema))
    return target


def test_stateful_sequences_get_no_500_and_match_the_schema(
    open_server: Server, tmp_path: Path
) -> None:
    """Chains of calls that feed one response into the next request (the links above):
    every response has no 500, a documented status and the documented schema."""
    st = Path(sys.executable).with_name("st")
    schema = linked_schema(open_server.url, tmp_path / "openapi-linked.json")
    # Only the links above: the ~260 that schemathesis would infer (every id-shaped
    # field to every operation taking one) spread the scenarios too thin to follow a
    # chain to its end in a test's time.
    config = tmp_path / "schemathesis.toml"
    config.write_text("[phases.stateful]\nmax-steps = 10\ninference.algorithms = []\n")
    done = subprocess.run(
        [
            str(st),
            "--config-file",
            str(config),
            "run",
            str(schema),
            "--url",
            open_server.url,
            "--checks",
            "not_a_server_error,status_code_conformance,response_schema_conformance",
            "--phases",
            "stateful",
            "--exclude-operation-id",
            "join_thread_stream",
            "--max-examples",
            "60",
            "--generation-deterministic",
            "--request-timeout",
            "30",
            "--no-color",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    covered = re.search(r"API Links:\s+(\d+) covered", done.stdout)
    assert covered, done.stdout[-3000:]
    # Most of the 21 links are followed (15 in trials; which ones varies with
    # generation): the chains really ran, not just their first step.
    assert int(covered.group(1)) >= 10, done.stdout[-3000:]
