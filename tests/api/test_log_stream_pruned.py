"""A resumable stream's reader whose log the retention sweep prunes under it
(``api.runs.log_stream``), with the prune forced at the two moments it can land: before
the reader's first read (the events are rebuilt from the checkpoints) and after the
reader sent some (it ends at its next heartbeat instead of waiting for ever)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from api import runs as api_runs
from criogen.services import streams
from criogen.services.runs import create_run, wait_run
from criogen.storage.models import StreamEvent

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("inprocess_runner")]

MODES = ["values"]


def _ended_run_with_a_log(thread_id: str, *, ended: bool) -> str:
    """A finished run of the ``steps`` graph and its log: every event when ``ended``,
    else the first two only (as a log whose writer stopped writing)."""
    run = create_run(
        thread_id=thread_id, assistant_id="steps", input={"n": 0}, if_not_exists="create"
    )
    assert wait_run(run=run, timeout=10).status == "success"
    run_id = str(run.run_id)
    api_runs.open_log(run_id, thread_id)
    if ended:
        api_runs.advance_log(run_id, thread_id, MODES, {})
    else:
        streams.append_stream_events(
            run_id=run_id, thread_id=thread_id, after=1, events=[(1, "values", "values", "{}")]
        )
    return run_id


def _prune_at_read(monkeypatch: pytest.MonkeyPatch, run_id: str, *, reads_before: int) -> None:
    """Make the log's reads answer as usual ``reads_before`` times, then delete the log
    (as the sweep does) just before the next read."""
    read = streams.stream_events_after
    calls = {"n": 0}

    def pruning(**kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] > reads_before:
            StreamEvent.objects.filter(run_id=run_id).delete()
        return read(**kwargs)

    monkeypatch.setattr(streams, "stream_events_after", pruning)


async def _body(run_id: str, thread_id: str) -> list[bytes]:
    chunks = api_runs.log_stream(
        run_id=run_id, thread_id=thread_id, after=0, modes=None, run_modes=MODES
    )

    async def drain() -> list[bytes]:
        return [chunk async for chunk in chunks]

    return await asyncio.wait_for(drain(), timeout=20)


def _events(body: list[bytes]) -> list[str]:
    return [
        line.removeprefix("event: ")
        for chunk in body
        for line in chunk.decode().splitlines()
        if line.startswith("event: ")
    ]


async def test_a_log_pruned_before_the_first_read_is_rebuilt_from_the_checkpoints(
    thread_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id = await asyncio.to_thread(_ended_run_with_a_log, thread_id, ended=True)
    logged = _events(await _body(run_id, thread_id))
    assert logged[0] == "metadata" and logged[-1] == "end" and "values" in logged
    _prune_at_read(monkeypatch, run_id, reads_before=0)
    body = await _body(run_id, thread_id)
    # The events the log had, now made from the checkpoints (no ids: there is no log).
    assert _events(body) == logged
    assert not any(chunk.startswith(b"id: ") for chunk in body)


async def test_a_log_pruned_after_some_events_were_sent_ends_at_the_next_heartbeat(
    thread_id: str, monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    settings.CRIOGEN_STREAM_HEARTBEAT_SECONDS = 0.2
    run_id = await asyncio.to_thread(_ended_run_with_a_log, thread_id, ended=False)
    _prune_at_read(monkeypatch, run_id, reads_before=1)
    body = await _body(run_id, thread_id)
    assert _events(body) == ["metadata", "values"]
    assert body[-1] == b": heartbeat\n\n"
