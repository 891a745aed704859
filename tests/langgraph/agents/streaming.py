"""A LangGraph graph for the stream tests, served by Criogen and by ``langgraph dev``:
a plain node, a subgraph of two nodes, a node calling a streaming fake chat model (its
tokens), a node writing a custom event with ``get_stream_writer()``, and, when the
input asks for it, an ``interrupt()`` before the end."""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, AnyMessage
from langgraph.config import get_stream_writer
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import interrupt


class State(TypedDict, total=False):
    topic: str
    notes: Annotated[list[str], operator.add]
    messages: Annotated[list[AnyMessage], add_messages]
    ask: bool


REPLY = "otters hold hands while they sleep"
"""What the fake model says, one token per word."""


def plan(state: State) -> dict[str, Any]:
    return {"notes": [f"plan for {state.get('topic', '')}"]}


def search(state: State) -> dict[str, Any]:
    return {"notes": ["searched"]}


def summarise(state: State) -> dict[str, Any]:
    return {"notes": ["summarised"]}


def research_builder() -> StateGraph:
    made = StateGraph(State)
    made.add_node("search", search)
    made.add_node("summarise", summarise)
    made.add_edge(START, "search")
    made.add_edge("search", "summarise")
    made.add_edge("summarise", END)
    return made


research = research_builder().compile()


def chat(state: State) -> dict[str, Any]:
    # A new model per call: GenericFakeChatModel consumes its iterator.
    model = GenericFakeChatModel(messages=iter([AIMessage(content=REPLY)]))
    return {"messages": [model.invoke(state.get("messages") or [])]}


def report(state: State) -> dict[str, Any]:
    write = get_stream_writer()
    write({"progress": "half"})
    write({"progress": "done"})
    return {"notes": ["reported"]}


def review(state: State) -> dict[str, Any]:
    answer = interrupt({"question": "keep the report?"})
    return {"notes": [f"reviewed: {answer}"]}


def builder() -> StateGraph:
    made = StateGraph(State)
    made.add_node("plan", plan)
    made.add_node("research", research)
    made.add_node("chat", chat)
    made.add_node("report", report)
    made.add_node("review", review)
    made.add_edge(START, "plan")
    made.add_edge("plan", "research")
    made.add_edge("research", "chat")
    made.add_edge("chat", "report")
    made.add_conditional_edges(
        "report", lambda s: "review" if s.get("ask") else END, ["review", END]
    )
    made.add_edge("review", END)
    return made


graph = builder().compile()
