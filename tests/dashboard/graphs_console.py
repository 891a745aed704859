"""Graphs for the console tests: a workflow asking for a wire transfer's approval in
the HITL shape with only some decisions allowed, and one with a form of every widget."""

from __future__ import annotations

from typing import Any

from criogen import END, START, Workflow, suspend


def _gate(state: dict[str, Any]) -> dict[str, Any]:
    answer = suspend(
        "approval",
        {
            "action_requests": [{"name": "wire", "args": {"to": "ACME", "eur": 900}}],
            "review_configs": [{"action_name": "wire", "allowed_decisions": ["reject"]}],
        },
    )
    return {"answer": answer}


gated = Workflow(name="gated")
gated.add_node("gate", _gate)
gated.add_edge(START, "gate").add_edge("gate", END)
"""``gated``: an approval request that may only be rejected."""


FORM = {
    "type": "object",
    "properties": {
        "size": {"title": "Size", "enum": ["S", "M", "L", "XL", "XXL"]},
        "count": {"title": "Count", "type": "integer", "minimum": 1},
        "gift": {"title": "Gift wrap", "type": "boolean"},
        "name": {"title": "Name", "type": "string", "maxLength": 40},
        "message": {"title": "Message", "type": "string"},
    },
    "required": ["size", "count"],
}


def _order(state: dict[str, Any]) -> dict[str, Any]:
    return {"order": suspend("order details", {"sku": "tee"}, schema=FORM)}


form = Workflow(name="form")
form.add_node("order", _order)
form.add_edge(START, "order").add_edge("order", END)
"""``form``: a suspension whose schema uses every widget the dashboard renders."""


class Crash(BaseException):
    """Stands for the process dying mid-run (not an error the engine records)."""


def _dies(state: dict[str, Any]) -> dict[str, Any]:
    raise Crash("the worker died")


crashing = Workflow(name="crashing")
crashing.add_node("a", lambda s: {"a": True})
crashing.add_node("b", _dies)
crashing.add_edge(START, "a").add_edge("a", "b").add_edge("b", END)
"""``crashing``: node ``b`` takes the process down (the head stays ``in_progress``)."""
