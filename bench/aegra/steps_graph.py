# ruff: noqa: I002 - see the docstring: string annotations break Aegra's graph loading
"""``steps`` for Aegra: the graph of ``criogen/examples/steps.py`` in LangGraph terms.

START → a → b → c → END; each node appends its name to ``steps`` (an append reducer)
and adds one to ``n``; ``sleep`` makes node b sleep and ``fail`` makes it raise, as in
Criogen's example. ``payload`` rides along unchanged, so every server carries the same
state. ``bench/http_compare.py`` serves this file with Aegra from ``bench/.venvs/aegra``
(``aegra.json``) and with LangGraph's in-memory server from ``bench/.venvs/langgraph``
(``langgraph.json``, e.g. ``cd bench/aegra && langgraph dev --no-browser``); it imports
nothing from Criogen. (No ``from __future__ import annotations``: Aegra loads
the file outside ``sys.modules``, where LangGraph could not resolve the state's
string annotations.)
"""

import operator
import time
from typing import Annotated, Any, TypedDict

from langgraph.graph import END, START, StateGraph


class State(TypedDict, total=False):
    """The run's state: what the nodes change and what the input carries."""

    steps: Annotated[list[str], operator.add]
    n: int
    payload: dict[str, Any]
    sleep: float
    fail: bool


def _step(name: str) -> Any:
    def node(state: State) -> dict[str, Any]:
        if name == "b":
            if state.get("sleep"):
                time.sleep(float(state["sleep"]))
            if state.get("fail"):
                raise RuntimeError("node b failed because the input asked it to (fail=true)")
        return {"steps": [name], "n": int(state.get("n") or 0) + 1}

    node.__name__ = name
    return node


builder = StateGraph(State)
for _name in ("a", "b", "c"):
    builder.add_node(_name, _step(_name))
builder.add_edge(START, "a")
builder.add_edge("a", "b")
builder.add_edge("b", "c")
builder.add_edge("c", END)
graph = builder.compile()
