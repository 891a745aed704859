"""api.aio.wait_for_run: it returns once the run has ended, re-reading every field of
the run, or only the fields it is asked for (runs.wait and join need the status and
the error, not the input decoded again on every wake-up)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from asgiref.sync import sync_to_async

from api.aio import wait_for_run
from api.runs import RESULT_FIELDS
from criogen.services.assistants import resolve_assistant
from criogen.storage.models import Run, Thread

pytestmark = pytest.mark.django_db(transaction=True)


def _pending_run() -> Run:
    thread = Thread.objects.create(id=f"t-{uuid.uuid4()}")
    return Run.objects.create(
        thread=thread,
        assistant=resolve_assistant(assistant_id="steps"),
        graph_id="steps",
        status="running",
        input={"payload": "as created"},
    )


def _end(run_id: Any) -> None:
    Run.objects.filter(pk=run_id).update(
        status="error", error={"message": "boom"}, input={"payload": "changed since"}
    )


@pytest.mark.parametrize(
    ("fields", "input_seen"),
    [(None, "changed since"), (RESULT_FIELDS, "as created")],
)
async def test_it_returns_the_ended_run_with_the_fields_asked_for(
    fields: tuple[str, ...] | None, input_seen: str
) -> None:
    run = await sync_to_async(_pending_run)()
    waiting = asyncio.create_task(wait_for_run(run, 10.0, fields=fields))
    await asyncio.sleep(0.1)
    assert not waiting.done()
    await sync_to_async(_end)(run.pk)
    ended = await asyncio.wait_for(waiting, 10.0)
    assert (ended.status, ended.error) == ("error", {"message": "boom"})
    assert ended.input == {"payload": input_seen}


async def test_it_gives_up_after_the_timeout_with_the_run_as_it_is() -> None:
    run = await sync_to_async(_pending_run)()
    ended = await wait_for_run(run, 0.2, fields=RESULT_FIELDS)
    assert ended.status == "running"
