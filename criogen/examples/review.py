"""``review``: a document-review workflow with a human step.

START → draft → check → review → publish → END. ``check`` flags risky phrases;
``review`` suspends for an editor, showing the draft and the flags, and takes
``{"decision": "approve" | "revise", "note": "..."}`` (declared: an "Approve" choice and
a schema, so the dashboard shows a button and a form, and any other answer is refused
before a run starts). A revision loops back to ``draft`` with the note; an approval
publishes.

Input: ``{"title": "...", "body": "..."}``.
"""

from __future__ import annotations

from typing import Any

from criogen import END, START, Workflow, suspend

RISKY = ("guarantee", "refund in full", "always", "never", "lawsuit")


def draft(state: dict[str, Any]) -> dict[str, Any]:
    body = str(state.get("body") or "")
    notes = state.get("notes") or []
    if notes:
        body = f"{body}\n\n[Revised after: {notes[-1]}]"
    return {"draft": body, "revision": int(state.get("revision") or 0) + 1}


def check(state: dict[str, Any]) -> dict[str, Any]:
    text = str(state.get("draft") or "").lower()
    return {"flags": [word for word in RISKY if word in text]}


ANSWER = {
    "type": "object",
    "properties": {
        "decision": {"title": "Decision", "enum": ["approve", "revise"]},
        "note": {
            "title": "Note for the writer",
            "description": "What to change (a revision needs one).",
            "type": "string",
        },
    },
    "required": ["decision"],
    "additionalProperties": False,
}
"""What ``review`` takes: the decision and, to revise, a note."""


def review(state: dict[str, Any]) -> dict[str, Any]:
    answer = suspend(
        "review draft",
        {
            "title": state.get("title"),
            "draft": state.get("draft"),
            "flags": state.get("flags", []),
            "revision": state.get("revision"),
        },
        choices={"Approve": {"decision": "approve"}},
        schema=ANSWER,
    )
    update: dict[str, Any] = {"decision": answer["decision"]}
    if answer.get("note"):
        update["notes"] = [str(answer["note"])]
    return update


def route(state: dict[str, Any]) -> str:
    return "publish" if state.get("decision") == "approve" else "draft"


def publish(state: dict[str, Any]) -> dict[str, Any]:
    return {"published": True, "url": f"/docs/{str(state.get('title') or 'untitled').lower()}"}


workflow = Workflow(reducers={"notes": "append"}, name="review")
workflow.add_node("draft", draft)
workflow.add_node("check", check)
workflow.add_node("review", review)
workflow.add_node("publish", publish)
workflow.add_edge(START, "draft")
workflow.add_edge("draft", "check")
workflow.add_edge("check", "review")
workflow.add_conditional_edges("review", route)
workflow.add_edge("publish", END)
