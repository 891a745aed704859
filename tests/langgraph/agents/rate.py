"""A LangGraph graph whose interrupt declares the answer it takes
(``response_schema``): the dashboard shows it as a typed form."""

from __future__ import annotations

from typing import Any, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt
from pydantic import BaseModel, Field


class Note(BaseModel):
    text: str = Field(min_length=1)
    stars: int = Field(ge=1, le=5)


class Rated(TypedDict):
    topic: str
    note: dict[str, Any]


def ask(state: Rated) -> dict[str, Any]:
    answer = interrupt({"question": f"rate {state['topic']}"}, response_schema=Note)
    return {"note": answer if isinstance(answer, dict) else answer.model_dump()}


builder = StateGraph(Rated)
builder.add_node("ask", ask)
builder.add_edge(START, "ask")
builder.add_edge("ask", END)
graph = builder.compile()
