"""The bridge that runs a LangGraph graph as a Criogen workflow, from Python, on SQLite
and PostgreSQL: interrupts become suspensions, a failed run retried goes on from
LangGraph's last checkpoint, and the graph's values (messages too) are the thread's
JSON state."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.messages import AIMessage, AnyMessage
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import interrupt
from pydantic import BaseModel, Field

from criogen import Storage
from criogen.engine.errors import InvalidArgument, RunFailed
from criogen.langgraph import CriogenSaver
from criogen.langgraph.graphs import LangGraphGraph, load_langgraph
from tests.langgraph.agents.review import graph as review_graph


@pytest.fixture(params=["sqlite", "postgres"])
def storage(request: pytest.FixtureRequest, django_db_blocker: object) -> Iterator[Storage]:
    url = str(request.getfixturevalue(f"{request.param}_url"))
    with django_db_blocker.unblock():  # type: ignore[attr-defined]
        yield Storage(url, encryption_key=False)


def _bridged(name: str, graph: Any, storage: Storage) -> LangGraphGraph:
    return load_langgraph(name, "tests", graph, CriogenSaver(storage)).bind(storage)


def test_an_interrupt_is_a_suspension_and_resume_answers_it(storage: Storage) -> None:
    bridged = _bridged("review", review_graph, storage)
    thread = bridged.thread(f"b-{uuid.uuid4()}")

    waiting = thread.run({"topic": "kelp", "notes": [], "approved": False})

    assert waiting.status == "suspended"
    assert waiting.state == {"topic": "kelp", "notes": ["draft about kelp"], "approved": False}
    [interrupt] = waiting.interrupts
    assert interrupt["payload"] == {"question": "approve the draft?", "notes": ["draft about kelp"]}
    assert interrupt["langgraph_node"] == "review"

    done = thread.resume("no")

    assert done.status == "completed"
    assert done.state["notes"] == ["draft about kelp", "reviewed: no", "dropped"]
    langgraph_state = bridged.compiled.get_state({"configurable": {"thread_id": thread.id}})
    assert langgraph_state.values == done.state


class Chat(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def test_a_failed_run_retried_goes_on_from_langgraphs_last_checkpoint(storage: Storage) -> None:
    calls = {"listen": 0, "answer": 0}

    def listen(state: Chat) -> dict[str, Any]:
        calls["listen"] += 1
        return {"messages": [AIMessage("let me think", id="think")]}

    def answer(state: Chat) -> dict[str, Any]:
        calls["answer"] += 1
        if calls["answer"] == 1:
            raise RuntimeError("the model timed out")
        return {"messages": [AIMessage("42", id="answer")]}

    builder = StateGraph(Chat)
    builder.add_node("listen", listen)
    builder.add_node("answer", answer)
    builder.add_edge(START, "listen")
    builder.add_edge("listen", "answer")
    builder.add_edge("answer", END)
    bridged = _bridged("chat", builder.compile(), storage)
    thread = bridged.thread(f"b-{uuid.uuid4()}")

    with pytest.raises(RunFailed, match="the model timed out"):
        # Input as JSON, as it comes over the REST API; LangGraph makes it a message.
        thread.run({"messages": [{"role": "user", "content": "the answer?", "id": "q"}]})
    done = thread.retry()

    assert done.status == "completed"
    assert calls == {"listen": 1, "answer": 2}  # listen's checkpoint was kept
    messages = done.state["messages"]
    assert [(m["type"], m["content"]) for m in messages] == [
        ("human", "the answer?"),
        ("ai", "let me think"),
        ("ai", "42"),
    ]


class Note(BaseModel):
    text: str = Field(min_length=1)
    stars: int = Field(ge=1, le=5)


class Review(BaseModel):
    note: Note  # a nested model: its JSON Schema uses $defs, which Criogen does not check


class Rated(TypedDict):
    note: dict[str, Any]


def _asking(response_schema: Any) -> Any:
    def ask(state: Rated) -> dict[str, Any]:
        answer = interrupt({"question": "rate it"}, response_schema=response_schema)
        return {"note": answer if isinstance(answer, dict) else answer.model_dump()}

    builder = StateGraph(Rated)
    builder.add_node("ask", ask)
    builder.add_edge(START, "ask")
    builder.add_edge("ask", END)
    return builder.compile()


def test_an_interrupt_with_a_response_schema_is_a_typed_suspension(storage: Storage) -> None:
    thread = _bridged("rate", _asking(Note), storage).thread(f"b-{uuid.uuid4()}")

    waiting = thread.run({"note": {}})

    [interrupt] = waiting.interrupts
    assert interrupt["schema"]["required"] == ["text", "stars"]
    assert interrupt["schema"]["properties"]["stars"]["maximum"] == 5
    # Refused by name before any run, as LangGraph would refuse it when resuming.
    with pytest.raises(InvalidArgument) as refused:
        thread.check_answer({"text": "fine", "stars": 9})
    assert refused.value.details["field"] == "command.resume.stars"
    done = thread.resume({"text": "fine", "stars": 4})
    assert done.status == "completed"
    assert done.state["note"] == {"text": "fine", "stars": 4}


def test_a_response_schema_criogen_cannot_check_leaves_the_answer_untyped(
    storage: Storage,
) -> None:
    thread = _bridged("review", _asking(Review), storage).thread(f"b-{uuid.uuid4()}")

    [interrupt] = thread.run({"note": {}}).interrupts

    assert "schema" not in interrupt
    thread.check_answer({"anything": True})
