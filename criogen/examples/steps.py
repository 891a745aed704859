"""``steps``: START → a → b → c → END; each node appends its name and adds one to ``n``.

Input ``{"n": 0}`` ends with ``{"steps": ["a", "b", "c"], "n": 3}``. ``{"sleep": s}``
makes node b sleep ``s`` seconds, ``{"gate": path}`` makes node b wait (up to a
minute) until the file ``path`` exists, and ``{"fail": true}`` makes node b raise: the
API tests use them. The workflow declares these keys (``state_schema``), so the
dashboard edits its state with a form: the demo's failed run is fixed by unticking
"Fail in node b" and retrying.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from criogen import END, START, Workflow


def _step(name: str) -> Any:
    def node(state: dict[str, Any]) -> dict[str, Any]:
        if name == "b":
            if state.get("sleep"):
                time.sleep(float(state["sleep"]))
            if state.get("gate"):
                gate, deadline = Path(str(state["gate"])), time.monotonic() + 60
                while not gate.exists() and time.monotonic() < deadline:
                    time.sleep(0.05)
            if state.get("fail"):
                raise RuntimeError("node b failed because the input asked it to (fail=true)")
        return {"steps": [name], "n": int(state.get("n") or 0) + 1}

    node.__name__ = name
    return node


STATE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "n": {"type": "integer", "title": "Count", "description": "Each node adds one."},
        "steps": {"type": "array", "title": "Steps run", "items": {"type": "string"}},
        "fail": {
            "type": "boolean",
            "title": "Fail in node b",
            "description": "Node b raises while this is ticked.",
        },
        "sleep": {"type": "number", "minimum": 0, "title": "Sleep in node b (seconds)"},
        "gate": {
            "type": "string",
            "maxLength": 1000,
            "title": "Gate file",
            "description": "Node b waits (up to a minute) until this file exists.",
        },
    },
}
"""What the steps' state holds; other keys are allowed (and not checked)."""

workflow = Workflow(reducers={"steps": "append"}, name="steps", state_schema=STATE_SCHEMA)
for _name in ("a", "b", "c"):
    workflow.add_node(_name, _step(_name))
workflow.add_edge(START, "a")
workflow.add_edge("a", "b")
workflow.add_edge("b", "c")
workflow.add_edge("c", END)
