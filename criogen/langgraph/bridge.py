"""Runs of a LangGraph graph on Criogen's runner: a one-node Criogen workflow around it.

The runner, the leases, the REST threads/state/history and the operator verbs all
speak Criogen's own workflows. A LangGraph graph joins them as a workflow of one node,
named after the graph, that drives the LangGraph graph on the same thread id:

- a new turn invokes the graph with the run's input (continuing where LangGraph's own
  checkpoints stand: a run that died mid-way goes on from its last checkpoint);
- a LangGraph ``interrupt(value)`` becomes a Criogen suspension (``suspend``) whose
  payload is the value, so the thread is *interrupted* over the REST API and waits in
  the inbox;
- resuming the thread (``Command(resume=...)``) runs the node again, which resumes
  the LangGraph graph with that value;
- an interrupt whose value is a LangChain HITL request (``HumanInTheLoopMiddleware``)
  is a tool approval (:mod:`criogen.langgraph.hitl`): the suspension lists the calls
  with their arguments' digests, and the answer reaches LangGraph as the
  ``{"decisions": [...]}`` response once checked;
- any other interrupt declaring a ``response_schema`` that Criogen can check is a
  typed suspension (``schema``): the dashboard shows a form, and an answer that does
  not fit is refused by name before a run is made.

The Criogen state of the thread is the LangGraph graph's values, as JSON (messages and
other objects as their JSON form). LangGraph's own checkpoints, with every step and
pending write, are in the ``criogen_lg_*`` tables through :class:`CriogenSaver`.
"""

from __future__ import annotations

import contextvars
import dataclasses
import json
from typing import Any

from criogen.engine.answers import check_declaration
from criogen.engine.errors import InvalidArgument
from criogen.engine.workflows import END, START, NodeContext, Workflow, WorkflowThread, suspend
from criogen.langgraph.hitl import (
    approval_calls,
    check_response,
    is_hitl_request,
    langgraph_response,
)

__all__ = ["INTERRUPT", "BridgeThread", "answer_schema", "bridge_workflow", "jsonable"]

_waiting: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "criogen_langgraph_waiting", default=False
)


def jsonable(value: Any) -> Any:
    """``value`` as JSON data: pydantic models (LangChain messages) by ``model_dump``,
    dataclasses by their fields, sets and tuples as lists, anything else by ``str``."""
    return json.loads(json.dumps(value, default=_default))


def _default(value: Any) -> Any:
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(mode="json")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    return str(value)


INTERRUPT = "__interrupt__"
"""The bridge's second node: it waits for the answer to a LangGraph interrupt."""


def bridge_workflow(graph_id: str, compiled: Any, alias: str | None = None) -> Workflow:
    """A Criogen workflow running the LangGraph graph ``compiled`` (already compiled
    with a :class:`CriogenSaver`): the node ``graph_id`` runs a turn, and the node
    ``__interrupt__`` suspends at each LangGraph interrupt and resumes the graph with
    the answer; each writes the LangGraph values as the thread's state. ``alias``: the
    database whose runs hold each turn's input (None: the state is the input)."""

    def run(state: dict[str, Any], ctx: NodeContext) -> dict[str, Any]:
        return _run_turn(compiled, state, ctx, alias)

    def answer(state: dict[str, Any], ctx: NodeContext) -> dict[str, Any]:
        return _answer(compiled, ctx, alias)

    def route(state: dict[str, Any]) -> str:
        # A route sees the state only: the node that just ran left whether LangGraph
        # waits for an answer in _waiting (the engine routes right after the node, in
        # its context).
        return INTERRUPT if _waiting.get() else END

    run.__name__ = graph_id
    answer.__name__ = "interrupt"
    workflow = Workflow(name=graph_id)
    workflow.add_node(graph_id, run)
    workflow.add_node(INTERRUPT, answer)
    workflow.add_edge(START, graph_id)
    workflow.add_conditional_edges(graph_id, route, {INTERRUPT: INTERRUPT, END: END})
    workflow.add_conditional_edges(INTERRUPT, route, {INTERRUPT: INTERRUPT, END: END})
    return workflow


def _config(ctx: NodeContext) -> dict[str, Any]:
    return {"configurable": {"thread_id": ctx.thread_id}}


def _run_turn(
    compiled: Any, state: dict[str, Any], ctx: NodeContext, alias: str | None
) -> dict[str, Any]:
    config = _config(ctx)
    snapshot = compiled.get_state(config)
    if ctx.step <= 1 and snapshot.created_at is not None:
        # The thread's first turn, yet LangGraph has checkpoints under its id: not this
        # thread's (deleting a thread takes its rows along, but a statement that
        # bypasses the ORM's cascade would leave them).
        compiled.checkpointer.delete_thread(ctx.thread_id)
        snapshot = compiled.get_state(config)
    if _interrupts(snapshot):
        # LangGraph waits already (the run stopped before the bridge suspended): the
        # next node asks for the answer.
        return _values(snapshot)
    # A run that stopped between two LangGraph steps (a crash, a hand-back) goes on
    # from LangGraph's last checkpoint; otherwise a new turn with the run's input.
    turn_input, durability = _run_row(state, ctx, alias)
    _drive(compiled, None if snapshot.next else turn_input, config, durability, ctx, alias)
    return _values(compiled.get_state(config))


def _answer(compiled: Any, ctx: NodeContext, alias: str | None) -> dict[str, Any]:
    from langgraph.types import Command

    config = _config(ctx)
    snapshot = compiled.get_state(config)
    waiting = _interrupts(snapshot)
    durability = _run_row({}, ctx, alias)[1]
    if not waiting:
        if snapshot.next:
            # The answer was given and LangGraph stopped before it finished (a crash
            # after the resume's first steps): it goes on from its last checkpoint.
            _drive(compiled, None, config, durability, ctx, alias)
        return _values(compiled.get_state(config))
    node, first = waiting[0]
    value = jsonable(first.value)
    if is_hitl_request(value):
        # LangChain's HumanInTheLoopMiddleware: a tool approval, shown and decided as
        # Criogen's own agents' (the calls bound to their arguments' digests).
        calls = approval_calls(value, snapshot.values, first.id)
        answer = suspend(
            "approval",
            value,
            calls=calls,
            interrupt_id=first.id,
            langgraph_node=node,
            pending=len(waiting),
        )
        resume: Any = langgraph_response(answer, {"payload": value, "calls": calls}, ctx.thread_id)
    else:
        resume = suspend(
            f"{node}: waiting for an answer",
            value,
            schema=answer_schema(first),
            interrupt_id=first.id,
            langgraph_node=node,
            pending=len(waiting),
        )
    _drive(compiled, Command(resume=resume), config, durability, ctx, alias)
    return _values(compiled.get_state(config))


def _drive(
    compiled: Any,
    turn_input: Any,
    config: dict[str, Any],
    durability: dict[str, Any],
    ctx: NodeContext,
    alias: str | None,
) -> None:
    """Run a turn of the LangGraph graph: streamed in the run's stream modes
    (:mod:`criogen.langgraph.streams`) when a run row has them, else invoked."""
    from criogen.langgraph.streams import run_options, stream_turn

    row = _run_kwargs(ctx, alias)
    if row is None:
        compiled.invoke(turn_input, config, **durability)
        return
    kwargs, metadata = row
    stream_turn(
        compiled,
        turn_input,
        {**config, "metadata": metadata},
        run_options(kwargs),
        run_id=str(ctx.run_id),
        thread_id=ctx.thread_id,
        durability=durability,
    )


def _run_kwargs(
    ctx: NodeContext, alias: str | None
) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The ``kwargs`` of the run executing (its stream options), and the metadata
    LangGraph's server gives a run's config (its graph, assistant and attempt: they
    reach the metadata of streamed messages and events); None without a run row (a
    thread run from Python, not by the runner)."""
    if alias is None:
        return None
    from criogen.storage.models import Run

    found = (
        Run.objects.using(alias)
        .filter(run_id=ctx.run_id)
        .values_list("kwargs", "graph_id", "assistant_id")
        .first()
    )
    if found is None:
        return None
    kwargs, graph_id, assistant_id = found
    metadata = {"graph_id": graph_id, "assistant_id": str(assistant_id), "run_attempt": 1}
    return dict(kwargs or {}), metadata


def answer_schema(interrupt: Any) -> dict[str, Any] | None:
    """The JSON Schema of the answer an ``interrupt(value, response_schema=...)``
    expects, when Criogen can check it and the dashboard render it as a form (see
    :mod:`criogen.engine.answers`); None otherwise (any JSON answer is taken, and
    LangGraph checks it against its own type when it resumes)."""
    schema = getattr(interrupt, "response_schema", None)
    if schema is None:
        return None
    if not isinstance(schema, dict):
        try:
            from pydantic import TypeAdapter

            schema = TypeAdapter(schema).json_schema()
        except Exception:  # noqa: BLE001 - a type pydantic cannot describe: untyped
            return None
    try:
        check_declaration(None, schema)
    except InvalidArgument:
        return None  # keywords Criogen does not check ($defs, anyOf…): untyped
    return jsonable(schema)


class BridgeThread(WorkflowThread):
    """A thread of a bridged graph: an answer to a tool approval is checked as
    LangChain's middleware will read it (one decision per action, an allowed type, the
    arguments' digest) before any run is made."""

    def check_breakpoints(self, nodes: Any, field: str) -> frozenset[str]:
        """A bridged graph's own nodes run inside one Criogen step: breakpoints are
        refused (compile the graph with LangGraph's ``interrupt_before`` instead)."""
        if nodes is None or nodes == []:
            return frozenset()
        raise InvalidArgument(
            f"{field} is not supported on a bridged LangGraph graph: compile it with "
            "LangGraph's interrupt_before / interrupt_after instead.",
            field=field,
        )

    def check_goto(self, node: Any) -> None:
        """A bridged graph's own nodes run inside one Criogen step: only ``"__end__"``
        (resolve the suspension) can be honoured."""
        if node != END:
            raise InvalidArgument(
                f"goto {node!r}: a bridged LangGraph graph can only go to '__end__' "
                "(resolve the suspension); answer it with command.resume instead.",
                field="goto",
            )

    def check_answer(self, value: Any) -> None:
        head = self.head
        if head is not None and head.status == "suspended" and head.interrupts:
            interrupt = head.interrupts[0]
            if interrupt.get("reason") == "approval" and is_hitl_request(interrupt.get("payload")):
                check_response(value, interrupt, self.id)
                return
        super().check_answer(value)


def _values(snapshot: Any) -> dict[str, Any]:
    """The LangGraph values as the Criogen state; whether LangGraph waits for an
    answer is left for the route that follows."""
    _waiting.set(bool(_interrupts(snapshot)))
    return jsonable(dict(snapshot.values))


def _interrupts(snapshot: Any) -> list[tuple[str, Any]]:
    """The pending interrupts of a LangGraph state: (node, interrupt)."""
    return [(task.name, i) for task in snapshot.tasks for i in task.interrupts]


def _run_row(
    state: dict[str, Any], ctx: NodeContext, alias: str | None
) -> tuple[Any, dict[str, Any]]:
    """The run's input as the client sent it (the Criogen state has it merged in, and
    LangGraph's reducers must see it once), and its durability as LangGraph's
    ``durability`` argument (``sync``, ``async`` and ``exit`` mean the same in both:
    when LangGraph's own checkpoints of the turn are written). Without a run row (a
    thread run from Python, not by the runner): the state, and LangGraph's default."""
    if alias is None:
        return state, {}
    from criogen.storage.models import Run

    row = (
        Run.objects.using(alias)
        .filter(run_id=ctx.run_id)
        .values_list("input", "durability")
        .first()
    )
    if row is None:
        return state, {}
    found, durability = row
    return (found if found is not None else state), (
        {"durability": durability} if durability in ("sync", "async", "exit") else {}
    )
