"""A LangChain agent (``create_agent``, a fake chat model, two tools,
``HumanInTheLoopMiddleware`` on one) served by Criogen: its HITL interrupt is a tool
approval bound to the call and its arguments' digest; ``langgraph_sdk`` approves,
edits and rejects through ``Command(resume=...)`` as against LangGraph's server; the
gated tool runs once per approval and never after a reject; a decision the tool does
not allow is a 422 naming it; and LangGraph run in-process (``InMemorySaver``) ends in
the same state. On SQLite and PostgreSQL."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import httpx
import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from criogen import Storage
from criogen.engine.agents import args_digest
from criogen.engine.errors import InvalidArgument, RunFailed, StaleDecision
from criogen.langgraph import CriogenSaver
from criogen.langgraph.bridge import jsonable
from criogen.langgraph.graphs import LangGraphGraph, load_langgraph
from criogen.langgraph.hitl import check_response, is_hitl_request
from tests.api.conftest import Server
from tests.langgraph.agents import support
from tests.langgraph.conftest import langgraph_server

ASK = "refund order 42 by 10"


def _ask(text: str = ASK, mid: str = "h1") -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text, "id": mid}]}


def _ledger(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def _refunds(path: Path) -> list[dict[str, Any]]:
    return [e for e in _ledger(path) if e["tool"] == "issue_refund"]


def _comparable(values: dict[str, Any]) -> dict[str, Any]:
    """The state with the ids LangGraph draws at random (a tool message's) left out."""
    out = dict(values)
    out["messages"] = [
        {k: v for k, v in m.items() if not (k == "id" and m.get("type") == "tool")}
        for m in values.get("messages", [])
    ]
    return out


# -- the bridge, from Python ----------------------------------------------------------------


@pytest.fixture(params=["sqlite", "postgres"])
def storage(request: pytest.FixtureRequest, django_db_blocker: object) -> Iterator[Storage]:
    url = str(request.getfixturevalue(f"{request.param}_url"))
    with django_db_blocker.unblock():  # type: ignore[attr-defined]
        yield Storage(url, encryption_key=False, audit=True)


@pytest.fixture
def ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "ledger.jsonl"
    monkeypatch.setenv("SUPPORT_LEDGER", str(path))
    return path


def _bridged(graph: Any, storage: Storage) -> LangGraphGraph:
    return load_langgraph("support", "tests", graph, CriogenSaver(storage)).bind(storage)


def test_a_hitl_interrupt_is_a_tool_approval_bound_to_the_call(
    storage: Storage, ledger: Path
) -> None:
    bridged = _bridged(support.graph, storage)
    thread = bridged.thread(f"h-{uuid.uuid4()}")

    waiting = thread.run(_ask())

    assert waiting.status == "suspended"
    [interrupt] = waiting.interrupts
    assert interrupt["reason"] == "approval"
    assert interrupt["langgraph_node"] == "HumanInTheLoopMiddleware.after_model"
    args = {"order_id": 42, "amount": 10}
    assert interrupt["calls"] == [
        {"id": "call-1-refund", "name": "issue_refund", "args": args, "digest": args_digest(args)}
    ]
    [request] = interrupt["payload"]["action_requests"]
    assert (request["name"], request["args"]) == ("issue_refund", args)
    assert interrupt["payload"]["review_configs"] == [
        {"action_name": "issue_refund", "allowed_decisions": ["approve", "edit", "reject"]}
    ]
    lg_id = bridged.compiled.get_state({"configurable": {"thread_id": thread.id}}).interrupts[0].id
    assert interrupt["interrupt_id"] == lg_id
    assert [e["tool"] for e in _ledger(ledger)] == ["lookup_order"]

    # Checked before anything runs: the shape, the count, the type, the digest.
    with pytest.raises(InvalidArgument, match="'respond', which 'issue_refund' does not allow"):
        thread.check_answer({"decisions": [{"type": "respond", "message": "done"}]})
    with pytest.raises(InvalidArgument, match="1 action"):
        thread.check_answer({"decisions": []})
    with pytest.raises(InvalidArgument, match="renames the tool"):
        thread.check_answer(
            {"decisions": [{"type": "edit", "edited_action": {"name": "x", "args": {}}}]}
        )
    with pytest.raises(StaleDecision, match="digest mismatch"):
        thread.check_answer({"decisions": [{"type": "approve", "digest": args_digest({})}]})
    thread.check_answer({"decisions": [{"type": "approve", "digest": args_digest(args)}]})

    done = thread.resume(
        {"decisions": [{"type": "approve", "digest": args_digest(args)}]}, by="alice"
    )

    assert done.status == "completed"
    assert done.state["messages"][-1]["content"] == "done: refunded 10 EUR on order 42"
    assert _refunds(ledger) == [{"tool": "issue_refund", "order_id": 42, "amount": 10}]
    # The decision is audited once, with who made it.
    [audited] = [a for a in thread.audit() if a.action == "resume"]
    assert audited.actor == "alice"
    assert audited.details["value"]["decisions"][0]["type"] == "approve"


class FailsAfterTheRefund(support.SupportModel):
    """The support model, failing once when it is asked to reply after the refund (a
    crash after the approved tool ran and its step was checkpointed)."""

    failures: ClassVar[list[str]] = []

    def _generate(self, messages: list[Any], *args: Any, **kwargs: Any) -> Any:
        if getattr(messages[-1], "name", None) == "issue_refund" and not self.failures:
            self.failures.append("the model timed out")
            raise RuntimeError("the model timed out")
        return super()._generate(messages, *args, **kwargs)


def test_a_resume_that_fails_after_the_tool_goes_on_without_running_it_again(
    storage: Storage, ledger: Path
) -> None:
    FailsAfterTheRefund.failures.clear()
    graph = support.build(["approve", "edit", "reject"], FailsAfterTheRefund())
    thread = _bridged(graph, storage).thread(f"h-{uuid.uuid4()}")
    thread.run(_ask())

    with pytest.raises(RunFailed, match="the model timed out"):
        thread.resume({"decisions": [{"type": "approve"}]})
    done = thread.retry()

    assert done.status == "completed"
    assert done.state["messages"][-1]["content"] == "done: refunded 10 EUR on order 42"
    # The approved refund ran once: the retry went on from LangGraph's checkpoint
    # after the tools step, without asking again or running the tool twice.
    assert _refunds(ledger) == [{"tool": "issue_refund", "order_id": 42, "amount": 10}]
    assert [m["type"] for m in done.state["messages"]].count("tool") == 2


def test_a_strict_tool_refuses_an_edit_by_name(storage: Storage, ledger: Path) -> None:
    thread = _bridged(support.strict_graph, storage).thread(f"h-{uuid.uuid4()}")
    thread.run(_ask())

    with pytest.raises(InvalidArgument, match="'edit', which 'issue_refund' does not allow") as e:
        thread.check_answer(
            {
                "decisions": [
                    {
                        "type": "edit",
                        "edited_action": {"name": "issue_refund", "args": {"order_id": 1}},
                    }
                ]
            }
        )
    assert e.value.details["field"] == "command.resume.decisions[0].type"
    assert _refunds(ledger) == []


# -- served by Criogen, driven by langgraph_sdk --------------------------------------------


@pytest.fixture(params=["sqlite", "postgres"])
def served(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Server, Path]]:
    """A server whose langgraph.json registers the agent as ``refunds`` and
    ``refunds_strict`` (``support`` is a Criogen agent of the settings); the tools write to the returned ledger."""
    ledger = tmp_path / "ledger.jsonl"
    graphs = {"refunds": "support.py:graph", "refunds_strict": "support.py:strict_graph"}
    with langgraph_server(request, tmp_path, graphs, SUPPORT_LEDGER=str(ledger)) as srv:
        yield srv, ledger


def _in_process(ask: dict[str, Any], resume: dict[str, Any]) -> dict[str, Any]:
    """The same agent run by LangGraph itself, with its in-memory checkpointer."""
    graph = support.build(["approve", "edit", "reject"]).copy(
        update={"checkpointer": InMemorySaver()}
    )
    config = {"configurable": {"thread_id": "in-process"}}
    graph.invoke(ask, config)
    graph.invoke(Command(resume=resume), config)
    return jsonable(dict(graph.get_state(config).values))


@pytest.mark.slow
async def test_the_sdk_approves_edits_and_rejects_a_tool_call(
    served: tuple[Server, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server, ledger = served
    client = server.client("alice")
    try:
        # Approve, bound to the arguments' digest.
        tid = (await client.threads.create())["thread_id"]
        await client.runs.wait(tid, "refunds", input=_ask())
        waiting = await client.threads.get(tid)
        state = await client.threads.get_state(tid)
        [interrupt] = state["interrupts"]
        # The digest of the arguments the person saw (the dashboard sends it too).
        digest = args_digest(interrupt["value"]["action_requests"][0]["args"])
        approved = await client.runs.wait(
            tid,
            "refunds",
            command={"resume": {"decisions": [{"type": "approve", "digest": digest}]}},
        )
        # A second answer to the same approval is refused: the tool ran once.
        with pytest.raises(httpx.HTTPStatusError) as twice:
            await client.runs.wait(
                tid, "refunds", command={"resume": {"decisions": [{"type": "approve"}]}}
            )
        after_approve = list(_refunds(ledger))

        # Edit: the tool runs once, with the person's arguments.
        edited_tid = (await client.threads.create())["thread_id"]
        await client.runs.wait(edited_tid, "refunds", input=_ask("refund order 7 by 30"))
        edit = {"name": "issue_refund", "args": {"order_id": 7, "amount": 5}}
        edited = await client.runs.wait(
            edited_tid,
            "refunds",
            command={"resume": {"decisions": [{"type": "edit", "edited_action": edit}]}},
        )
        after_edit = list(_refunds(ledger))

        # Reject: the tool never runs; the model is told why.
        rejected_tid = (await client.threads.create())["thread_id"]
        await client.runs.wait(rejected_tid, "refunds", input=_ask("refund order 9 by 99"))
        rejected = await client.runs.wait(
            rejected_tid,
            "refunds",
            command={"resume": {"decisions": [{"type": "reject", "message": "too much"}]}},
        )
        rejected_thread = await client.threads.get(rejected_tid)

        # A decision the tool does not allow: 422 naming it, nothing runs, still waiting.
        strict_tid = (await client.threads.create())["thread_id"]
        await client.runs.wait(strict_tid, "refunds_strict", input=_ask("refund order 5 by 1"))
        with pytest.raises(httpx.HTTPStatusError) as refused:
            await client.runs.wait(
                strict_tid,
                "refunds_strict",
                command={"resume": {"decisions": [{"type": "edit", "edited_action": edit}]}},
            )
        strict_thread = await client.threads.get(strict_tid)
    finally:
        await client.aclose()

    assert waiting["status"] == "interrupted"
    assert interrupt["value"]["review_configs"][0]["allowed_decisions"] == [
        "approve",
        "edit",
        "reject",
    ]
    assert interrupt["value"]["action_requests"][0]["args"] == {"order_id": 42, "amount": 10}
    assert approved["messages"][-1]["content"] == "done: refunded 10 EUR on order 42"
    assert after_approve == [{"tool": "issue_refund", "order_id": 42, "amount": 10}]

    assert edited["messages"][-1]["content"].endswith("refunded 5 EUR on order 7")
    assert after_edit[1:] == [{"tool": "issue_refund", "order_id": 7, "amount": 5}]

    assert "too much" in rejected["messages"][-2]["content"]
    assert rejected["messages"][-2]["status"] == "error"
    assert rejected_thread["status"] == "idle"

    assert twice.value.response.status_code == 409
    assert twice.value.response.json()["code"] == "already_decided"
    assert refused.value.response.status_code == 422
    body = refused.value.response.json()
    assert "'edit'" in str(body) and "decisions[0].type" in str(body)
    assert strict_thread["status"] == "interrupted"
    # Only the approved and the edited call ran, once each.
    assert _refunds(ledger) == after_edit
    assert len(after_edit) == 2

    # LangGraph itself, in-process, ends in the same state for the same inputs.
    monkeypatch.setenv("SUPPORT_LEDGER", str(tmp_path / "in-process.jsonl"))
    assert _comparable(approved) == _comparable(
        _in_process(_ask(), {"decisions": [{"type": "approve"}]})
    )
    assert _comparable(edited) == _comparable(
        _in_process(
            _ask("refund order 7 by 30"), {"decisions": [{"type": "edit", "edited_action": edit}]}
        )
    )
    assert _comparable(rejected) == _comparable(
        _in_process(
            _ask("refund order 9 by 99"),
            {"decisions": [{"type": "reject", "message": "too much"}]},
        )
    )


def test_a_per_call_interrupt_is_a_plain_suspension_answered_with_one_decision(
    storage: Storage, ledger: Path
) -> None:
    thread = _bridged(support.build_per_call(), storage).thread(f"h-{uuid.uuid4()}")

    waiting = thread.run(_ask())

    [interrupt] = waiting.interrupts
    assert interrupt["reason"] != "approval"
    assert interrupt["payload"]["type"] == "tool_approval"
    assert interrupt["payload"]["tool_call_id"] == "call-1-refund"
    done = thread.resume({"type": "approve"})
    assert done.status == "completed"
    assert _refunds(ledger) == [{"tool": "issue_refund", "order_id": 42, "amount": 10}]


REQUEST = {
    "action_requests": [
        {"name": "lookup_order", "args": {"order_id": 1}},
        {"name": "issue_refund", "args": {"order_id": 1, "amount": 2}},
    ],
    "review_configs": [
        {"action_name": "lookup_order", "allowed_decisions": ["approve", "respond"]},
        {"action_name": "issue_refund", "allowed_decisions": ["edit", "reject"]},
    ],
}
CALLS = [
    {"id": "a", "name": a["name"], "args": a["args"], "digest": args_digest(a["args"])}
    for a in REQUEST["action_requests"]
]


def test_each_call_of_a_request_is_decided_as_its_config_allows() -> None:
    pending = {"payload": REQUEST, "calls": CALLS}

    decided = check_response(
        {
            "decisions": [
                {"type": "respond", "message": "order 1 is lost", "digest": CALLS[0]["digest"]},
                {"type": "edit", "args": {"order_id": 1, "amount": 1}},
            ]
        },
        pending,
        "t",
    )

    # Criogen's digest is left out; its edit shorthand becomes LangChain's shape.
    assert decided == [
        {"type": "respond", "message": "order 1 is lost"},
        {
            "type": "edit",
            "edited_action": {"name": "issue_refund", "args": {"order_id": 1, "amount": 1}},
        },
    ]
    with pytest.raises(InvalidArgument, match=r"decisions\[1\]\.type is 'approve'") as e:
        check_response({"decisions": [{"type": "approve"}, "approve"]}, pending, "t")
    assert e.value.details["field"] == "command.resume.decisions[1].type"
    with pytest.raises(InvalidArgument, match="gives no 'message'"):
        check_response({"decisions": [{"type": "respond"}, "reject"]}, pending, "t")
    with pytest.raises(InvalidArgument, match=r"\{\"decisions\": \[\.\.\.\]\}"):
        check_response("approve", pending, "t")
    assert is_hitl_request(REQUEST)
    assert not is_hitl_request({"action_requests": [], "review_configs": []})
    assert not is_hitl_request({"question": "ok?"})
