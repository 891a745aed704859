"""Resumable streams (``stream_resumable: true``), as LangGraph front ends use them.

Two live servers share one database (SQLite file or PostgreSQL) and Redis, as two web
processes behind a proxy do: a client that loses its connection to one reconnects to
the *other* with ``Last-Event-ID`` and gets exactly the events it missed, in order,
then the rest live. Also: ``-1`` / ``0`` replay everything, ``?stream_mode=`` filters
the replay, the sweep deletes a log past ``CRIOGEN_STREAM_RETENTION_SECONDS``, and
``on_disconnect`` decides whether a dropped client's run goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langgraph_sdk import get_client

from tests.api.conftest import Server, _manage, start_server, stop_server
from tests.api.test_runs import wait_cancel_asked
from tests.conftest import START_REDIS, need_service, redis_url

pytestmark = pytest.mark.redis

REDIS_URL = redis_url("streams")
SLOW = {"n": 0, "sleep": 3}
"""``steps`` input whose node b sleeps: the run is still going when the client drops."""
MODES = ["values", "updates"]


def _redis_available() -> bool:
    try:
        with socket.create_connection(("127.0.0.1", 6379), timeout=2):
            return True
    except OSError:
        return False


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def pair(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Server, Server]]:
    """Two servers on the same database and the same Redis channel layer."""
    need_service("Redis", _redis_available(), START_REDIS)
    tmp = tmp_path_factory.mktemp(f"resumable-{request.param}")
    if request.param == "postgres":
        request.applymarker(pytest.mark.postgres)
        url = request.getfixturevalue("postgres_url")
    else:
        url = f"sqlite://{tmp / 'shared.db'}"
    first = start_server(url, tmp, REDIS_URL=REDIS_URL)
    try:
        # The second one sends heartbeats every second (the default is 10 s).
        second = start_server(url, tmp, REDIS_URL=REDIS_URL, CRIOGEN_STREAM_HEARTBEAT_SECONDS="1")
    except BaseException:
        stop_server(first)
        raise
    yield first, second
    stop_server(second)
    stop_server(first)


@pytest.fixture(scope="module")
def lonely(
    pair: tuple[Server, Server], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    """A third server on the same database but without the shared channel layer
    (nothing tells it when another process writes a log), heartbeats every second."""
    tmp = tmp_path_factory.mktemp("resumable-lonely")
    srv = start_server(pair[0].database_url, tmp, CRIOGEN_STREAM_HEARTBEAT_SECONDS="1")
    yield srv
    stop_server(srv)


class CuttingProxy:
    """A TCP proxy standing for a load balancer: its first connection goes to one
    server and is cut once the response has carried ``cut_after``; every later one goes
    to the other server (the client's reconnection lands on another process)."""

    def __init__(self, first: Server, then: Server, cut_after: bytes) -> None:
        self.targets = [first.url, then.url]
        self.cut_after = cut_after
        self.connections = 0
        self.url = ""
        self._server: Any = None

    async def __aenter__(self) -> CuttingProxy:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._server.close()
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        host, port = self.targets[min(self.connections, 2) - 1].rsplit(":", 1)
        upstream_r, upstream_w = await asyncio.open_connection(host.split("//")[1], int(port))
        watch = self.connections == 1

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter, cut: bool) -> None:
            seen = b""
            while data := await src.read(65536):
                dst.write(data)
                await dst.drain()
                seen += data if cut else b""
                if cut and self.cut_after in seen:
                    return

        tasks = [
            asyncio.ensure_future(pipe(reader, upstream_w, False)),
            asyncio.ensure_future(pipe(upstream_r, writer, watch)),
        ]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            for w in (writer, upstream_w):
                w.close()


def _part(part: Any) -> tuple[int, str, Any]:
    assert part.id is not None, part
    return int(part.id), part.event, part.data


async def _all(stream: Any) -> list[tuple[int, str, Any]]:
    return [_part(p) async for p in stream]


async def _first(stream: Any, count: int) -> list[tuple[int, str, Any]]:
    """The first ``count`` parts of ``stream``; then the client drops it."""
    seen: list[tuple[int, str, Any]] = []
    async with contextlib.aclosing(stream):
        async for part in stream:
            seen.append(_part(part))
            if len(seen) == count:
                break
    return seen


def _assert_numbered(parts: list[tuple[int, str, Any]], first: int = 1) -> None:
    """Ids first, first+1, … without a gap or a repeat; ``end`` last and only there."""
    assert [p[0] for p in parts] == list(range(first, first + len(parts))), parts
    assert [p[1] for p in parts].count("end") == 1
    assert parts[-1][1] == "end"


async def test_a_dropped_client_resumes_on_another_server_with_exactly_the_missing_events(
    pair: tuple[Server, Server],
) -> None:
    one, two = pair
    a, b = one.client("alice"), two.client("alice")
    try:
        tid = (await a.threads.create())["thread_id"]
        stream = a.runs.stream(tid, "steps", input=SLOW, stream_mode=MODES, stream_resumable=True)
        seen = await _first(stream, 5)  # metadata, input's values+updates, a's values+updates
        run_id = seen[0][2]["run_id"]
        assert (await b.runs.get(tid, run_id))["status"] in ("pending", "running")

        rest = await _all(b.runs.join_stream(tid, run_id, last_event_id=str(seen[-1][0])))

        assert [p[0] for p in seen] == [1, 2, 3, 4, 5]
        _assert_numbered(seen + rest)
        assert [p[1] for p in rest] == ["values", "updates", "values", "updates", "end"]
        assert rest[0][2]["steps"] == ["a", "b"]
        assert rest[2][2] == {"steps": ["a", "b", "c"], "n": 3, "sleep": 3}
        # The client went away; by default (on_disconnect "continue") the run finished.
        assert (await b.runs.get(tid, run_id))["status"] == "success"
        # Both servers replay the same log.
        everything = await _all(a.runs.join_stream(tid, run_id, last_event_id="-1"))
        assert everything == seen + rest
        assert await _all(b.runs.join_stream(tid, run_id, last_event_id="-1")) == everything
    finally:
        await a.aclose()
        await b.aclose()


@pytest.mark.parametrize("last", ["-1", "0"])
async def test_minus_one_and_zero_replay_every_event(
    pair: tuple[Server, Server], last: str
) -> None:
    one, two = pair
    a, b = one.client("alice"), two.client("alice")
    try:
        tid = (await a.threads.create())["thread_id"]
        live = await _all(
            a.runs.stream(tid, "steps", input={"n": 0}, stream_mode=MODES, stream_resumable=True)
        )
        _assert_numbered(live)
        assert live[0][1] == "metadata"
        run_id = live[0][2]["run_id"]
        assert await _all(b.runs.join_stream(tid, run_id, last_event_id=last)) == live
        # Without Last-Event-ID a resumable run's join also starts at the beginning.
        assert await _all(b.runs.join_stream(tid, run_id)) == live
    finally:
        await a.aclose()
        await b.aclose()


async def test_stream_mode_filters_the_replay(pair: tuple[Server, Server]) -> None:
    one, two = pair
    a, b = one.client("alice"), two.client("alice")
    try:
        tid = (await a.threads.create())["thread_id"]
        live = await _all(
            a.runs.stream(tid, "steps", input={"n": 0}, stream_mode=MODES, stream_resumable=True)
        )
        run_id = live[0][2]["run_id"]
        only = await _all(
            b.runs.join_stream(tid, run_id, stream_mode="updates", last_event_id="-1")
        )
        assert only == [p for p in live if p[1] in ("metadata", "updates", "end")]
        assert [p[1] for p in only].count("updates") == 4
        # After an id, still filtered: the updates after the first two.
        later = await _all(
            b.runs.join_stream(tid, run_id, stream_mode="updates", last_event_id=str(only[2][0]))
        )
        assert later == only[3:]
    finally:
        await a.aclose()
        await b.aclose()


async def test_a_stateless_run_and_a_background_run_are_resumable_too(
    pair: tuple[Server, Server],
) -> None:
    one, two = pair
    with one.http() as http:
        body = {"assistant_id": "steps", "input": {"n": 0}, "stream_resumable": True}
        with http.stream("POST", "/runs/stream", json={**body, "on_completion": "keep"}) as sent:
            live_text = sent.read().decode()
        where = sent.headers["content-location"]
    tid, run_id = where.split("/")[2], where.split("/")[4]
    a, b = one.client("alice"), two.client("alice")
    try:
        logged = await _all(b.runs.join_stream(tid, run_id, last_event_id="-1"))
        _assert_numbered(logged)
        assert logged[0] == (1, "metadata", {"run_id": run_id, "attempt": 1})
        assert live_text.count("\nid: ") + live_text.startswith("id: ") == len(logged)

        other = (await a.threads.create())["thread_id"]
        made = await a.runs.create(other, "steps", input=SLOW, stream_resumable=True)
        logged = await _all(b.runs.join_stream(other, made["run_id"], last_event_id="-1"))
        _assert_numbered(logged)
        assert logged[0] == (1, "metadata", {"run_id": made["run_id"], "attempt": 1})
        assert logged[-2][2]["steps"] == ["a", "b", "c"]

        third = (await a.threads.create())["thread_id"]
        (batched,) = await a.runs.create_batch(
            [
                {
                    "thread_id": third,
                    "assistant_id": "steps",
                    "input": {"n": 0},
                    "stream_resumable": True,
                }
            ]
        )
        logged = await _all(b.runs.join_stream(third, batched["run_id"], last_event_id="0"))
        _assert_numbered(logged)
        assert logged[-2][2]["steps"] == ["a", "b", "c"]
    finally:
        await a.aclose()
        await b.aclose()


def test_stream_responses_say_where_to_reconnect_and_where_the_run_is(
    pair: tuple[Server, Server],
) -> None:
    one, _ = pair
    with one.http() as http:
        tid = http.post("/threads", json={}).json()["thread_id"]
        for path, resumable in (
            (f"/threads/{tid}/runs/stream", True),
            (f"/threads/{tid}/runs/stream", False),
            ("/runs/stream", True),
        ):
            body = {"assistant_id": "steps", "input": {"n": 0}, "stream_resumable": resumable}
            if path == "/runs/stream":
                body["on_completion"] = "keep"
            with http.stream("POST", path, json=body) as response:
                text = response.read().decode()
            assert response.status_code == 200, text
            run_id = text.split('"run_id":"', 1)[1].split('"', 1)[0]
            thread = tid if path.startswith("/threads") else response.headers["location"][9:45]
            where = f"/threads/{thread}/runs/{run_id}"
            assert response.headers["location"] == where + "/stream"
            assert response.headers["content-location"] == where
            # Resumable events carry ids; the others do not (nothing is kept for them).
            assert ("\nid: 2\n" in "\n" + text) is resumable
            with http.stream("GET", where + "/stream") as joined:
                joined.read()
            assert joined.headers["location"] == where + "/stream"
            assert joined.headers["content-location"] == where


def test_a_last_event_id_that_is_not_a_number_is_a_422(pair: tuple[Server, Server]) -> None:
    one, _ = pair
    with one.http() as http:
        tid = http.post("/threads", json={}).json()["thread_id"]
        run = http.post(
            f"/threads/{tid}/runs/wait",
            json={"assistant_id": "steps", "input": {"n": 0}, "stream_resumable": True},
        )
        assert run.status_code == 200
        run_id = run.headers["content-location"].rsplit("/", 1)[1]
        response = http.get(
            f"/threads/{tid}/runs/{run_id}/stream", headers={"Last-Event-ID": "1733-0"}
        )
    assert response.status_code == 422
    assert response.json()["field"] == "last_event_id"


async def test_on_disconnect_cancel_cancels_the_run_when_the_client_drops(
    pair: tuple[Server, Server], tmp_path: Path
) -> None:
    one, two = pair
    a, b = one.client("alice"), two.client("alice")
    # Node b waits at a gate opened only once the cancel reached the run (it is
    # cooperative: it lands before node c), however loaded the machine.
    gate = tmp_path / "gate"
    try:
        tid = (await a.threads.create())["thread_id"]
        stream = a.runs.stream(
            tid,
            "steps",
            input={"n": 0, "gate": str(gate)},
            stream_resumable=True,
            on_disconnect="cancel",
        )
        seen = await _first(stream, 3)  # metadata, the input's values, a's values
        run_id = seen[0][2]["run_id"]
        await wait_cancel_asked(b, tid, run_id)
        gate.touch()
        run = await b.runs.join(tid, run_id)  # waits for the end
        assert "steps" in run
        final = await b.runs.get(tid, run_id)
        assert final["status"] == "interrupted"
        assert final["cancel_reason"] == "cancelled by alice"
        # The log still ends, and holds what the run did before it was cancelled.
        logged = await _all(b.runs.join_stream(tid, run_id, last_event_id="-1"))
        _assert_numbered(logged)
        assert logged[:3] == seen
        assert all("c" not in p[2].get("steps", []) for p in logged if p[1] == "values")
    finally:
        await a.aclose()
        await b.aclose()


def test_the_sweep_deletes_a_log_past_its_retention(pair: tuple[Server, Server]) -> None:
    one, two = pair
    with one.http() as http:
        tid = http.post("/threads", json={}).json()["thread_id"]
        with http.stream(
            "POST",
            f"/threads/{tid}/runs/stream",
            json={"assistant_id": "steps", "input": {"n": 0}, "stream_resumable": True},
        ) as response:
            response.read()
        stream = response.headers["location"]

    def replay() -> str:
        with two.http() as other:
            return other.get(stream, headers={"Last-Event-ID": "-1"}).text

    assert replay().startswith("id: 1\nevent: metadata\n")
    sweep = ("criogen_sweep", "--no-reap", "--no-deadlines")
    kept = _manage({**two.env, "CRIOGEN_STREAM_RETENTION_SECONDS": "3600"}, *sweep)
    assert '"streams": 0' in kept
    assert replay().startswith("id: 1\n")
    gone = _manage({**two.env, "CRIOGEN_STREAM_RETENTION_SECONDS": "0"}, *sweep)
    assert '"streams": 0' not in gone
    # The log is gone: the join rebuilds the events from the checkpoints, without ids.
    text = replay()
    assert text.startswith("event: metadata\n")
    assert "\nid: " not in text
    assert "event: end" in text


def test_a_resumable_stream_is_accepted_on_wait(pair: tuple[Server, Server]) -> None:
    one, _ = pair
    tag = uuid.uuid4().hex
    with one.http() as http:
        done = http.post(
            "/runs/wait",
            json={
                "assistant_id": "steps",
                "input": {"n": 0},
                "stream_resumable": True,
                "metadata": {"tag": tag},
            },
        )
    assert done.status_code == 200, done.text
    assert done.json()["steps"] == ["a", "b", "c"]


def test_a_silent_stream_sends_heartbeats(pair: tuple[Server, Server], tmp_path: Path) -> None:
    # Node b waits at a gate the test opens only after two heartbeats came while it was
    # silent: the test does not bet on how many fit in a given time on a loaded machine.
    _, two = pair
    gate = tmp_path / "gate"
    chunks: list[str] = []
    heartbeats = 0
    with two.http() as http:
        tid = http.post("/threads", json={}).json()["thread_id"]
        body = {
            "assistant_id": "steps",
            "input": {"n": 0, "gate": str(gate)},
            "stream_resumable": True,
        }
        with http.stream("POST", f"/threads/{tid}/runs/stream", json=body) as response:
            for chunk in response.iter_text():
                chunks.append(chunk)
                text = "".join(chunks)
                if '"steps":["a"]' in text and not gate.exists():
                    between = text.split('"steps":["a"]', 1)[1]
                    heartbeats = between.count(": heartbeat\n\n")
                    if heartbeats >= 2:
                        gate.touch()
    text = "".join(chunks)
    between = text.split('"steps":["a"]', 1)[1].split('"steps":["a","b"]', 1)[0]
    assert between.count(": heartbeat\n\n") >= 2, text
    assert text.rstrip().endswith("event: end\ndata: null")


@pytest.mark.reliability_variants("postgres")  # the log's reads: both databases, other tests
async def test_a_process_without_the_shared_channel_layer_still_follows_the_log(
    pair: tuple[Server, Server], lonely: Server
) -> None:
    one, _ = pair
    a, c = one.client("alice"), lonely.client("alice")
    try:
        tid = (await a.threads.create())["thread_id"]
        stream = a.runs.stream(tid, "steps", input=SLOW, stream_mode=MODES, stream_resumable=True)
        seen = await _first(stream, 3)
        run_id = seen[0][2]["run_id"]
        rest = await _all(c.runs.join_stream(tid, run_id, last_event_id="3"))
        _assert_numbered(seen + rest)
        assert rest[-3][2]["steps"] == ["a", "b", "c"]
        assert await _all(c.runs.join_stream(tid, run_id, last_event_id="-1")) == seen + rest
    finally:
        await a.aclose()
        await c.aclose()


async def test_a_log_whose_writer_died_is_finished_from_the_checkpoints(
    pair: tuple[Server, Server], tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The process that accepted the stream (and ran the run) is killed mid-run: another
    one takes the run over (the lease reaper) and a reader fills the log in."""
    _, two = pair
    tmp = tmp_path_factory.mktemp("resumable-doomed")
    doomed = start_server(two.database_url, tmp, REDIS_URL=REDIS_URL)
    d, b = doomed.client("alice"), two.client("alice")
    try:
        tid = (await d.threads.create())["thread_id"]
        seen: list[tuple[int, str, Any]] = []
        stream = d.runs.stream(tid, "steps", input=SLOW, stream_resumable=True)
        async with contextlib.aclosing(stream):
            async for part in stream:
                seen.append(_part(part))
                if len(seen) == 3:  # metadata, the input's values, a's values
                    doomed.process.kill()
                    doomed.process.wait()
                    break
        run_id = seen[0][2]["run_id"]
        rest = await _all(b.runs.join_stream(tid, run_id, last_event_id="3"))
        _assert_numbered(seen + rest)
        assert [p[1] for p in rest] == ["values", "values", "end"]
        assert rest[1][2]["steps"] == ["a", "b", "c"]
        assert (await b.runs.get(tid, run_id))["status"] == "success"
    finally:
        stop_server(doomed)
        await d.aclose()
        await b.aclose()


async def test_the_sdk_reconnects_by_itself_to_another_process_and_misses_nothing(
    pair: tuple[Server, Server],
) -> None:
    """What a front end sees: the connection drops mid-run, the SDK reconnects to the
    stream's Location with Last-Event-ID (through the proxy, to the other server), and
    the events it yields are every event once, in order."""
    one, two = pair
    a = one.client("alice")
    try:
        tid = (await a.threads.create())["thread_id"]
        async with CuttingProxy(one, two, b'"steps":["a"]') as proxy:
            via = get_client(url=proxy.url, api_key=one.tokens["alice"])
            try:
                got = await _all(
                    via.runs.stream(
                        tid, "steps", input=SLOW, stream_mode=MODES, stream_resumable=True
                    )
                )
            finally:
                await via.aclose()
        assert proxy.connections == 2  # the stream, then one reconnection
        _assert_numbered(got)
        run_id = got[0][2]["run_id"]
        assert await _all(a.runs.join_stream(tid, run_id, last_event_id="-1")) == got
        assert got[-2][2] == {"c": {"steps": ["c"], "n": 3}}
    finally:
        await a.aclose()


async def test_a_run_queued_behind_another_streams_only_its_own_changes(
    pair: tuple[Server, Server],
) -> None:
    one, two = pair
    a, b = one.client("alice"), two.client("alice")
    try:
        tid = (await a.threads.create())["thread_id"]
        await a.runs.create(tid, "steps", input={"n": 0, "sleep": 2})
        live = await _all(
            a.runs.stream(
                tid,
                "steps",
                input={"n": 10, "sleep": 0},
                stream_mode="updates",
                stream_resumable=True,
                multitask_strategy="enqueue",
            )
        )
        _assert_numbered(live)
        updates = [p[2] for p in live if p[1] == "updates"]
        assert updates == [
            {"__start__": {"n": 10, "sleep": 0}},
            {"a": {"steps": ["a"], "n": 11}},
            {"b": {"steps": ["b"], "n": 12}},
            {"c": {"steps": ["c"], "n": 13}},
        ]
        run_id = live[0][2]["run_id"]
        assert await _all(b.runs.join_stream(tid, run_id, last_event_id="-1")) == live
    finally:
        await a.aclose()
        await b.aclose()


@pytest.mark.reliability_variants("postgres")  # the sweep's delete: both databases, above
def test_the_in_process_timer_prunes_logs_past_their_retention(
    pair: tuple[Server, Server], tmp_path_factory: pytest.TempPathFactory
) -> None:
    one, _ = pair
    tmp = tmp_path_factory.mktemp("resumable-sweeper")
    sweeper = start_server(
        one.database_url,
        tmp,
        CRIOGEN_SWEEP_SECONDS="1",
        CRIOGEN_STREAM_RETENTION_SECONDS="1",
    )
    try:
        with sweeper.http() as http:
            tid = http.post("/threads", json={}).json()["thread_id"]
            body = {"assistant_id": "steps", "input": {"n": 0}, "stream_resumable": True}
            with http.stream("POST", f"/threads/{tid}/runs/stream", json=body) as response:
                assert response.read().decode().startswith("id: 1\n")
            where = response.headers["location"]
            deadline = time.monotonic() + 30
            while True:
                replay = http.get(where, headers={"Last-Event-ID": "-1"}).text
                if not replay.startswith("id: "):
                    break
                assert time.monotonic() < deadline, "the timer did not prune the log in 30 s"
                time.sleep(0.5)
        assert replay.startswith("event: metadata\n")  # rebuilt from the checkpoints
    finally:
        stop_server(sweeper)
