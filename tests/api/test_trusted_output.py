"""The hot reads answer without ninja validating their output (api.render): what they
send must be exactly what validating it with the endpoint's response schema and
dumping it would give, field order and defaults included, for every shape a
checkpoint or a thread can take. And the orjson renderer writes the JSON that
django-ninja's encoder wrote, compact."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from ninja.responses import NinjaJSONEncoder

from api.render import FastJsonRenderer, dumps
from api.routers.threads import _only
from api.schemas import ThreadOut, ThreadStateOut
from api.threads.shapes import state_dump, state_out, thread_dump, thread_out
from criogen.engine.checkpoints import Checkpoint
from criogen.storage.models import Thread

WHEN = datetime(2026, 12, 1, 17, 30, 5, 123456, tzinfo=UTC)


def _cp(**fields: Any) -> Checkpoint:
    base: dict[str, Any] = {
        "id": str(uuid.uuid4()),
        "thread_id": "t-1",
        "run_id": str(uuid.uuid4()),
        "version": 3,
        "source": "loop",
        "status": "completed",
        "state": {"n": 1, "steps": ["a", "b"], "nested": {"z": 1, "a": [1, 2.5, None]}},
        "created_at": WHEN,
    }
    return Checkpoint(**{**base, **fields})


INTERRUPTS = (
    # the engine's fields in its own order, one without node, one without reason, extras
    {"reason": "approval", "node": "b", "id": "i-1", "payload": {"q": "ok?"}, "calls": [1]},
    {"id": "i-2", "payload": "plain", "reason": "ask"},
    {"node": "c", "id": "i-3", "payload": None, "zeta": 1, "alpha": 2},
)

CHECKPOINTS = {
    "completed": _cp(),
    "in progress": _cp(status="running", next=("b", "c"), tasks={"done": {"b": {"x": 1}}}),
    "suspended": _cp(status="suspended", next=("b", "c"), interrupts=INTERRUPTS),
    "failed": _cp(
        status="failed",
        next=("b",),
        error={"node": "b", "message": "boom", "type": "ValueError"},
        parent_id=str(uuid.uuid4()),
        metadata={"step": 7, "writes": {"a": 1}, "source": "overridden"},
    ),
    "input": _cp(source="input", version=1, state={}, run_id=None),
}


def _as_ninja(schema: type, data: Any, *, exclude_unset: bool) -> str:
    """What ninja answered before: the data validated, dumped and encoded."""
    dumped = schema.model_validate(data).model_dump(exclude_unset=exclude_unset)
    return json.dumps(dumped, cls=NinjaJSONEncoder)


def _as_trusted(data: Any) -> str:
    return json.dumps(data, cls=NinjaJSONEncoder)


@pytest.mark.parametrize("name", [*CHECKPOINTS, "none"])
@pytest.mark.parametrize(
    "select", [None, ["values"], ["metadata", "values.n", "tasks"], ["interrupts", "next"]]
)
def test_a_state_is_what_the_schema_dumps(name: str, select: list[str] | None) -> None:
    state = state_out("t-1", CHECKPOINTS.get(name), select=select)
    expected = _as_ninja(ThreadStateOut, state, exclude_unset=True)
    assert _as_trusted(state_dump(state)) == expected


def _thread(*, ttl: bool, status: str) -> Thread:
    row = Thread(
        id="t-1",
        created_at=WHEN,
        updated_at=WHEN + timedelta(seconds=1),
        metadata={"owner": "alice", "k": [1, {"b": 2, "a": 1}]},
        head_version=3,
    )
    if ttl:
        row.ttl_minutes = 90
        row.ttl_strategy = "keep_latest"
        row.expires_at = WHEN + timedelta(minutes=90)
    row.rest_status = status  # type: ignore[attr-defined]
    return row


@pytest.mark.parametrize("name", [*CHECKPOINTS, "none"])
@pytest.mark.parametrize("ttl", [False, True])
def test_a_thread_is_what_the_schema_dumps(name: str, ttl: bool) -> None:
    row = _thread(ttl=ttl, status="interrupted" if name == "suspended" else "idle")
    item = thread_out(row, head=CHECKPOINTS.get(name), load_head=False)
    # get_thread: every field, with its default
    assert _as_trusted(thread_dump(item, unset=False)) == _as_ninja(
        ThreadOut, item, exclude_unset=False
    )
    # search: the fields it has (select, extract)
    for select in (None, ["values"], ["ttl", "status", "interrupts"]):
        chosen = _only({**item, "extracted": {"n": 1}}, select)
        assert _as_trusted(thread_dump(chosen, unset=True)) == _as_ninja(
            ThreadOut, chosen, exclude_unset=True
        )


@pytest.mark.parametrize(
    "data",
    [
        {"ok": True},
        [{"when": WHEN, "id": uuid.UUID(int=7), "text": "héllo ✓", "n": 1.5, "m": None}],
        {"big": 2**70, "small": -(2**63)},  # past orjson's 64 bits: Python's encoder
        {"at": WHEN.replace(microsecond=0), "naive": datetime(2026, 1, 2, 3, 4, 5)},
    ],
)
def test_the_renderer_writes_ninjas_json_compact(data: Any) -> None:
    before = json.dumps(data, cls=NinjaJSONEncoder)
    after = FastJsonRenderer().render(None, data, response_status=200)  # type: ignore[arg-type]
    assert after == dumps(data)
    assert json.loads(after) == json.loads(before)
    assert (
        after == json.dumps(json.loads(before), separators=(",", ":"), ensure_ascii=False).encode()
    )


def test_the_dump_orders_follow_the_response_schemas() -> None:
    """A field added to a response schema must be added to its trusted dump too (a
    LangGraph thread's state carries ``checkpoint_id``, which only this caught)."""
    from api.schemas import InterruptOut
    from api.threads.shapes import _INTERRUPT_ORDER, _THREAD_ORDER, STATE_FIELDS

    assert tuple(ThreadStateOut.model_fields) == STATE_FIELDS
    assert tuple(ThreadOut.model_fields) == _THREAD_ORDER
    assert tuple(InterruptOut.model_fields) == _INTERRUPT_ORDER
