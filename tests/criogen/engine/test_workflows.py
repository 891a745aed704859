"""Workflows: building the graph, walking it step by step, merging state, failing cleanly."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from criogen import END, START, NodeContext, Storage, Workflow, suspend
from criogen.engine.errors import (
    CriogenError,
    InvalidArgument,
    InvalidGraph,
    InvalidState,
    MaxStepsExceeded,
    RunFailed,
)


def _appender(name: str) -> Any:
    def node(state: dict[str, Any]) -> dict[str, Any]:
        return {"steps": [name]}

    return node


def chain(*names: str, reducers: dict[str, Any] | None = None) -> Workflow:
    """START -> names[0] -> … -> END; each node appends its name to ``steps``."""
    wf = Workflow(reducers={"steps": "append", **(reducers or {})})
    for name in names:
        wf.add_node(name, _appender(name))
    wf.add_edge(START, names[0])
    for a, b in zip(names, names[1:], strict=False):
        wf.add_edge(a, b)
    wf.add_edge(names[-1], END)
    return wf


# -- building the graph ---------------------------------------------------------------


def test_it_refuses_a_workflow_without_nodes() -> None:
    with pytest.raises(InvalidGraph, match="no nodes") as exc:
        Workflow().compile()
    assert exc.value.code == "invalid_graph"


def test_it_refuses_a_workflow_nothing_starts() -> None:
    wf = Workflow()
    wf.add_node("a", lambda s: None)

    with pytest.raises(InvalidGraph, match="START"):
        wf.compile()


@pytest.mark.parametrize("name", ["", START, END, 3])
def test_it_refuses_a_reserved_or_empty_node_name(name: Any) -> None:
    with pytest.raises(InvalidGraph) as exc:
        Workflow().add_node(name, lambda s: None)
    assert exc.value.details["node"] == name


def test_it_refuses_a_node_added_twice_or_not_callable() -> None:
    wf = Workflow().add_node("a", lambda s: None)

    with pytest.raises(InvalidGraph, match="already"):
        wf.add_node("a", lambda s: None)
    with pytest.raises(InvalidGraph, match="function"):
        wf.add_node("b", "not a function")  # type: ignore[arg-type]
    with pytest.raises(InvalidGraph, match="function"):
        wf.add_conditional_edges("a", "nope")  # type: ignore[arg-type]


def test_it_refuses_edges_to_or_from_unknown_nodes() -> None:
    wf = Workflow().add_node("a", lambda s: None).add_edge(START, "a")
    wf.add_edge("a", "ghost")
    with pytest.raises(InvalidGraph, match="ghost"):
        wf.compile()

    wf = Workflow().add_node("a", lambda s: None).add_edge(START, "a")
    wf.add_edge("ghost", "a")
    with pytest.raises(InvalidGraph, match="ghost"):
        wf.compile()

    wf = Workflow().add_node("a", lambda s: None).add_edge(START, "a")
    wf.add_conditional_edges("ghost", lambda s: END)
    with pytest.raises(InvalidGraph, match="ghost"):
        wf.compile()


def test_it_refuses_a_bad_reducer() -> None:
    with pytest.raises(InvalidArgument) as exc:
        Workflow(reducers={"steps": "prepend"})  # type: ignore[dict-item]
    assert exc.value.details["field"] == "reducers"


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("durability", "never"),
        ("on_busy", "queue"),
        ("busy_timeout", -1),
        ("lease_seconds", 0),
        ("lease_seconds", "30"),
        ("max_steps", 0),
        ("max_steps", True),
    ],
)
def test_it_refuses_unknown_compile_options(option: str, value: str) -> None:
    with pytest.raises(InvalidArgument) as exc:
        chain("a").compile(**{option: value})
    assert exc.value.details["field"] == option


def test_it_refuses_a_blank_too_long_or_nul_thread_id() -> None:
    app = chain("a").compile()
    for bad in ("", "   ", "x" * 256, "a\x00b"):
        with pytest.raises(InvalidArgument) as exc:
            app.thread(bad)
        assert exc.value.details["field"] == "thread_id"
    assert app.thread("x" * 255).id == "x" * 255


# -- running --------------------------------------------------------------------------


def test_it_runs_a_linear_workflow_step_by_step(storage: Storage, thread_id: str) -> None:
    app = chain("a", "b", "c").compile(storage=storage, durability="sync")

    result = app.thread(thread_id).run({"order": 42})

    assert result.status == "completed"
    assert result.state == {"order": 42, "steps": ["a", "b", "c"]}
    assert result.thread_id == thread_id
    assert result.checkpoint.version == 4
    assert result.interrupts == []
    history = app.thread(thread_id).history()
    assert [(cp.source, cp.status, cp.next) for cp in reversed(history)] == [
        ("input", "in_progress", ("a",)),
        ("step", "in_progress", ("b",)),
        ("step", "in_progress", ("c",)),
        ("step", "completed", ()),
    ]
    assert {cp.run_id for cp in history} == {result.run_id}
    assert [cp.parent_id for cp in reversed(history)] == [
        None,
        *(cp.id for cp in reversed(history[1:])),
    ]


def test_a_one_off_run_gets_a_fresh_thread_every_time() -> None:
    app = chain("a").compile()

    first, second = app.run({"x": 1}), app.run({"x": 2})

    assert first.thread_id != second.thread_id
    assert first.state == {"x": 1, "steps": ["a"]}
    assert second.state == {"x": 2, "steps": ["a"]}


def test_a_node_may_return_none_and_take_the_run_context() -> None:
    seen: list[NodeContext] = []

    def look(state: dict[str, Any], ctx: NodeContext) -> None:
        seen.append(ctx)

    wf = Workflow().add_node("look", look).add_edge(START, "look")
    app = wf.compile()

    result = app.thread("ctx-thread").run({"a": 1}, run_id="run-7")

    assert result.state == {"a": 1}
    [ctx] = seen
    assert (ctx.thread_id, ctx.run_id, ctx.node, ctx.step) == ("ctx-thread", "run-7", "look", 1)


def test_a_node_gets_its_own_copy_of_the_state() -> None:
    def mutate(state: dict[str, Any]) -> dict[str, Any]:
        state["sneaky"] = True
        state["items"].append("x")
        return {"ok": True}

    app = Workflow().add_node("m", mutate).add_edge(START, "m").compile()

    result = app.run({"items": []})

    assert "sneaky" not in result.state
    assert result.state["ok"] is True


def test_conditional_edges_route_on_the_merged_state(storage: Storage, thread_id: str) -> None:
    wf = Workflow(reducers={"steps": "append"})
    wf.add_node("check", lambda s: {"steps": ["check"], "big": s["amount"] > 100})
    wf.add_node("approve", lambda s: {"steps": ["approve"]})
    wf.add_node("reject", lambda s: {"steps": ["reject"]})
    wf.add_edge(START, "check")
    wf.add_conditional_edges(
        "check", lambda s: "large" if s["big"] else "small", {"large": "reject", "small": "approve"}
    )
    wf.add_conditional_edges("approve", lambda s: END)
    app = wf.compile(storage=storage)

    small = app.thread(thread_id + "-s").run({"amount": 5})
    large = app.thread(thread_id + "-l").run({"amount": 500})

    assert small.state["steps"] == ["check", "approve"]
    assert large.state["steps"] == ["check", "reject"]


def test_a_route_that_names_no_node_fails_the_run() -> None:
    wf = Workflow().add_node("a", lambda s: {"x": 1}).add_edge(START, "a")
    wf.add_conditional_edges("a", lambda s: "nowhere")
    app = wf.compile()

    with pytest.raises(InvalidGraph, match="nowhere") as exc:
        app.thread("route").run()

    assert exc.value.checkpoint.source == "failure"
    assert exc.value.checkpoint.state == {}  # the step's update was not merged


def test_fan_out_runs_the_nodes_of_a_step_together_and_merges_in_order() -> None:
    wf = Workflow(reducers={"steps": "append"})
    wf.add_node("split", lambda s: {"steps": ["split"]})
    wf.add_node("left", lambda s: {"steps": ["left"], "side": "left"})
    wf.add_node("right", lambda s: {"steps": ["right"], "side": "right"})
    wf.add_node("join", lambda s: {"steps": ["join"], "seen": len(s["steps"])})
    wf.add_edge(START, "split")
    wf.add_conditional_edges("split", lambda s: ["left", "right"])
    wf.add_edge("left", "join")
    wf.add_edge("right", "join")  # join runs once, in the step after both
    app = wf.compile()

    result = app.thread("fan").run()

    assert result.state == {"steps": ["split", "left", "right", "join"], "side": "right", "seen": 3}
    steps = [cp.next for cp in reversed(app.thread("fan").history())]
    assert steps == [("split",), ("left", "right"), ("join",), ()]


async def test_async_nodes_of_one_step_run_concurrently() -> None:
    running: set[str] = set()

    async def meet(name: str) -> dict[str, Any]:
        # Each node waits until the other one is running too: run one after the
        # other, the first would give up.
        running.add(name)
        for _ in range(500):
            if running == {"one", "two"}:
                return {"steps": [name]}
            await asyncio.sleep(0.01)
        raise AssertionError(f"{name} ran alone")

    async def one(s: dict[str, Any]) -> dict[str, Any]:
        return await meet("one")

    async def two(s: dict[str, Any]) -> dict[str, Any]:
        return await meet("two")

    wf = Workflow(reducers={"steps": "append"})
    wf.add_node("fan", lambda s: None)
    wf.add_node("one", one)
    wf.add_node("two", two)
    wf.add_edge(START, "fan")
    wf.add_edge("fan", "one")
    wf.add_edge("fan", "two")
    app = wf.compile()

    result = await app.arun()  # from async code: the run goes on a worker thread

    assert result.state == {"steps": ["one", "two"]}


def test_reducers_overwrite_append_and_custom() -> None:
    wf = Workflow(reducers={"log": "append", "total": lambda old, new: (old or 0) + new})
    wf.add_node("a", lambda s: {"log": "one", "total": 5, "name": "x"})
    wf.add_node("b", lambda s: {"log": ["two", "three"], "total": 7, "name": "y"})
    wf.add_edge(START, "a").add_edge("a", "b")
    app = wf.compile()

    result = app.run({"log": ["zero"], "total": 1})

    assert result.state == {"log": ["zero", "one", "two", "three"], "total": 13, "name": "y"}


# -- invalid state --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("update", "key"),
    [
        ({"when": object()}, "state['when']"),
        ({"tags": {1, 2}}, "state['tags']"),
        ({"ratio": float("nan")}, "state['ratio']"),
        ({"deep": {"list": [1, b"bytes"]}}, "state['deep']['list'][1]"),
        ({"deep": {3: "int key"}}, "state['deep']"),
        ({7: "int key"}, "7"),
    ],
)
def test_a_node_returning_invalid_state_fails_naming_the_key_and_stores_nothing_of_it(
    storage: Storage, thread_id: str, update: dict[Any, Any], key: str
) -> None:
    wf = Workflow(reducers={"steps": "append"})
    wf.add_node("good", lambda s: {"steps": ["good"], "ok": 1})
    wf.add_node("bad", lambda s: {"steps": ["bad"], **update})
    wf.add_edge(START, "good").add_edge("good", "bad")
    th = wf.compile(storage=storage, durability="sync").thread(thread_id)

    with pytest.raises(InvalidState) as exc:
        th.run({"n": 1})

    error = exc.value
    assert error.code == "invalid_state"
    assert error.details["key"] == key
    assert key in error.message or repr(next(iter(update))) in error.message
    # The failure checkpoint keeps the state from before the step; the bad update is
    # not stored anywhere (not in the state, not in the step's finished work).
    head = th.head
    assert head is not None
    assert error.checkpoint == head
    assert error.snapshot is not None and error.snapshot["checkpoint"]["id"] == head.id
    assert (head.source, head.status, head.next) == ("failure", "failed", ("bad",))
    assert head.state == {"n": 1, "steps": ["good"], "ok": 1}
    assert "bad" not in head.tasks.get("done", {})
    assert head.error is not None and head.error["code"] == "invalid_state"
    assert [cp.version for cp in th.history()] == [3, 2, 1]


def test_a_node_returning_something_other_than_a_dict_fails_with_invalid_state() -> None:
    app = Workflow().add_node("a", lambda s: ["not", "a", "dict"]).add_edge(START, "a").compile()

    with pytest.raises(InvalidState, match="returned a list") as exc:
        app.run()

    assert exc.value.checkpoint.status == "failed"


@pytest.mark.parametrize("bad", [{"x": {1, 2}}, {1: "x"}, {"x": float("inf")}])
def test_invalid_input_is_refused_before_anything_is_written(
    storage: Storage, thread_id: str, bad: dict[Any, Any]
) -> None:
    th = chain("a").compile(storage=storage).thread(thread_id)

    with pytest.raises(InvalidState):
        th.run(bad)

    assert th.head is None
    assert storage.thread_info(thread_id) is None


# -- failures and limits ----------------------------------------------------------------


def test_a_node_exception_fails_the_run_with_run_failed(storage: Storage, thread_id: str) -> None:
    def boom(state: dict[str, Any]) -> dict[str, Any]:
        raise ValueError("the payment service said no")

    wf = chain("a")
    wf.add_node("boom", boom)
    wf.edges["a"] = ["boom"]
    th = wf.compile(storage=storage).thread(thread_id)

    with pytest.raises(RunFailed) as exc:
        th.run()

    error = exc.value
    assert error.code == "run_failed"
    assert isinstance(error, CriogenError)
    assert isinstance(error.__cause__, ValueError)
    assert error.details["node"] == "boom"
    assert "retry()" in error.message
    assert error.checkpoint == th.head
    assert error.snapshot == {"criogen_snapshot": 1, "checkpoint": _plain(th.head)}
    assert th.head.error["type"] == "ValueError"  # type: ignore[union-attr]
    assert th.head.error["message"] == "the payment service said no"  # type: ignore[union-attr]
    assert th.head.error["node"] == "boom"  # type: ignore[union-attr]
    assert "ValueError" in th.head.error["traceback"]  # type: ignore[union-attr]


def _plain(cp: Any) -> dict[str, Any]:
    data = cp.to_dict()
    data.pop("value_versions")
    data.pop("value_bases")
    return data


def test_a_loop_stops_at_max_steps(storage: Storage, thread_id: str) -> None:
    wf = Workflow(reducers={"steps": "append"})
    wf.add_node("spin", lambda s: {"steps": [len(s.get("steps", []))]})
    wf.add_edge(START, "spin").add_edge("spin", "spin")
    th = wf.compile(storage=storage, max_steps=5, durability="sync").thread(thread_id)

    with pytest.raises(MaxStepsExceeded) as exc:
        th.run()

    assert exc.value.code == "max_steps_exceeded"
    assert exc.value.details["max_steps"] == 5
    head = th.head
    assert head is not None and exc.value.checkpoint == head
    assert (head.source, head.status, head.state) == (
        "failure",
        "failed",
        {"steps": [0, 1, 2, 3, 4]},
    )


def test_suspend_outside_a_node_is_refused() -> None:
    with pytest.raises(InvalidArgument) as exc:
        suspend("approve?")
    assert exc.value.details["field"] == "suspend"


def test_a_fan_out_step_with_a_failure_and_an_invalid_sibling_stores_neither(
    storage: Storage, thread_id: str
) -> None:
    def boom(state: dict[str, Any]) -> dict[str, Any]:
        raise ValueError("boom")

    wf = Workflow()
    wf.add_node("boom", boom)
    wf.add_node("bad", lambda s: {"x": {1, 2}})
    wf.add_node("good", lambda s: {"y": 1})
    for node in ("boom", "bad", "good"):
        wf.add_edge(START, node)
    th = wf.compile(storage=storage).thread(thread_id)

    with pytest.raises(RunFailed) as exc:
        th.run()

    head = th.head
    assert head is not None and exc.value.checkpoint == head
    assert head.error["node"] == "boom"  # type: ignore[index]
    assert head.tasks["done"] == {"good": {"y": 1}}  # the valid sibling's work is kept


def test_a_suspend_beside_an_invalid_sibling_fails_with_invalid_state(
    storage: Storage, thread_id: str
) -> None:
    wf = Workflow()
    wf.add_node("ask", lambda s: {"a": suspend("ok?")})
    wf.add_node("bad", lambda s: {"x": object()})
    wf.add_edge(START, "ask").add_edge(START, "bad")
    th = wf.compile(storage=storage).thread(thread_id)

    with pytest.raises(InvalidState) as exc:
        th.run()

    assert exc.value.details["key"] == "state['x']"
    assert th.head is not None and th.head.status == "failed"


def test_a_reducer_that_raises_fails_the_run_with_a_failure_checkpoint(
    storage: Storage, thread_id: str
) -> None:
    wf = Workflow(reducers={"total": lambda old, new: (old or 0) + new})
    wf.add_node("add", lambda s: {"total": "not a number"})
    th = wf.add_edge(START, "add").compile(storage=storage).thread(thread_id)

    with pytest.raises(RunFailed) as exc:
        th.run({"total": 1})

    assert isinstance(exc.value.__cause__, TypeError)
    assert th.head is not None
    assert (th.head.source, th.head.status, th.head.next) == ("failure", "failed", ("add",))


def test_a_node_may_suspend_several_times_and_gets_each_answer_in_order() -> None:
    def two(state: dict[str, Any]) -> dict[str, Any]:
        first = suspend("first?")
        second = suspend("second?", {"after": first})
        return {"answers": [first, second]}

    th = Workflow().add_node("two", two).add_edge(START, "two").compile().thread("twice")

    assert th.run().interrupts[0]["reason"] == "first?"
    again = th.resume("one")
    assert (again.interrupts[0]["reason"], again.interrupts[0]["payload"]) == (
        "second?",
        {"after": "one"},
    )
    assert th.resume("two").state == {"answers": ["one", "two"]}


def test_parallel_suspensions_are_answered_by_interrupt_id() -> None:
    wf = Workflow()
    wf.add_node("p", lambda s: {"p": suspend("p?")})
    wf.add_node("q", lambda s: {"q": suspend("q?")})
    wf.add_edge(START, "p").add_edge(START, "q")
    th = wf.compile().thread("both")
    paused = th.run()
    ids = {i["reason"]: i["id"] for i in paused.interrupts}
    assert set(ids) == {"p?", "q?"}

    with pytest.raises(InvalidArgument) as exc:
        th.resume("which one?")
    assert exc.value.details["field"] == "value"
    one = th.resume({ids["p?"]: "P"})
    assert [i["reason"] for i in one.interrupts] == ["q?"]
    assert th.resume("Q").state == {"p": "P", "q": "Q"}


def test_any_string_keys_and_thread_ids_round_trip(storage: Storage, thread_id: str) -> None:
    update = {"": "empty key", 'it\'s "quoted"; --': [1], "ключ ü 🔑": {"nested 'k'": None}}
    wf = Workflow().add_node("a", lambda s: update).add_edge(START, "a")
    th = wf.compile(storage=storage, durability="sync").thread(f"{thread_id} 'ü' ; --")

    result = th.run({"k" * 255: 1})

    assert result.state == {"k" * 255: 1, **update}
    assert th.state == result.state
    assert th.history()[-1].state == {"k" * 255: 1}


def test_a_state_key_longer_than_255_characters_fails_with_invalid_state(
    storage: Storage, thread_id: str
) -> None:
    wf = Workflow().add_node("a", lambda s: {"k" * 256: 1}).add_edge(START, "a")
    th = wf.compile(storage=storage).thread(thread_id)

    with pytest.raises(InvalidState, match="at most 255") as exc:
        th.run({"x": 1})

    assert exc.value.details["key"] == "k" * 256
    assert th.head is not None and th.head.state == {"x": 1}


@pytest.mark.parametrize("limit", [-1, 1.5, "3", True])
def test_history_refuses_a_limit_that_is_not_a_whole_number(limit: Any) -> None:
    th = chain("a").compile().thread("paged")
    th.run()

    with pytest.raises(InvalidArgument) as exc:
        th.history(limit=limit)

    assert exc.value.details["field"] == "limit"
    assert th.history(limit=0) == []
