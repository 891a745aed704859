"""The official TypeScript SDK in Chromium, as LangChain's chat front end uses it.

``@langchain/langgraph-sdk`` (from ``tests/api/ts/node_modules``) is bundled for the
browser with esbuild into a temporary directory and loaded by a page served from a
second local origin (another port). With an API token the page creates a thread,
streams the support agent with ``streamResumable: true``, receives its approval
interrupt for ``issue_refund``, resumes it as the front end's ``submit({}, {command})``
does — ``input: {}`` and an edit whose amount is the text ``"5"`` — and the refund of
5.00 runs exactly once. A second page "reloads" mid-run: its stream is aborted, and
``joinStream`` with the last event id it saw gets exactly the rest.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import threading
from collections.abc import Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.api.conftest import Server
from tests.conftest import need_service

pytestmark = pytest.mark.browser

TS = Path(__file__).resolve().parent / "ts"

PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>A chat front end</title>
<script src="sdk.js"></script></head>
<body>
<script>
// What the chat front end does through the SDK: stream a message resumably, show the
// approval it asks for, answer it with submit({}, {command}) — input {} and a command.
async function collect(stream) {
  const parts = [];
  for await (const part of stream) parts.push({event: part.event, id: part.id, data: part.data});
  return parts;
}

async function chat(apiUrl, apiKey) {
  const client = new LangGraphSDK.Client({apiUrl, apiKey});
  const thread = await client.threads.create();
  const modes = ["values", "updates", "messages-tuple"];
  const asked = await collect(client.runs.stream(thread.thread_id, "support", {
    input: {messages: [{type: "human", content: "Please refund order 42"}]},
    streamMode: modes,
    streamResumable: true,
  }));
  const command = {resume: {decisions: [{type: "edit", edited_action: {
    name: "issue_refund", args: {order_id: "42", amount: "5"}}}]}};
  const answered = await collect(client.runs.stream(thread.thread_id, "support", {
    input: {},
    command,
    streamMode: modes,
    streamResumable: true,
  }));
  const state = await client.threads.getState(thread.thread_id);
  return {thread_id: thread.thread_id, asked, answered, values: state.values,
          status: (await client.threads.get(thread.thread_id)).status};
}

// A page reload mid-run: the stream is aborted, the run id came from Content-Location
// (onRunCreated, as useStream's reconnectOnMount keeps it), and joinStream with the last
// event id picks the run up again.
async function reload(apiUrl, apiKey) {
  const client = new LangGraphSDK.Client({apiUrl, apiKey});
  const thread = await client.threads.create();
  const controller = new AbortController();
  let created = null;
  const before = [];
  try {
    for await (const part of client.runs.stream(thread.thread_id, "steps", {
      input: {n: 0, sleep: 3},
      streamResumable: true,
      signal: controller.signal,
      onRunCreated: (meta) => { created = meta; },
    })) {
      before.push({event: part.event, id: part.id, data: part.data});
      if (before.length === 3) controller.abort();
    }
  } catch (error) {
    if (!controller.signal.aborted) throw error;
  }
  const after = await collect(client.runs.joinStream(thread.thread_id, created.run_id, {
    lastEventId: before[before.length - 1].id,
  }));
  return {thread_id: thread.thread_id, created, before, after};
}

async function attempt(apiUrl, apiKey, what) {
  try {
    return await (what === "reload" ? reload : chat)(apiUrl, apiKey);
  } catch (error) {
    return {error: String(error) + "\\n" + (error && error.stack)};
  }
}
</script>
</body></html>
"""


@pytest.fixture(scope="module")
def app_origin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The page and the SDK bundled for browsers, served from their own origin."""
    node = shutil.which("node")
    esbuild = TS / "node_modules" / ".bin" / "esbuild"
    sdk = TS / "node_modules" / "@langchain" / "langgraph-sdk"
    need_service(
        "Node.js with @langchain/langgraph-sdk and esbuild",
        bool(node) and esbuild.exists() and sdk.is_dir(),
        "make install-ts",
    )
    root = tmp_path_factory.mktemp("chat-app")
    (root / "index.html").write_text(PAGE)
    bundled = subprocess.run(  # noqa: S603 - the pinned esbuild of tests/api/ts
        [
            str(esbuild),
            "--bundle",
            "--format=iife",
            "--global-name=LangGraphSDK",
            "--platform=browser",
            f"--outfile={root / 'sdk.js'}",
            "--log-level=warning",
        ],
        input='export { Client } from "@langchain/langgraph-sdk";\n',
        cwd=TS,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert bundled.returncode == 0, bundled.stdout + bundled.stderr

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the API's name
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), partial(Quiet, directory=str(root)))
    serving = threading.Thread(target=httpd.serve_forever, daemon=True)
    serving.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()
    serving.join(10)


def _ids(parts: list[dict[str, Any]]) -> list[int]:
    return [int(p["id"]) for p in parts]


def _run_page(chromium: Any, app_origin: str, server: Server, what: str) -> dict[str, Any]:
    context = chromium.new_context()
    try:
        page = context.new_page()
        page.goto(app_origin + "/index.html")
        result: dict[str, Any] = page.evaluate(
            "([api, token, what]) => attempt(api, token, what)",
            [server.url, server.tokens["alice"], what],
        )
    finally:
        context.close()
    assert "error" not in result, result.get("error")
    return result


def test_the_chat_front_ends_calls_stream_approve_an_edit_and_refund_once(
    chromium: Any, app_origin: str, server: Server
) -> None:
    result = _run_page(chromium, app_origin, server, "chat")

    asked, answered = result["asked"], result["answered"]
    # Resumable: every event has its id, 1, 2, 3… per run; each stream ends.
    assert _ids(asked) == list(range(1, len(asked) + 1))
    assert _ids(answered) == list(range(1, len(answered) + 1))
    assert asked[0]["event"] == "metadata" and asked[-1]["event"] == "end"
    assert answered[-1]["event"] == "end"
    assert not [p for p in asked + answered if p["event"] == "error"]

    # The approval the front end shows: LangChain's HITL request for issue_refund.
    (interrupt,) = next(
        p["data"]["__interrupt__"]
        for p in reversed(asked)
        if p["event"] == "values" and "__interrupt__" in p["data"]
    )
    (action,) = interrupt["value"]["action_requests"]
    assert action["name"] == "issue_refund"
    assert action["args"] == {"order_id": "42", "amount": 10.0}

    # The edit ran once, with the amount the schema asks for (5.0 from the text "5").
    tools = [m["content"] for m in result["values"]["messages"] if m["type"] == "tool"]
    refunds = [t for t in tools if "Refunded" in t]
    assert len(refunds) == 1, tools
    assert "Refunded 5.00 EUR on order 42." in refunds[0]
    assert result["status"] == "idle"
    streamed = [
        m["content"]
        for p in answered
        if p["event"] == "messages"
        for m in p["data"][:1]
        if m.get("type") == "tool"
    ]
    assert sum("Refunded 5.00 EUR" in c for c in streamed) == 1

    path = server.database_url.removeprefix("sqlite://")
    with sqlite3.connect(path) as db:
        effects = db.execute(
            "SELECT tool, args, status FROM criogen_effect WHERE thread_id = ?",
            (result["thread_id"],),
        ).fetchall()
        decisions = db.execute(
            "SELECT decision, actor FROM criogen_decision WHERE thread_id = ?",
            (result["thread_id"],),
        ).fetchall()
    refunded = [e for e in effects if e[0] == "issue_refund"]
    assert len(refunded) == 1, effects
    assert json.loads(refunded[0][1]) == {"order_id": "42", "amount": 5.0}
    assert refunded[0][2] == "success"
    assert decisions == [("edit", "alice")]


def test_a_reloaded_page_picks_the_run_up_with_join_stream_and_the_last_event_id(
    chromium: Any, app_origin: str, server: Server
) -> None:
    result = _run_page(chromium, app_origin, server, "reload")
    before, after = result["before"], result["after"]
    assert [p["event"] for p in before] == ["metadata", "values", "values"]
    # The run id the page read from Content-Location (exposed to scripts by CORS).
    assert result["created"] == {
        "run_id": before[0]["data"]["run_id"],
        "thread_id": result["thread_id"],
    }
    assert _ids(before) == [1, 2, 3]
    assert _ids(after) == [4, 5, 6]
    assert [p["event"] for p in after] == ["values", "values", "end"]
    assert after[1]["data"]["steps"] == ["a", "b", "c"]
