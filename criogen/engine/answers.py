"""Typed answers: what a workflow's ``suspend()`` says it expects, and the check of an
answer against it.

A node may declare ``choices`` (a list of values, or ``{label: value}``) and/or a
``schema`` (JSON Schema). An answer fits when it is one of the choices or, with a
schema, when the schema accepts it. The check runs where every door passes (the
thread's ``check_answer``, called before a run is created, and ``resume``), so a value
the step does not take is refused by name instead of taking another branch.

The schema is checked with this module's subset of JSON Schema, the one the dashboard
renders as a form: ``type`` (string, number, integer, boolean, object, array, null, or a
list of them), ``enum``, ``const``, ``properties``, ``required``,
``additionalProperties: false``, ``items``, ``minLength`` / ``maxLength``,
``minimum`` / ``maximum``, ``title`` and ``description`` (shown, not checked). Other
keywords are refused when ``suspend()`` is called, so no rule is silently ignored.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from criogen.engine.errors import InvalidArgument

__all__ = [
    "SCHEMA_KEYWORDS",
    "check_declaration",
    "check_schema",
    "check_typed_answer",
    "check_typed_answers",
    "choice_items",
    "first_problem",
]

SCHEMA_KEYWORDS = frozenset(
    {
        "type",
        "enum",
        "const",
        "properties",
        "required",
        "additionalProperties",
        "items",
        "minLength",
        "maxLength",
        "minimum",
        "maximum",
        "title",
        "description",
        "default",
    }
)
"""The JSON Schema keywords a suspension's ``schema`` may use."""

_TYPES = ("string", "number", "integer", "boolean", "object", "array", "null")


def choice_items(choices: Any) -> list[tuple[str, Any]]:
    """``(label, value)`` per declared choice: a list labels each value by itself (its
    JSON text when it is not a string); a mapping is ``{label: value}``."""
    if isinstance(choices, Mapping):
        return [(str(label), value) for label, value in choices.items()]
    if isinstance(choices, list):
        return [
            (value if isinstance(value, str) else json.dumps(value, ensure_ascii=False), value)
            for value in choices
        ]
    return []


def check_declaration(choices: Any, schema: Any) -> None:
    """Refuse a ``suspend(choices=…, schema=…)`` this module could not check."""
    if choices is not None and (
        not isinstance(choices, list | Mapping) or not choices or isinstance(choices, str)
    ):
        raise InvalidArgument(
            "suspend(choices=...) must be a non-empty list of values or {label: value}.",
            field="choices",
        )
    if schema is not None:
        check_schema(schema, "schema")


def check_schema(schema: Any, path: str, who: str = "suspend()") -> None:
    """Refuse a JSON Schema that uses keywords this module does not check; ``who``
    names the declaration in the message (``suspend()``, ``Workflow(state_schema=...)``)."""
    if not isinstance(schema, Mapping):
        raise InvalidArgument(f"{who}: {path} must be a JSON Schema object.", field=path)
    unknown = sorted(set(schema) - SCHEMA_KEYWORDS)
    if unknown:
        raise InvalidArgument(
            f"{who}: {path} uses {', '.join(unknown)}, which Criogen does not check; "
            f"use only {', '.join(sorted(SCHEMA_KEYWORDS))}.",
            field=path,
        )
    kinds = schema.get("type")
    for kind in kinds if isinstance(kinds, list) else [kinds] if kinds is not None else []:
        if kind not in _TYPES:
            raise InvalidArgument(f"{who}: {path}.type {kind!r} is not a JSON type.", field=path)
    for name, sub in (schema.get("properties") or {}).items():
        check_schema(sub, f"{path}.properties.{name}", who)
    if "items" in schema:
        check_schema(schema["items"], f"{path}.items", who)


def check_typed_answers(
    interrupts: list[dict[str, Any]] | tuple[dict[str, Any], ...],
    value: Any,
    field: str = "command.resume",
) -> None:
    """Check ``value``, a resume of the pending ``interrupts``, against what each
    declared: the value itself with one pending, ``value[interrupt_id]`` with several."""
    if len(interrupts) == 1:
        check_typed_answer(interrupts[0], value, field)
        return
    if not isinstance(value, Mapping):
        return  # refused by name elsewhere: several pending take {interrupt_id: value}
    for interrupt in interrupts:
        if interrupt.get("id") in value:
            check_typed_answer(interrupt, value[interrupt["id"]], f"{field}.{interrupt['id']}")


def check_typed_answer(interrupt: Mapping[str, Any], value: Any, field: str) -> None:
    """Raise InvalidArgument (``field`` naming where, e.g. ``command.resume.note``) when
    ``value`` is neither one of the interrupt's ``choices`` nor accepted by its
    ``schema``. An interrupt that declares neither takes any value."""
    choices = interrupt.get("choices")
    schema = interrupt.get("schema")
    if choices is None and schema is None:
        return
    items = choice_items(choices)
    if any(_same(value, option) for _, option in items):
        return
    if isinstance(schema, Mapping):
        problem = first_problem(value, schema, field)
        if problem is None:
            return
        where, message = problem
        raise InvalidArgument(f"{where} {message}.", field=where)
    options = ", ".join(json.dumps(option, ensure_ascii=False) for _, option in items)
    raise InvalidArgument(
        f"{field} must be one of {options}; got {json.dumps(value, ensure_ascii=False)}.",
        field=field,
    )


def first_problem(value: Any, schema: Mapping[str, Any], path: str) -> tuple[str, str] | None:
    """Where ``value`` first breaks ``schema`` and why, or None when it fits."""
    if "const" in schema and not _same(value, schema["const"]):
        return path, f"must be {json.dumps(schema['const'])}"
    if "enum" in schema and not any(_same(value, option) for option in schema["enum"]):
        options = ", ".join(json.dumps(option, ensure_ascii=False) for option in schema["enum"])
        return path, f"must be one of {options}"
    kinds = schema.get("type")
    kinds = kinds if isinstance(kinds, list) else [kinds] if kinds is not None else []
    if (
        kinds
        and _json_type(value) not in kinds
        and not ("number" in kinds and _json_type(value) == "integer")
    ):
        return path, f"must be {' or '.join(_article(k) for k in kinds)}"
    if isinstance(value, str):
        if len(value) < schema.get("minLength", 0):
            if schema["minLength"] == 1:
                return path, "must not be empty"
            return path, f"must have at least {schema['minLength']} characters"
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            return path, f"must have at most {schema['maxLength']} characters"
    if _json_type(value) in ("integer", "number"):
        if not math.isfinite(value):
            return path, "must be a finite number"
        if "minimum" in schema and value < schema["minimum"]:
            return path, f"must be at least {schema['minimum']}"
        if "maximum" in schema and value > schema["maximum"]:
            return path, f"must be at most {schema['maximum']}"
    if isinstance(value, Mapping):
        properties = schema.get("properties") or {}
        for name in schema.get("required") or []:
            if name not in value:
                return f"{path}.{name}", "is required"
        for name, item in value.items():
            if name in properties:
                problem = first_problem(item, properties[name], f"{path}.{name}")
                if problem:
                    return problem
            elif schema.get("additionalProperties") is False:
                known = ", ".join(properties) or "none"
                return f"{path}.{name}", f"is not expected (expected: {known})"
    if isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        for index, item in enumerate(value):
            problem = first_problem(item, schema["items"], f"{path}[{index}]")
            if problem:
                return problem
    return None


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "integer" if value.is_integer() else "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list | tuple):
        return "array"
    if isinstance(value, Mapping):
        return "object"
    return type(value).__name__


def _same(a: Any, b: Any) -> bool:
    """JSON equality: ``True`` is not ``1``, ``1`` is ``1.0``."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return set(a) == set(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def _article(kind: str) -> str:
    return {"integer": "an integer", "array": "an array", "object": "an object"}.get(
        kind, "null" if kind == "null" else f"a {kind}"
    )
