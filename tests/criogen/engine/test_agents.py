"""The agent loop on every storage: turns, tools, errors, max_steps, hooks, head statuses."""

from __future__ import annotations

from typing import Any

import pytest

from criogen import Agent, Storage, tool
from criogen.engine.agents import RESERVED_KEY, AgentThread
from criogen.engine.errors import (
    InvalidArgument,
    MaxStepsExceeded,
    ModelError,
    NothingToRetry,
    RunFailed,
    ScriptExhausted,
    ThreadInterrupted,
    ThreadSuspended,
)
from criogen.engine.tools import ToolContext
from criogen.llms import ScriptedModel


@tool(idempotent=True)
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool(idempotent=True)
def explode(reason: str) -> str:
    """Always fails."""
    raise RuntimeError(f"boom: {reason}")


def make(storage: Storage, script: list[Any], **options: Any) -> Agent:
    options.setdefault("tools", [add, explode])
    return Agent(ScriptedModel(script), storage=storage, instructions="Be brief.", **options)


def test_it_answers_without_tools_and_keeps_the_transcript(
    storage: Storage, thread_id: str
) -> None:
    agent = make(storage, ["Hello!", "Again!"])
    t = agent.thread(thread_id)
    first = t.send("hi")
    assert (first.status, first.text, first.pending) == ("completed", "Hello!", [])
    second = t.send({"role": "user", "content": "hi again"})
    assert second.text == "Again!"
    messages = t.state["messages"]
    assert [m["type"] for m in messages] == ["human", "ai", "human", "ai"]
    assert messages[2]["content"] == "hi again"  # OpenAI-style input was normalised
    assert all(m["id"] for m in messages)
    assert second.checkpoint == t.head
    assert [c.source for c in reversed(t.history())] == ["input", "step", "input", "step"]
    assert t.state[RESERVED_KEY]["steps"] == 2


def test_it_runs_tool_calls_and_checkpoints_after_each(storage: Storage, thread_id: str) -> None:
    agent = make(
        storage,
        [
            {"tool_calls": [{"name": "add", "args": {"a": 2, "b": 2}, "id": "c1"}]},
            {
                "tool_calls": [
                    {"name": "add", "args": {"a": 1, "b": 1}, "id": "c2"},
                    {"name": "add", "args": {"a": 3, "b": 3}, "id": "c3"},
                ]
            },
            "2+2 is 4.",
        ],
    )
    reply = agent.thread(thread_id).send("What is 2+2?")
    assert reply.status == "completed"
    assert reply.text == "2+2 is 4."
    tools = [m for m in reply.messages if m["type"] == "tool"]
    assert [(m["tool_call_id"], m["content"], m["status"]) for m in tools] == [
        ("c1", "4", "success"),
        ("c2", "2", "success"),
        ("c3", "6", "success"),
    ]
    history = list(reversed(agent.thread(thread_id).history()))
    # input, model, tool, model, tool, tool, model
    assert [(c.source, c.next) for c in history] == [
        ("input", ("model",)),
        ("step", ("tools",)),
        ("step", ("model",)),
        ("step", ("tools",)),
        ("step", ("tools",)),
        ("step", ("model",)),
        ("step", ()),
    ]
    assert history[-1].status == "completed"
    assert reply.state[RESERVED_KEY]["tool_calls"] == 3
    assert reply.state[RESERVED_KEY]["steps"] == 3


def test_a_tool_that_raises_becomes_an_error_tool_message(storage: Storage, thread_id: str) -> None:
    agent = make(
        storage,
        [
            {"tool_calls": [{"name": "explode", "args": {"reason": "x"}, "id": "e1"}]},
            {"tool_calls": [{"name": "add", "args": {"a": "two", "b": 2}, "id": "e2"}]},
            {"tool_calls": [{"name": "nope", "args": {}, "id": "e3"}]},
            "Sorry, that failed.",
        ],
    )
    reply = agent.thread(thread_id).send("go")
    assert reply.status == "completed"
    errors = [m for m in reply.messages if m["type"] == "tool"]
    assert [m["status"] for m in errors] == ["error", "error", "error"]
    assert "boom: x" in errors[0]["content"]
    assert "'a'" in errors[1]["content"]  # InvalidToolCall names the argument
    assert "no tool named 'nope'" in errors[2]["content"]


def test_it_fails_clearly_after_max_steps_and_retry_continues(
    storage: Storage, thread_id: str
) -> None:
    loop = {"tool_calls": [{"name": "add", "args": {"a": 1, "b": 1}}]}
    agent = make(storage, [loop, loop, loop, "finally"], max_steps=2)
    t = agent.thread(thread_id)
    with pytest.raises(MaxStepsExceeded) as info:
        t.send("loop")
    assert info.value.code == "max_steps_exceeded"
    head = t.head
    assert head is not None and head.source == "failure" and head.status == "failed"
    assert head.error is not None and head.error["code"] == "max_steps_exceeded"
    assert info.value.checkpoint == head
    reply = t.retry()  # a fresh budget of max_steps
    assert reply.status == "completed"
    assert reply.text == "finally"


def test_a_model_error_writes_a_failure_and_retry_calls_the_model_again(
    storage: Storage, thread_id: str
) -> None:
    calls = {"n": 0}

    def flaky(messages: list[dict[str, Any]]) -> str:
        calls["n"] += 1
        if calls["n"] == 1:
            raise ModelError("provider down", retryable=True)
        return "recovered"

    agent = make(storage, [flaky, flaky])
    t = agent.thread(thread_id)
    with pytest.raises(ModelError):
        t.send("hi")
    assert t.head is not None and t.head.status == "failed"
    with pytest.raises(NothingToRetry):
        make(storage, []).thread(f"{thread_id}-none").retry()
    assert t.retry().text == "recovered"
    assert [m["type"] for m in t.messages] == ["human", "ai"]


def test_send_after_a_failure_starts_a_new_turn(storage: Storage, thread_id: str) -> None:
    agent = make(storage, ["only one"])
    t = agent.thread(thread_id)
    t.send("first")
    with pytest.raises(ScriptExhausted) as info:
        t.send("second")
    assert info.value.code == "script_exhausted"
    agent2 = make(storage, ["third answer"])
    reply = agent2.thread(thread_id).send("third")
    assert reply.text == "third answer"
    assert [m["content"] for m in reply.messages if m["type"] == "human"] == [
        "first",
        "second",
        "third",
    ]


def test_send_on_a_thread_whose_run_died_fails_thread_interrupted(
    storage: Storage, thread_id: str
) -> None:
    class Crash(BaseException):
        """Stands in for the process dying inside a tool."""

    @tool(idempotent=True)
    def die() -> str:
        """Crash."""
        raise Crash

    agent = make(
        storage,
        [{"tool_calls": [{"name": "die", "args": {}}]}, "after the crash"],
        tools=[die],
    )
    t = agent.thread(thread_id)
    with pytest.raises(Crash):
        t.send("go", durability="sync")
    assert t.head is not None and t.head.status == "in_progress"
    with pytest.raises(ThreadInterrupted) as info:
        t.send("again")
    assert info.value.code == "thread_interrupted"


def test_values_passed_with_send_are_in_the_state_and_hooks_see_them(
    storage: Storage, thread_id: str
) -> None:
    seen: list[tuple[str, Any]] = []

    def before_model(state: dict[str, Any], messages: list[dict[str, Any]]) -> None:
        seen.append(("before_model", state.get("user_id")))
        assert messages[0]["type"] == "system" and messages[0]["content"] == "Be brief."

    def after_model(state: dict[str, Any], message: dict[str, Any]) -> None:
        seen.append(("after_model", message["type"]))

    def before_tool(state: dict[str, Any], call: dict[str, Any]) -> None:
        seen.append(("before_tool", (state["user_id"], call["name"])))

    def after_tool(state: dict[str, Any], call: dict[str, Any], result: dict[str, Any]) -> None:
        seen.append(("after_tool", result["content"]))

    @tool(idempotent=True)
    def whoami(ctx: ToolContext) -> str:
        """Say who the user is."""
        return str(ctx.state["user_id"])

    agent = make(
        storage,
        [{"tool_calls": [{"name": "whoami", "args": {}}]}, "done"],
        tools=[whoami],
        before_model=before_model,
        after_model=[after_model],
        before_tool=before_tool,
        after_tool=after_tool,
    )
    reply = agent.thread(thread_id).send("who am I?", user_id="42", plan="gold")
    assert reply.state["user_id"] == "42" and reply.state["plan"] == "gold"
    assert seen == [
        ("before_model", "42"),
        ("after_model", "ai"),
        ("before_tool", ("42", "whoami")),
        ("after_tool", "42"),
        ("before_model", "42"),
        ("after_model", "ai"),
    ]


def test_a_hook_that_raises_fails_the_run(storage: Storage, thread_id: str) -> None:
    def broken(state: dict[str, Any], messages: list[dict[str, Any]]) -> None:
        raise ValueError("hook broke")

    agent = make(storage, ["never"], before_model=broken)
    with pytest.raises(RunFailed) as info:
        agent.thread(thread_id).send("hi")
    assert info.value.checkpoint.status == "failed"
    assert "hook broke" in info.value.message


def test_before_model_may_replace_the_messages_sent(storage: Storage, thread_id: str) -> None:
    model = ScriptedModel(["ok"])

    def trim(state: dict[str, Any], messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return messages[-1:]

    Agent(model, storage=storage, instructions="long", before_model=trim).thread(thread_id).send(
        "hi"
    )
    assert [m["type"] for m in model.calls[0].messages] == ["human"]


def test_run_answers_on_a_fresh_thread(storage: Storage) -> None:
    agent = make(storage, ["4", "5"])
    first, second = agent.run("What is 2+2?"), agent.run("And 2+3?")
    assert (first.text, second.text) == ("4", "5")
    assert first.thread_id != second.thread_id
    assert [m["type"] for m in second.messages] == ["human", "ai"]


def test_thread_run_takes_langgraph_style_input(storage: Storage, thread_id: str) -> None:
    agent = make(storage, ["hi there"])
    reply = agent.thread(thread_id).run(
        {"messages": [{"role": "user", "content": "hello"}], "user_id": "7"}, run_id="r-1"
    )
    assert reply.run_id == "r-1" and reply.checkpoint.run_id == "r-1"
    assert reply.state["user_id"] == "7"


@pytest.mark.parametrize("durability", ["sync", "async", "exit"])
def test_every_durability_gives_the_same_answer(
    storage: Storage, thread_id: str, durability: str
) -> None:
    agent = make(
        storage,
        [{"tool_calls": [{"name": "add", "args": {"a": 1, "b": 2}}]}, "3"],
        durability=durability,
    )
    reply = agent.thread(thread_id).send("1+2?")
    assert reply.text == "3"
    assert agent.thread(thread_id).head == reply.checkpoint
    versions = [c.version for c in agent.thread(thread_id).history()]
    assert versions == sorted(versions, reverse=True)
    if durability == "exit":
        assert len(versions) == 1


def test_rewind_forks_an_earlier_checkpoint_and_keeps_history(
    storage: Storage, thread_id: str
) -> None:
    agent = make(storage, ["one", "two", "three"])
    t = agent.thread(thread_id)
    t.send("a")
    t.send("b")
    first_answer = [c for c in t.history() if c.status == "completed"][-1]
    fork = t.rewind(first_answer.id)
    assert fork.source == "fork" and fork.state == first_answer.state
    reply = t.send("c")
    assert [m["content"] for m in reply.messages] == ["a", "one", "c", "three"]
    assert len(t.history()) == 7


def test_update_state_merges_values_as_a_new_checkpoint(storage: Storage, thread_id: str) -> None:
    agent = make(storage, ["ok"])
    t = agent.thread(thread_id)
    t.send("hi", plan="free")
    cp = t.update_state({"plan": "gold"}, by="alice")
    assert cp.state["plan"] == "gold" and cp.status == "completed"
    assert len(cp.state["messages"]) == 2


def test_bad_input_changes_nothing(storage: Storage, thread_id: str) -> None:
    agent = make(storage, ["x"])
    t: AgentThread = agent.thread(thread_id)
    with pytest.raises(InvalidArgument) as info:
        t.send("hi", messages=["sneaky"])
    assert info.value.details["field"] == "messages"
    with pytest.raises(InvalidArgument):
        t.send("hi", **{RESERVED_KEY: {}})
    with pytest.raises(InvalidArgument):
        agent.thread("")
    assert t.head is None


def test_it_refuses_a_bad_definition() -> None:
    with pytest.raises(InvalidArgument) as info:
        Agent(ScriptedModel([]), tools=[add], approve=["refund"])
    assert info.value.details["field"] == "approve"
    with pytest.raises(InvalidArgument):
        Agent(object())
    with pytest.raises(InvalidArgument):
        Agent(ScriptedModel([]), tools=[add, add])


def test_with_storage_binds_the_same_agent_to_another_storage(thread_id: str) -> None:
    agent = make(Storage(), ["from the bound copy"])
    other = Storage()
    bound = agent.with_storage(other)
    assert bound.storage is other and bound.tools.keys() == agent.tools.keys()
    bound.thread(thread_id).send("hi")
    assert other.head(thread_id) is not None
    assert agent.storage.head(thread_id) is None


def test_send_on_a_suspended_thread_fails_thread_suspended(
    storage: Storage, thread_id: str
) -> None:
    agent = make(
        storage, [{"tool_calls": [{"name": "add", "args": {"a": 1, "b": 1}}]}], approve=["add"]
    )
    t = agent.thread(thread_id)
    assert t.send("1+1").status == "suspended"
    with pytest.raises(ThreadSuspended) as info:
        t.send("hello?")
    assert info.value.code == "thread_suspended"


def test_token_usage_is_counted_under_the_reserved_key(storage: Storage, thread_id: str) -> None:
    usage = {"input_tokens": 10, "output_tokens": 3}
    agent = make(
        storage,
        [
            {"tool_calls": [{"name": "add", "args": {"a": 1, "b": 1}}], "usage": usage},
            {"content": "2", "usage": usage},
        ],
    )
    reply = agent.thread(thread_id).send("1+1")
    assert reply.usage == {"input_tokens": 20, "output_tokens": 6}
    assert set(reply.state) == {"messages", RESERVED_KEY}


def test_should_stop_stops_between_steps_and_retry_continues(
    storage: Storage, thread_id: str
) -> None:
    from criogen.engine.errors import RunCancelled

    agent = make(storage, [{"tool_calls": [{"name": "add", "args": {"a": 1, "b": 1}}]}, "2"])
    asked = {"n": 0}

    def stop_after_the_model_step() -> bool:
        asked["n"] += 1
        return asked["n"] > 1  # first check: go; second (before the tools): stop

    t = agent.thread(thread_id)
    with pytest.raises(RunCancelled) as info:
        t.run("1+1?", should_stop=stop_after_the_model_step, run_id="r-stop")
    assert info.value.code == "run_cancelled"
    head = t.head
    assert head is not None and head.status == "in_progress" and head.next == ("tools",)
    assert t.retry().text == "2"
    assert Agent.supports_should_stop


def test_a_should_stop_raising_timeout_ends_the_turn_with_a_failure_checkpoint(
    storage: Storage, thread_id: str
) -> None:
    # The runner's time limit: past it, should_stop raises TimeoutError before a step.
    from criogen.engine.errors import RunFailed

    agent = make(storage, [{"tool_calls": [{"name": "add", "args": {"a": 1, "b": 1}}]}, "2"])
    asked = {"n": 0}

    def past_the_limit_after_the_model_step() -> bool:
        asked["n"] += 1
        if asked["n"] > 1:
            raise TimeoutError("the run passed its time limit")
        return False

    t = agent.thread(thread_id)
    with pytest.raises(RunFailed):
        t.run("1+1?", should_stop=past_the_limit_after_the_model_step, run_id="r-late")
    head = t.head
    assert head is not None
    assert (head.source, head.status, head.next) == ("failure", "failed", ("tools",))
    assert head.error is not None and head.error["type"] == "TimeoutError"
    assert t.retry().text == "2"
