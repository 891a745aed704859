"""A small LangGraph graph for the registry tests: draft, a person's review through
``interrupt()``, publish. Named as a module (``tests.langgraph.agents.review:graph``)
and as a file (``./tests/langgraph/agents/review.py:graph``)."""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt


class State(TypedDict):
    topic: str
    notes: Annotated[list[str], operator.add]
    approved: bool


def draft(state: State) -> dict[str, Any]:
    return {"notes": [f"draft about {state['topic']}"]}


def review(state: State) -> dict[str, Any]:
    answer = interrupt({"question": "approve the draft?", "notes": state["notes"]})
    return {"approved": answer == "yes", "notes": [f"reviewed: {answer}"]}


def publish(state: State) -> dict[str, Any]:
    return {"notes": ["published" if state["approved"] else "dropped"]}


def builder() -> StateGraph:
    made = StateGraph(State)
    made.add_node("draft", draft)
    made.add_node("review", review)
    made.add_node("publish", publish)
    made.add_edge(START, "draft")
    made.add_edge("draft", "review")
    made.add_conditional_edges("review", lambda s: "publish", ["publish", END])
    made.add_edge("publish", END)
    return made


graph = builder().compile()
"""A compiled graph (the registry gives it Criogen's checkpointer)."""


def make_graph(config: dict[str, Any]) -> StateGraph:
    """A factory taking a config, returning the uncompiled graph."""
    return builder()


async def make_graph_async() -> Any:
    """An async factory, returning a compiled graph."""
    return builder().compile()


not_a_graph = 42
