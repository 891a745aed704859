"""``hitl``: START → a → ask → c → END; ``ask`` suspends for a person.

Node ``ask`` suspends with ``{"question": "approve?", "n": n}`` and stores the value it
is resumed with in ``answer``. The state is the ``steps`` example's plus ``answer``.
"""

from __future__ import annotations

from typing import Any

from criogen import END, START, Workflow, suspend


def a(state: dict[str, Any]) -> dict[str, Any]:
    return {"steps": ["a"], "n": int(state.get("n") or 0) + 1}


def ask(state: dict[str, Any]) -> dict[str, Any]:
    n = state.get("n")
    answer = suspend("approve?", {"question": "approve?", "n": n})
    return {"steps": ["ask"], "n": int(n or 0) + 1, "answer": answer}


def c(state: dict[str, Any]) -> dict[str, Any]:
    return {"steps": ["c"], "n": int(state.get("n") or 0) + 1}


workflow = Workflow(reducers={"steps": "append"}, name="hitl")
workflow.add_node("a", a)
workflow.add_node("ask", ask)
workflow.add_node("c", c)
workflow.add_edge(START, "a")
workflow.add_edge("a", "ask")
workflow.add_edge("ask", "c")
workflow.add_edge("c", END)
