"""The effect ledger: intent before a side-effecting tool runs, outcome after, and what a
retry does at each crash point (in-process crashes on every storage, and a real
process death on SQLite and PostgreSQL)."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest

from criogen import Agent, Storage, tool
from criogen.engine.tools import ToolContext, build_idempotency_key
from criogen.llms import ScriptedModel

CHARGES: list[str] = []
CRASH_IN: set[str] = set()


class Crash(BaseException):
    """Stands in for the process dying (not caught by the engine's error handling)."""


@tool
def charge(amount: float, ctx: ToolContext) -> str:
    """Charge the customer (a side effect, not idempotent)."""
    CHARGES.append(ctx.idempotency_key)
    if "charge" in CRASH_IN:
        CRASH_IN.discard("charge")
        raise Crash
    return f"charged {amount}"


@tool(idempotent=True)
def sync_crm(ctx: ToolContext) -> str:
    """Push the customer to the CRM (idempotent: the key dedupes it)."""
    CHARGES.append(ctx.idempotency_key)
    if "sync_crm" in CRASH_IN:
        CRASH_IN.discard("sync_crm")
        raise Crash
    return "synced"


@pytest.fixture(autouse=True)
def _clear() -> None:
    CHARGES.clear()
    CRASH_IN.clear()


def quote(messages: list[dict[str, Any]]) -> str:
    tool_msg = messages[-1]
    return f"{tool_msg['status']}:{tool_msg['content']}"


def make(storage: Storage, name: str, *, approve: bool = False, **options: Any) -> Agent:
    script = [
        {
            "tool_calls": [
                {"name": name, "args": {"amount": 5.0} if name == "charge" else {}, "id": "c1"}
            ]
        }
    ]
    return Agent(
        ScriptedModel([*script, quote, quote]),
        tools=[charge, sync_crm],
        approve=[name] if approve else [],
        storage=storage,
        durability="sync",
        **options,
    )


def test_a_side_effecting_call_commits_an_intent_then_its_outcome(
    storage: Storage, thread_id: str
) -> None:
    t = make(storage, "charge").thread(thread_id)
    reply = t.send("charge me")
    assert reply.text == "success:charged 5.0"
    (effect,) = t.effects()
    step = [c for c in t.history() if c.next == ("tools",) and c.source == "step"][0]
    assert effect.key == build_idempotency_key(
        thread_id=thread_id, checkpoint_id=step.id, call_id="c1"
    )
    assert [effect.key] == CHARGES  # the tool got the same key in its context
    assert (effect.status, effect.result, effect.attempts) == ("success", "charged 5.0", 1)
    assert effect.args == {"amount": 5.0} and effect.tool == "charge"


def test_an_idempotent_ungated_call_is_not_in_the_ledger(storage: Storage, thread_id: str) -> None:
    t = make(storage, "sync_crm").thread(thread_id)
    assert t.send("sync").text == "success:synced"
    assert t.effects() == []


def test_crash_during_a_non_idempotent_tool_suspends_with_outcome_unknown(
    storage: Storage, thread_id: str
) -> None:
    t = make(storage, "charge").thread(thread_id)
    CRASH_IN.add("charge")
    with pytest.raises(Crash):
        t.send("charge me")
    (effect,) = t.effects()
    assert effect.status == "intent"  # committed before the tool ran; no outcome
    reply = t.retry()
    assert reply.status == "suspended" and reply.reason == "outcome_unknown"
    assert [c["id"] for c in reply.pending] == ["c1"]
    assert len(CHARGES) == 1  # not silently re-run
    # The operator checked the payment provider: it did go through.
    done = t.respond("charged 5.0 (confirmed by phone)", by="ops")
    assert done.text == "success:charged 5.0 (confirmed by phone)"
    assert len(CHARGES) == 1


def test_approving_an_outcome_unknown_call_reruns_it_with_the_same_key(
    storage: Storage, thread_id: str
) -> None:
    t = make(storage, "charge", approve=True).thread(thread_id)
    t.send("charge me")
    CRASH_IN.add("charge")
    with pytest.raises(Crash):
        t.approve(by="alice")
    unknown = t.retry()
    assert unknown.reason == "outcome_unknown"
    reply = t.approve(by="alice")
    assert reply.text == "success:charged 5.0"
    assert len(CHARGES) == 2 and CHARGES[0] == CHARGES[1]  # same idempotency key
    (effect,) = t.effects()
    assert (effect.status, effect.attempts) == ("success", 2)


def test_crash_during_an_idempotent_gated_tool_reruns_it_with_the_same_key(
    storage: Storage, thread_id: str
) -> None:
    t = make(storage, "sync_crm", approve=True).thread(thread_id)
    t.send("sync")
    CRASH_IN.add("sync_crm")
    with pytest.raises(Crash):
        t.approve()
    reply = t.retry()
    assert reply.text == "success:synced"
    assert len(CHARGES) == 2 and CHARGES[0] == CHARGES[1]


def test_crash_after_the_outcome_reuses_it_without_running_again(
    storage: Storage, thread_id: str
) -> None:
    def crash_after(state: dict[str, Any], call: dict[str, Any], result: dict[str, Any]) -> None:
        if "after" in CRASH_IN:
            CRASH_IN.discard("after")
            raise Crash

    t = make(storage, "charge", after_tool=crash_after).thread(thread_id)
    CRASH_IN.add("after")
    with pytest.raises(Crash):
        t.send("charge me")
    assert t.effects()[0].status == "success"
    reply = t.retry()
    assert reply.text == "success:charged 5.0"
    assert len(CHARGES) == 1


def test_crash_before_the_intent_runs_the_tool_once_on_retry(
    storage: Storage, thread_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    t = make(storage, "charge").thread(thread_id)
    real = storage.begin_effect

    def die_once(effect: Any) -> Any:
        monkeypatch.setattr(storage, "begin_effect", real)
        raise Crash

    monkeypatch.setattr(storage, "begin_effect", die_once)
    with pytest.raises(Crash):
        t.send("charge me")
    assert t.effects() == [] and CHARGES == []
    assert t.retry().text == "success:charged 5.0"
    assert len(CHARGES) == 1


DYING = """
import os, sys
from criogen import Agent, Storage, tool
from criogen.engine.tools import ToolContext
from criogen.llms import ScriptedModel

@tool
def charge(amount: float, ctx: ToolContext) -> str:
    '''Charge the customer.'''
    os._exit(3)  # the process dies mid-call

url, thread_id = sys.argv[1:3]
script = [{"tool_calls": [{"name": "charge", "args": {"amount": 5.0}, "id": "c1"}]}]
agent = Agent(ScriptedModel(script), tools=[charge], storage=Storage(url), lease_seconds=1)
agent.thread(thread_id).send("charge me")
"""


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_a_process_that_dies_mid_call_leaves_an_intent_that_suspends_on_retry(
    backend: str, request: pytest.FixtureRequest, thread_id: str, django_db_blocker: Any
) -> None:
    url = str(request.getfixturevalue(f"{backend}_url"))
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    proc = subprocess.run(
        [sys.executable, "-c", DYING, url, thread_id],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 3, proc.stderr
    with django_db_blocker.unblock():
        # This process's model only has the final reply: the dead one made the call.
        agent = Agent(ScriptedModel([quote]), tools=[charge], storage=Storage(url))
        t = agent.thread(thread_id)
        assert t.head is not None and t.head.status == "in_progress"
        assert [e.status for e in t.effects()] == ["intent"]
        reply = t.retry()  # waits for the dead run's 1 s lease to expire
        assert reply.reason == "outcome_unknown"
        assert CHARGES == []
        done = t.reject("the provider shows no charge", by="ops")
    assert done.text.startswith("error:Rejected by a person: the provider shows no charge")
