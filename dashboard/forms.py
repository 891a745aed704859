"""Reading operator input: JSON values, per-call decisions, and edited tool arguments.

Each reader returns the parsed value or raises :class:`FormError` naming the field, so
the page can say exactly what to fix and nothing is sent to a service half-checked.
"""

from __future__ import annotations

import json
from typing import Any

from dashboard.data import WaitingCall

MAX_REASON = 2000


class FormError(ValueError):
    """Input the dashboard refuses; ``field`` names the form field at fault."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


def parse_json(text: str, field: str) -> Any:
    """The JSON value typed into ``field``; an empty box means ``null``."""
    text = (text or "").strip()
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise FormError(field, f"{field}: not valid JSON ({exc}).") from None


_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "object": (dict,),
    "array": (list,),
    "null": (type(None),),
}


def schema_errors(value: Any, schema: dict[str, Any] | None, path: str = "args") -> list[str]:
    """Where ``value`` breaks a JSON Schema's common rules (type, required, properties,
    additionalProperties, enum, items); [] when it fits or there is no schema."""
    if not isinstance(schema, dict):
        return []
    errors: list[str] = []
    kind = schema.get("type")
    kinds = kind if isinstance(kind, list) else [kind] if isinstance(kind, str) else []
    if kinds:
        ok = False
        for k in kinds:
            types = _TYPES.get(k, ())
            # JSON has no bool/int distinction problem; Python does: True is an int.
            if isinstance(value, bool) and k in ("integer", "number"):
                continue
            if isinstance(value, types):
                ok = True
        if not ok:
            return [f"{path} must be {' or '.join(kinds)}"]
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{path} must be one of {json.dumps(schema['enum'])}")
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        for name in schema.get("required") or []:
            if name not in value:
                errors.append(f"{path}.{name} is required")
        for name, item in value.items():
            if name in props:
                errors.extend(schema_errors(item, props[name], f"{path}.{name}"))
            elif schema.get("additionalProperties") is False:
                errors.append(f"{path}.{name} is not allowed")
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            errors.extend(schema_errors(item, schema["items"], f"{path}[{i}]"))
    return errors


def edited_args(text: str, call: WaitingCall) -> Any:
    """The edited arguments of ``call``, checked against its tool's ``args_schema``."""
    field = f"args-{call.index}"
    args = parse_json(text, field)
    if not isinstance(args, dict):
        raise FormError(field, f"{call.name}: the arguments must be a JSON object.")
    problems = schema_errors(args, call.args_schema)
    if problems:
        raise FormError(field, f"{call.name}: " + "; ".join(problems) + ".")
    return args


def reason_of(text: str | None, field: str = "reason") -> str:
    """A rejection reason: required, trimmed, at most 2,000 characters."""
    reason = (text or "").strip()
    if not reason:
        raise FormError(field, "Say why you reject it (the agent reads the reason).")
    if len(reason) > MAX_REASON:
        raise FormError(field, f"The reason is too long (at most {MAX_REASON} characters).")
    return reason


def decisions_from(post: Any, calls: list[WaitingCall], button: str) -> list[dict[str, Any]]:
    """The HITL decisions for the button pressed, each bound to the call's ``digest``
    (the arguments the operator saw), so a decision cannot apply to other arguments."""
    decisions = _decisions(post, calls, button)
    for call, decision in zip(calls, decisions, strict=True):
        if call.digest:
            decision["digest"] = call.digest
    return decisions


def _decisions(post: Any, calls: list[WaitingCall], button: str) -> list[dict[str, Any]]:
    """The HITL decisions (contract 4, in request order) for the button pressed.

    ``approve``: every call approved. ``reject``: every call rejected with ``reason``.
    ``edit``: the first call approved with ``args-0`` (the others approved).
    ``decide``: per call, ``decision-<i>`` = approve | reject | edit with ``reason-<i>``
    or ``args-<i>``.
    """
    if not calls:
        raise FormError("decision", "Nothing is waiting for a decision here.")
    kind = {"approve": "approve", "reject": "reject", "edit": "edit"}.get(button)
    refused = [c.name for c in calls if kind and kind not in c.allowed]
    if refused:
        # The request's allowed_decisions: a button the page did not show is refused.
        raise FormError("decision", f"{refused[0]}: '{kind}' is not allowed for this tool.")
    if button == "approve":
        return [{"type": "approve"} for _ in calls]
    if button == "reject":
        reason = reason_of(post.get("reason"))
        return [{"type": "reject", "message": reason} for _ in calls]
    if button == "edit":
        first = calls[0]
        args = edited_args(post.get(f"args-{first.index}", ""), first)
        return [{"type": "edit", "edited_action": {"name": first.name, "args": args}}] + [
            {"type": "approve"} for _ in calls[1:]
        ]
    out: list[dict[str, Any]] = []
    for call in calls:
        choice = post.get(f"decision-{call.index}", "")
        if choice not in ("approve", "reject", "edit"):
            raise FormError(
                f"decision-{call.index}", f"{call.name}: choose approve, edit or reject."
            )
        if choice not in call.allowed:
            raise FormError(
                f"decision-{call.index}", f"{call.name}: '{choice}' is not allowed for this tool."
            )
        if choice == "approve":
            out.append({"type": "approve"})
        elif choice == "reject":
            reason = reason_of(post.get(f"reason-{call.index}"), f"reason-{call.index}")
            out.append({"type": "reject", "message": reason})
        else:
            args = edited_args(post.get(f"args-{call.index}", ""), call)
            out.append({"type": "edit", "edited_action": {"name": call.name, "args": args}})
    return out
