"""Criogen served by uvicorn, the second ASGI server it supports (docs/deployment.md):
the REST API through the official SDK, streaming, and the dashboard with its live
socket, as under Daphne."""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect as ws_connect

from tests.api.conftest import Server, start_server, stop_server
from tests.conftest import PASSWORD


@pytest.fixture(scope="module")
def uvicorn_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("uvicorn")
    srv = start_server(f"sqlite://{tmp / 'uvicorn.db'}", tmp, asgi_server="uvicorn")
    yield srv
    stop_server(srv)


async def test_the_api_and_its_streams_under_uvicorn(uvicorn_server: Server) -> None:
    async with uvicorn_server.client("alice") as alice, uvicorn_server.client("bob") as bob:
        thread = await alice.threads.create(metadata={"served_by": "uvicorn"})
        tid = thread["thread_id"]
        done = await alice.runs.wait(tid, "steps", input={"n": 0})
        assert done == {"steps": ["a", "b", "c"], "n": 3}
        values = [
            part.data
            async for part in alice.runs.stream(tid, "steps", input={"n": 10})
            if part.event == "values"
        ]
        assert values[-1] == {"steps": ["a", "b", "c"] * 2, "n": 13}
        state = await alice.threads.get_state(tid)
        assert state["values"]["n"] == 13
        found = await alice.threads.search(metadata={"served_by": "uvicorn"})
        assert [t["thread_id"] for t in found] == [tid]
        with pytest.raises(Exception) as caught:
            await bob.threads.get(tid)
        assert caught.value.status_code == 404  # type: ignore[attr-defined]


def test_the_dashboard_and_its_live_socket_under_uvicorn(uvicorn_server: Server) -> None:
    with httpx.Client(base_url=uvicorn_server.url, timeout=30) as browser:
        page = browser.get("/accounts/login/")
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
        assert token, page.text[:300]
        signed = browser.post(
            "/accounts/login/",
            data={"username": "olga", "password": PASSWORD, "csrfmiddlewaretoken": token.group(1)},
        )
        assert signed.status_code == 302 and "sessionid" in browser.cookies
        inbox = browser.get("/", follow_redirects=True)
        assert inbox.status_code == 200 and "Inbox" in inbox.text
        cookie = f"sessionid={browser.cookies['sessionid']}"
    url = uvicorn_server.url.replace("http://", "ws://") + "/ws/ui/inbox/"
    origin = {"Origin": uvicorn_server.url}
    with ws_connect(url, additional_headers={**origin, "Cookie": cookie}, open_timeout=10) as ws:
        assert ws.recv(timeout=10)  # the inbox's first render
    with pytest.raises(InvalidStatus) as refused:
        ws_connect(url, additional_headers=origin, open_timeout=10)
    assert refused.value.response.status_code == 403  # anonymous


def test_a_uvicorn_server_sent_sigterm_hands_its_run_back_after_the_step(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """As under Daphne: the in-process runner stops the run after its current step and
    leaves it pending for the next server (docs/deployment.md)."""
    import signal
    import sqlite3
    import time

    tmp = tmp_path_factory.mktemp("uvicorn-term")
    db_path = tmp / "term.db"
    srv = start_server(f"sqlite://{db_path}", tmp, asgi_server="uvicorn")
    try:
        with srv.http("alice") as http:
            tid = http.post("/threads", json={}).json()["thread_id"]
            run = http.post(
                f"/threads/{tid}/runs",
                json={"assistant_id": "steps", "input": {"sleep": 1}, "durability": "sync"},
            ).json()
            deadline = time.monotonic() + 20
            while http.get(f"/threads/{tid}/state").json()["values"].get("steps") != ["a"]:
                assert time.monotonic() < deadline, "node a never checkpointed"
                time.sleep(0.05)
        time.sleep(0.3)  # b is sleeping
        srv.process.send_signal(signal.SIGTERM)
        srv.process.wait(30)  # uvicorn ends with the signal it got: no exit hooks
    finally:
        stop_server(srv)
    with sqlite3.connect(db_path) as db:
        status, attempts = db.execute(
            "SELECT status, attempts FROM criogen_run WHERE run_id = ?",
            [run["run_id"].replace("-", "")],
        ).fetchone()
        (head_version,) = db.execute(
            "SELECT head_version FROM criogen_thread WHERE id = ?", [tid]
        ).fetchone()
    assert (status, attempts) == ("pending", 1)
    assert head_version == 3  # b finished and was checkpointed before the exit
