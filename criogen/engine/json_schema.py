"""The one check of a JSON value against a JSON Schema, for tool arguments and typed
answers alike.

It knows the subset of JSON Schema both use: ``type`` (a JSON type or a list of them),
``enum``, ``const``, ``anyOf``, ``properties``, ``required``, ``additionalProperties``
(``false`` or a schema), ``items``, ``minLength`` / ``maxLength`` and ``minimum`` /
``maximum``; other keywords are not checked (the callers say which they accept). It
finds the first problem and where it is (:class:`Problem`); each caller words it for
its reader: :mod:`criogen.engine.tools` for the model that made a call,
:mod:`criogen.engine.answers` for the person answering a suspension.

JSON's rules, not Python's: ``True`` is not ``1``, ``1`` is ``1.0``, an integral float
is an integer, a non-finite float is no number.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["Problem", "SchemaProblem", "check", "json_type", "path_text", "same"]

ProblemKind = Literal[
    "type",  # not of the schema's type(s), or of none of its anyOf arms
    "enum",
    "const",
    "required",  # the path names the missing property
    "unexpected",  # a property additionalProperties: false does not allow
    "key",  # an object key that is not a string (Python values only)
    "finite",
    "min_length",
    "max_length",
    "minimum",
    "maximum",
]


@dataclass(frozen=True)
class Problem:
    """Where a value first breaks a schema, and how."""

    kind: ProblemKind
    """Which rule it breaks."""
    path: tuple[str | int, ...]
    """Property names and array indexes from the checked value down to the culprit."""
    schema: Mapping[str, Any]
    """The (sub)schema broken: for ``required`` and ``unexpected``, the object's."""
    value: Any
    """The value at ``path`` (for ``key``, the key)."""


class SchemaProblem(Exception):  # noqa: N818 - internal, carries a Problem
    """Raised by :func:`check`; ``problem`` says what and where."""

    def __init__(self, problem: Problem) -> None:
        super().__init__(problem.kind)
        self.problem = problem


def json_type(value: Any) -> str:
    """The JSON type name of ``value`` (``integer`` for an int, ``number`` for a
    float), or its Python type's name when it is no JSON value."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list | tuple):
        return "array"
    if isinstance(value, Mapping):
        return "object"
    return type(value).__name__


def same(a: Any, b: Any) -> bool:
    """JSON equality: ``True`` is not ``1``, ``1`` is ``1.0``."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return set(a) == set(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def path_text(root: str, path: tuple[str | int, ...]) -> str:
    """``root`` followed by ``path``: ``.name`` per property, ``[i]`` per index (no
    leading dot when ``root`` is empty)."""
    text = root
    for step in path:
        if isinstance(step, int):
            text += f"[{step}]"
        else:
            text = f"{text}.{step}" if text else step
    return text


def check(schema: Mapping[str, Any], value: Any, *, lenient: bool = False) -> Any:
    """``value`` cleaned if it fits ``schema``: a number where the schema says
    ``number`` is a float, an integral float where it says ``integer`` an int, arrays
    are lists. With ``lenient``, a string that spells the number or boolean the schema
    asks for is taken as that (``"5"``, ``"yes"``), as a person typing in a text box
    sends it.

    Raises:
        SchemaProblem: the first problem, depth first, an object's missing properties
            before its others.
    """
    return _check(schema, value, (), lenient)


def _fail(kind: ProblemKind, path: tuple[str | int, ...], schema: Any, value: Any) -> SchemaProblem:
    return SchemaProblem(Problem(kind, path, schema, value))


def _check(
    schema: Mapping[str, Any], value: Any, path: tuple[str | int, ...], lenient: bool
) -> Any:
    if "anyOf" in schema:
        return _any_of(schema, value, path, lenient)
    if "const" in schema and not same(value, schema["const"]):
        raise _fail("const", path, schema, value)
    if "enum" in schema and not any(same(value, option) for option in schema["enum"]):
        raise _fail("enum", path, schema, value)
    kinds = _kinds(schema)
    if kinds:
        value = _typed(schema, kinds, value, path, lenient)
    kind = json_type(value)
    if kind == "number" and not math.isfinite(value):
        raise _fail("finite", path, schema, value)
    if kind == "string":
        if len(value) < schema.get("minLength", 0):
            raise _fail("min_length", path, schema, value)
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            raise _fail("max_length", path, schema, value)
    if kind in ("integer", "number"):
        if "minimum" in schema and value < schema["minimum"]:
            raise _fail("minimum", path, schema, value)
        if "maximum" in schema and value > schema["maximum"]:
            raise _fail("maximum", path, schema, value)
    if kind == "object":
        return _object(schema, value, path, lenient)
    if kind == "array":
        items = schema.get("items")
        if not isinstance(items, Mapping):
            return list(value)
        return [_check(items, item, (*path, i), lenient) for i, item in enumerate(value)]
    return value


def _kinds(schema: Mapping[str, Any]) -> list[str]:
    kinds = schema.get("type")
    return kinds if isinstance(kinds, list) else [kinds] if isinstance(kinds, str) else []


def _typed(
    schema: Mapping[str, Any],
    kinds: list[str],
    value: Any,
    path: tuple[str | int, ...],
    lenient: bool,
) -> Any:
    """``value`` as one of ``kinds``, or raise the ``type`` problem."""
    if lenient and isinstance(value, str) and "string" not in kinds:
        for kind in kinds:
            value = _from_text(kind, value)
    actual = json_type(value)
    if actual in kinds:
        return value
    if actual == "integer" and "number" in kinds:
        return float(value)
    if actual == "number" and "integer" in kinds and math.isfinite(value) and value.is_integer():
        return int(value)
    raise _fail("type", path, schema, value)


def _object(
    schema: Mapping[str, Any], value: Mapping[Any, Any], path: tuple[str | int, ...], lenient: bool
) -> dict[str, Any]:
    for name in schema.get("required") or []:
        if name not in value:
            raise _fail("required", (*path, name), schema, None)
    properties: Mapping[str, Any] = schema.get("properties") or {}
    extra = schema.get("additionalProperties", True)
    out: dict[str, Any] = {}
    for key, item in value.items():
        if not isinstance(key, str):
            raise _fail("key", path, schema, key)
        if key in properties:
            out[key] = _check(properties[key], item, (*path, key), lenient)
        elif extra is False:
            raise _fail("unexpected", (*path, key), schema, item)
        elif isinstance(extra, Mapping):
            out[key] = _check(extra, item, (*path, key), lenient)
        else:
            out[key] = item
    return out


def _any_of(
    schema: Mapping[str, Any], value: Any, path: tuple[str | int, ...], lenient: bool
) -> Any:
    arms = schema["anyOf"]
    problems: list[SchemaProblem] = []
    for arm in arms:
        try:
            return _check(arm, value, path, lenient)
        except SchemaProblem as exc:
            problems.append(exc)
    # When one arm has the value's JSON type (the list in `list[Item] | None`), its
    # problem is the precise one ("items[0].qty is required"), better than "X or Y".
    fitting = [p for arm, p in zip(arms, problems, strict=True) if _type_fits(arm, value)]
    if len(fitting) == 1:
        raise fitting[0]
    raise _fail("type", path, schema, value)


def _type_fits(schema: Mapping[str, Any], value: Any) -> bool:
    """Whether ``value`` has the JSON type ``schema`` declares (ignoring the rest)."""
    kinds = _kinds(schema)
    actual = json_type(value)
    return actual in kinds or ("number" in kinds and actual == "integer")


_INTEGER_TEXT = re.compile(r"[+-]?\d+")
_NUMBER_TEXT = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")
_BOOLEAN_TEXT = {
    "true": True, "t": True, "yes": True, "y": True, "on": True, "1": True,
    "false": False, "f": False, "no": False, "n": False, "off": False, "0": False,
}  # fmt: skip


def _from_text(kind: str, text: Any) -> Any:
    """``text`` as the JSON type ``kind`` when it spells one, else unchanged."""
    if not isinstance(text, str):
        return text
    word = text.strip()
    if kind == "integer" and _INTEGER_TEXT.fullmatch(word):
        return int(word)
    if kind == "number" and _NUMBER_TEXT.fullmatch(word):
        number = float(word)
        return number if math.isfinite(number) else text
    if kind == "boolean" and word.lower() in _BOOLEAN_TEXT:
        return _BOOLEAN_TEXT[word.lower()]
    return text
