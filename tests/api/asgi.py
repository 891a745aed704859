"""One HTTP request to an ASGI application, in process (the API's handler or the site's
application), and its answer as the server would send it."""

from __future__ import annotations

import asyncio
from typing import Any

Answer = tuple[int, list[tuple[bytes, bytes]], bytes]
"""The status, the headers in their order, and the body."""


async def asgi_call(
    app: Any,
    method: str,
    path: str,
    headers: list[tuple[bytes, bytes]],
    query: bytes = b"",
    body: bytes = b"",
    scheme: str = "http",
) -> Answer:
    """``app``'s answer to one request from 127.0.0.1; the client stays connected."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": scheme,
        "path": path,
        "raw_path": path.encode(),
        "query_string": query,
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 40000),
        "server": ("testserver", 80),
    }
    request = [{"type": "http.request", "body": body, "more_body": False}]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        if request:
            return request.pop()
        await asyncio.Event().wait()
        raise AssertionError

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return (
        sent[0]["status"],
        list(sent[0]["headers"]),
        b"".join(m.get("body", b"") for m in sent[1:]),
    )


def get_state_failing_once(monkeypatch: Any) -> dict[str, int]:
    """Make the API's ``get_state`` raise once (a lost connection), then read as usual;
    returns the counter of its calls (``{"n": ...}``)."""
    from api.threads import reads

    calls = {"n": 0}
    get_state = reads.get_state

    def flaky(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("a lost connection")
        return get_state(*args, **kwargs)

    monkeypatch.setattr("api.threads.get_state", flaky)
    return calls
