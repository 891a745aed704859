"""Typed answers: what a workflow's ``suspend()`` says it expects, and the check of an
answer against it.

A node may declare ``choices`` (a list of values, or ``{label: value}``) and/or a
``schema`` (JSON Schema). An answer fits when it is one of the choices or, with a
schema, when the schema accepts it. The check runs where every door passes (the
thread's ``check_answer``, called before a run is created, and ``resume``), so a value
the step does not take is refused by name instead of taking another branch.

The schema is checked by :mod:`criogen.engine.json_schema` (the checker of tool
arguments too), strictly, within the subset the dashboard renders as a form: ``type`` (string, number, integer, boolean, object, array, null, or a
list of them), ``enum``, ``const``, ``properties``, ``required``,
``additionalProperties`` (``false`` or a schema), ``items``, ``minLength`` / ``maxLength``,
``minimum`` / ``maximum``, ``title`` and ``description`` (shown, not checked). Other
keywords are refused when ``suspend()`` is called, so no rule is silently ignored.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from criogen.engine.errors import InvalidArgument
from criogen.engine.json_schema import Problem, SchemaProblem, path_text, same
from criogen.engine.json_schema import check as check_value

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
    if isinstance(schema.get("additionalProperties"), Mapping):
        check_schema(schema["additionalProperties"], f"{path}.additionalProperties", who)


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
    if any(same(value, option) for _, option in items):
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
    """Where ``value`` first breaks ``schema`` and why (``path`` names the value, e.g.
    ``command.resume``), or None when it fits. Strict: ``"5"`` is no number here."""
    try:
        check_value(schema, value)
    except SchemaProblem as exc:
        problem = exc.problem
        return path_text(path, problem.path), _wording(problem)
    return None


def _wording(problem: Problem) -> str:
    """What is wrong, for the person answering (the form shows it by the field)."""
    schema = problem.schema
    if problem.kind == "enum":
        options = ", ".join(json.dumps(option, ensure_ascii=False) for option in schema["enum"])
        return f"must be one of {options}"
    if problem.kind == "type":
        kinds = schema.get("type")
        kinds = kinds if isinstance(kinds, list) else [kinds]
        return f"must be {' or '.join(_article(str(k)) for k in kinds)}"
    if problem.kind == "min_length" and schema["minLength"] == 1:
        return "must not be empty"
    if problem.kind == "unexpected":
        known = ", ".join(schema.get("properties") or {}) or "none"
        return f"is not expected (expected: {known})"
    words = _WORDS.get(problem.kind, "is not a valid answer")  # (a non-string key: not JSON)
    return words.format(**{key: json.dumps(value) for key, value in schema.items()})


_WORDS = {
    "const": "must be {const}",
    "min_length": "must have at least {minLength} characters",
    "max_length": "must have at most {maxLength} characters",
    "finite": "must be a finite number",
    "minimum": "must be at least {minimum}",
    "maximum": "must be at most {maximum}",
    "required": "is required",
}
"""The wording of the problems whose words only take the schema's own values."""


def _article(kind: str) -> str:
    return {"integer": "an integer", "array": "an array", "object": "an object"}.get(
        kind, "null" if kind == "null" else f"a {kind}"
    )
