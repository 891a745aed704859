"""A LangGraph graph with a subgraph, a conditional edge, input/output schemas of its
own and a context schema: what the assistants endpoints describe (schemas, drawing
with and without ``xray``, subgraphs)."""

from __future__ import annotations

import operator
from typing import Annotated, Any, Literal

from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict


class Inner(TypedDict):
    notes: Annotated[list[str], operator.add]


def outline(state: Inner) -> dict[str, Any]:
    return {"notes": ["outline"]}


def write(state: Inner) -> dict[str, Any]:
    return {"notes": ["text"]}


inner = StateGraph(Inner)
inner.add_node("outline", outline)
inner.add_node("write", write)
inner.add_edge(START, "outline")
inner.add_edge("outline", "write")
inner.add_edge("write", END)


class Ask(TypedDict):
    topic: str


class Answer(TypedDict):
    notes: list[str]


class State(TypedDict):
    topic: str
    notes: Annotated[list[str], operator.add]
    stars: int


class Context(TypedDict):
    tone: Literal["plain", "formal"]


def plan(state: State) -> dict[str, Any]:
    return {"notes": [f"plan for {state['topic']}"], "stars": 0}


def route(state: State) -> Literal["draft", "__end__"]:
    return "draft" if state["topic"] else END


builder = StateGraph(State, input_schema=Ask, output_schema=Answer, context_schema=Context)
builder.add_node("plan", plan)
builder.add_node("draft", inner.compile())
builder.add_edge(START, "plan")
builder.add_conditional_edges("plan", route)
builder.add_edge("draft", END)
graph = builder.compile()
