"""Time limits over the official ``langgraph_sdk`` client, on a live server with SQLite
and with PostgreSQL: a run past its ``config.configurable.run_timeout_seconds`` ends
``timeout``, ``runs.wait`` answers the values so far, the thread's head is a failure
checkpoint carrying TimeoutError, and a run without input from that checkpoint
continues it; a bad limit is
a 422 naming the field."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.api.conftest import Server


@pytest.fixture(params=["sqlite", "postgres"])
def live(request: pytest.FixtureRequest) -> Server:
    """The session's API server on SQLite, then on PostgreSQL."""
    name = "server" if request.param == "sqlite" else "pg_server"
    return request.getfixturevalue(name)  # type: ignore[no-any-return]


@pytest.fixture
def sdk(live: Server) -> Iterator[Any]:
    """alice's SDK client on ``live``, closed after the test."""
    client = live.sync_client()
    yield client
    client.close()


@pytest.fixture
def olga(live: Server) -> Iterator[Any]:
    """The operator's SDK client (operators create assistants)."""
    client = live.sync_client("olga")
    yield client
    client.close()


def limit(seconds: Any) -> dict[str, Any]:
    return {"configurable": {"run_timeout_seconds": seconds}}


def test_a_run_past_its_limit_ends_timeout_and_wait_answers_the_values_so_far(sdk: Any) -> None:
    tid = sdk.threads.create()["thread_id"]
    # Node b sleeps past the limit; it is not cut short, the run stops before c.
    values = sdk.runs.wait(tid, "steps", input={"n": 0, "sleep": 0.6}, config=limit(0.3))

    assert values == {"n": 2, "sleep": 0.6, "steps": ["a", "b"]}
    run = sdk.runs.list(tid)[0]
    assert run["status"] == "timeout"
    assert run["error"]["type"] == "TimeoutError"
    assert run["kwargs"]["run_timeout_seconds"] == 0.3
    state = sdk.threads.get_state(tid)
    assert state["next"] == ["c"]
    assert "passed its time limit of 0.3 seconds" in state["tasks"][0]["error"]
    assert sdk.threads.get(tid)["status"] == "error"

    # A run without input from the failure checkpoint retries it: node c runs (the
    # server's limit, a day, applies to it).
    head = state["checkpoint"]["checkpoint_id"]
    assert sdk.runs.wait(tid, "steps", input=None, checkpoint_id=head) == {
        "n": 3,
        "sleep": 0.6,
        "steps": ["a", "b", "c"],
    }
    assert sdk.runs.list(tid)[0]["status"] == "success"


def test_a_runs_limit_overrides_its_assistants(sdk: Any, olga: Any) -> None:
    assistant = olga.assistants.create("steps", config=limit(0.2))
    tid = sdk.threads.create()["thread_id"]
    sdk.runs.wait(tid, assistant["assistant_id"], input={"n": 0, "sleep": 0.4})
    assert sdk.runs.list(tid)[0]["status"] == "timeout"

    other = sdk.threads.create()["thread_id"]
    done = sdk.runs.wait(
        other, assistant["assistant_id"], input={"n": 0, "sleep": 0.4}, config=limit(60)
    )
    assert done["steps"] == ["a", "b", "c"]
    assert sdk.runs.list(other)[0]["status"] == "success"


@pytest.mark.parametrize("value", [0, -5, "soon"])
def test_a_bad_limit_is_a_422_naming_the_field(sdk: Any, olga: Any, value: Any) -> None:
    tid = sdk.threads.create()["thread_id"]
    with pytest.raises(httpx.HTTPStatusError) as bad:
        sdk.runs.create(tid, "steps", input={"n": 0}, config=limit(value))
    assert bad.value.response.status_code == 422
    assert "config.configurable.run_timeout_seconds" in bad.value.response.text

    with pytest.raises(httpx.HTTPStatusError) as bad:
        olga.assistants.create("steps", config=limit(value))
    assert bad.value.response.status_code == 422
    assert "config.configurable.run_timeout_seconds" in bad.value.response.text


def test_a_stream_of_a_run_that_timed_out_ends_with_an_error_event(sdk: Any) -> None:
    tid = sdk.threads.create()["thread_id"]
    parts = list(sdk.runs.stream(tid, "steps", input={"n": 0, "sleep": 0.6}, config=limit(0.3)))
    values = [p.data for p in parts if p.event == "values"]
    assert values[-1] == {"n": 2, "sleep": 0.6, "steps": ["a", "b"]}
    (error,) = [p.data for p in parts if p.event == "error"]
    assert error["error"] == "TimeoutError"
    assert "time limit of 0.3 seconds" in error["message"]
