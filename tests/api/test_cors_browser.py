"""CORS in a real browser: a page on a second origin (another port of 127.0.0.1) calls
the API with ``fetch`` and an ``x-api-key``, as a browser app such as LangChain's chat
front end does; Chromium enforces CORS, so this is what such an app sees.

The page creates threads, searches them and runs a graph, and reads the exposed
``x-pagination-total``, ``x-pagination-next``, ``content-location`` and a resumable
stream's ``location`` from script:
against the default configuration (Daphne, ``*``), and against an allow-list under
uvicorn, where a page from an origin not on the list gets nothing through.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from tests.api.conftest import Server, start_server, stop_server

pytestmark = pytest.mark.browser

PAGE = b"""<!doctype html>
<html><head><meta charset="utf-8"><title>A browser app</title></head>
<body>
<script>
// What a browser app does with the API: every call carries the token in x-api-key
// (so the browser sends a preflight first) and reads headers the API exposes.
async function talk(api, token, mark) {
  const json = {"x-api-key": token, "content-type": "application/json"};
  const post = (path, body) =>
    fetch(api + path, {method: "POST", headers: json, body: JSON.stringify(body)});
  const info = await fetch(api + "/info", {headers: {"x-api-key": token}});
  const made = [];
  for (const n of [1, 2]) {
    const created = await post("/threads", {metadata: {mark: mark, n: n}});
    made.push({status: created.status, thread_id: (await created.json()).thread_id});
  }
  const search = await post("/threads/search", {metadata: {mark: mark}, limit: 1});
  const ran = await post("/threads/" + made[0].thread_id + "/runs/wait",
                         {assistant_id: "steps", input: {n: 0}});
  const streamed = await post("/threads/" + made[1].thread_id + "/runs/stream",
                              {assistant_id: "steps", input: {n: 0}, stream_resumable: true});
  const reconnect = streamed.headers.get("location");
  await streamed.text();
  return {
    info: {status: info.status, server: (await info.json()).metadata.server},
    created: made.map((m) => m.status),
    search: {
      status: search.status,
      found: (await search.json()).length,
      total: search.headers.get("x-pagination-total"),
      next: search.headers.get("x-pagination-next"),
    },
    run: {status: ran.status, values: await ran.json(),
          location: ran.headers.get("content-location"),
          thread_id: made[0].thread_id},
    stream: {status: streamed.status, reconnect: reconnect, thread_id: made[1].thread_id},
  };
}

async function attempt(api, token, mark) {
  try {
    return await talk(api, token, mark);
  } catch (error) {
    return {error: String(error)};
  }
}
</script>
</body></html>
"""


class _Page(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - the http.server API
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(PAGE)))
        self.end_headers()
        self.wfile.write(PAGE)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the API's name
        pass


@pytest.fixture(scope="module")
def page_origins() -> Iterator[tuple[str, str]]:
    """Two origins serving the page: (on the allow-list below, not on it)."""
    servers = [ThreadingHTTPServer(("127.0.0.1", 0), _Page) for _ in range(2)]
    threads = [threading.Thread(target=s.serve_forever, daemon=True) for s in servers]
    for thread in threads:
        thread.start()
    yield tuple(f"http://127.0.0.1:{s.server_address[1]}" for s in servers)  # type: ignore[misc]
    for server, thread in zip(servers, threads, strict=True):
        server.shutdown()
        server.server_close()
        thread.join(10)


@pytest.fixture(scope="module")
def listed_server(
    tmp_path_factory: pytest.TempPathFactory, page_origins: tuple[str, str]
) -> Iterator[Server]:
    """uvicorn allowing only the first page origin (``CRIOGEN_CORS_ALLOW_ORIGINS``)."""
    tmp = tmp_path_factory.mktemp("cors-browser")
    srv = start_server(
        f"sqlite://{tmp / 'listed.db'}",
        tmp,
        asgi_server="uvicorn",
        CRIOGEN_CORS_ALLOW_ORIGINS=f"https://chat.example.com,{page_origins[0]}",
    )
    yield srv
    stop_server(srv)


def _from_page(chromium: Any, origin: str, api: Server) -> tuple[dict[str, Any], str]:
    """Load the page from ``origin`` and run its calls against ``api``; (result, mark)."""
    mark = uuid.uuid4().hex
    context = chromium.new_context()
    try:
        page = context.new_page()
        page.goto(origin + "/app.html")
        result = page.evaluate(
            "([api, token, mark]) => attempt(api, token, mark)",
            [api.url, api.tokens["alice"], mark],
        )
    finally:
        context.close()
    return result, mark


def _assert_it_all_worked(result: dict[str, Any], api: Server) -> None:
    assert "error" not in result, result
    assert result["info"] == {"status": 200, "server": "criogen"}
    assert result["created"] == [200, 200]
    assert result["search"] == {"status": 200, "found": 1, "total": "2", "next": "1"}
    run = result["run"]
    assert run["status"] == 200
    assert run["values"]["steps"] == ["a", "b", "c"]
    assert run["location"].startswith(f"/threads/{run['thread_id']}/runs/")
    # Where the JavaScript SDK reconnects a dropped resumable stream: readable too.
    stream = result["stream"]
    assert stream["status"] == 200
    assert stream["reconnect"].startswith(f"/threads/{stream['thread_id']}/runs/")
    assert stream["reconnect"].endswith("/stream")


def test_a_page_on_another_origin_uses_the_api(
    chromium: Any, page_origins: tuple[str, str], server: Server
) -> None:
    result, _ = _from_page(chromium, page_origins[1], server)
    _assert_it_all_worked(result, server)


def test_a_page_on_the_allow_list_uses_the_api(
    chromium: Any, page_origins: tuple[str, str], listed_server: Server
) -> None:
    result, _ = _from_page(chromium, page_origins[0], listed_server)
    _assert_it_all_worked(result, listed_server)


def test_a_page_not_on_the_allow_list_gets_nothing_through(
    chromium: Any, page_origins: tuple[str, str], listed_server: Server
) -> None:
    result, mark = _from_page(chromium, page_origins[1], listed_server)
    assert result == {"error": "TypeError: Failed to fetch"}
    with listed_server.http("alice") as http:
        # The server is up and the page's preflight is what it refuses...
        asked = {
            "Origin": page_origins[1],
            "Access-Control-Request-Method": "GET",
            "Access-Control-Request-Headers": "x-api-key",
        }
        refused = http.options("/info", headers=asked)
        assert refused.status_code == 400
        assert refused.json()["code"] == "cors_refused"
        # ...so no request of the page reached a view: no thread was made.
        assert http.post("/threads/search", json={"metadata": {"mark": mark}}).json() == []
    assert httpx.get(listed_server.url + "/ok").status_code == 200
