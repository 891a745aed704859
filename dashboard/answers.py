"""Typed answers in the dashboard: a suspension's ``choices`` as buttons and its
``schema`` as a small form, and the form read back into the value. A workflow's
declared ``state_schema`` is shown by the same form (``state_form``) to edit the state.

The value is checked by the engine (``criogen.engine.answers``, through the one
answering service) like any door's; this module only turns form fields into JSON and
says which field a refusal names, so the page shows the error next to it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from criogen.engine.answers import choice_items
from dashboard.forms import FormError

__all__ = [
    "AnswerForm",
    "FormField",
    "answer_form",
    "field_of",
    "form_field_for",
    "keep_typed",
    "read_answer",
    "read_state",
    "state_form",
]

TEXTAREA_OVER = 200
"""A string field without ``maxLength``, or with one above this, is free text: a textarea."""
RADIOS_UP_TO = 4
"""An enum with at most this many options shows radio buttons; more, a select."""


@dataclass
class FormField:
    """One field of the form: a property of an object schema, or the whole value."""

    name: str
    """The POST name, ``answer.<property>`` (``answer`` for a schema that is not an object)."""
    key: str | None
    """The property (None: the field is the whole answer)."""
    label: str
    widget: str
    """``text``, ``textarea``, ``number``, ``checkbox``, ``radio``, ``select``, ``json``."""
    schema: dict[str, Any]
    required: bool = False
    description: str = ""
    options: list[tuple[str, str]] = field(default_factory=list)
    """``(index, label)`` of an enum's options."""
    value: str = ""
    """What the field shows: typed text kept after a refusal, or the default."""
    error: str = ""
    engine_path: str = ""
    """What the engine calls this field in its refusals (``command.resume.note``,
    ``values.fail``); empty: ``command.resume`` and the key."""
    merged: bool = False
    """A state key with a reducer: what is typed is merged into its value (appended…)."""

    @property
    def dom_id(self) -> str:
        return "f-" + self.name.replace(".", "-")

    @property
    def step(self) -> str:
        return "1" if self.schema.get("type") == "integer" else "any"


@dataclass
class AnswerForm:
    """What a workflow's suspension expects, ready to render."""

    choices: list[tuple[str, str]]
    """``(index, label)`` per declared choice, a button each."""
    fields: list[FormField]
    error: str = ""
    """A refusal that names no single field."""

    @property
    def typed(self) -> bool:
        return bool(self.choices or self.fields)

    @property
    def claimed(self) -> bool:
        """A refusal is shown in this form (next to a field, or under it)."""
        return bool(self.error or any(f.error for f in self.fields))


def answer_form(interrupt: Mapping[str, Any] | None) -> AnswerForm:
    """The buttons and fields a suspension declared (none: an untyped suspension)."""
    if not interrupt:
        return AnswerForm([], [])
    choices = [
        (str(i), label) for i, (label, _) in enumerate(choice_items(interrupt.get("choices")))
    ]
    schema = interrupt.get("schema")
    fields: list[FormField] = []
    if isinstance(schema, Mapping):
        properties = schema.get("properties")
        if schema.get("type") in (None, "object") and isinstance(properties, Mapping):
            required = set(schema.get("required") or [])
            for key, sub in properties.items():
                fields.append(form_field_for(f"answer.{key}", key, dict(sub), key in required))
        else:
            fields.append(form_field_for("answer", None, dict(schema), True))
    return AnswerForm(choices, fields)


def form_field_for(name: str, key: str | None, schema: dict[str, Any], required: bool) -> FormField:
    """The widget for one schema: enums choose, booleans tick, numbers count, strings type."""
    label = str(schema.get("title") or key or "Answer")
    kind = schema.get("type")
    widget = "json"
    options: list[tuple[str, str]] = []
    if "enum" in schema:
        options = [
            (str(i), o if isinstance(o, str) else json.dumps(o))
            for i, o in enumerate(schema["enum"])
        ]
        widget = "radio" if len(options) <= RADIOS_UP_TO else "select"
    elif kind == "boolean":
        widget = "checkbox"
    elif kind in ("number", "integer"):
        widget = "number"
    elif kind == "string":
        limit = schema.get("maxLength")
        widget = "text" if isinstance(limit, int) and limit <= TEXTAREA_OVER else "textarea"
    value = ""
    if "default" in schema:
        default = schema["default"]
        if widget == "radio" or widget == "select":
            value = next((str(i) for i, o in enumerate(schema["enum"]) if o == default), "")
        elif widget == "checkbox":
            value = "on" if default is True else ""
        elif widget in ("text", "textarea") and isinstance(default, str):
            value = default
        else:
            value = json.dumps(default)
    return FormField(
        name=name,
        key=key,
        label=label,
        widget=widget,
        schema=schema,
        required=required,
        description=str(schema.get("description") or ""),
        options=options,
        value=value,
    )


def read_answer(post: Any, form: AnswerForm, interrupt: Mapping[str, Any]) -> Any:
    """The value the operator answers with: a choice's (button ``choice=<i>``) or the
    form's fields as JSON. Text that is not what a field takes (a number field with
    letters) is a FormError naming the field; everything else the engine checks."""
    if "choice" in post:
        items = choice_items(interrupt.get("choices"))
        raw = post.get("choice", "")
        if not raw.isdigit() or int(raw) >= len(items):
            raise FormError("choice", "Unknown choice: press one of the buttons.")
        return items[int(raw)][1]
    whole = next((f for f in form.fields if f.key is None), None)
    if whole is not None:
        return _field_value(post, whole)
    value: dict[str, Any] = {}
    for f in form.fields:
        item = _field_value(post, f)
        if item is _MISSING:
            continue
        value[f.key or ""] = item
    return value


_MISSING: Any = object()


def _field_value(post: Any, f: FormField) -> Any:
    text = post.get(f.name, "")
    if f.widget == "checkbox":
        return f.name in post
    if f.widget in ("radio", "select"):
        if text == "":
            return _MISSING if f.key is not None else None
        if not text.isdigit() or int(text) >= len(f.schema["enum"]):
            raise FormError(f.name, f"{f.label}: choose one of the options.")
        return f.schema["enum"][int(text)]
    if f.widget == "number":
        if text.strip() == "":
            return _MISSING if f.key is not None else None
        try:
            number = float(text)
        except ValueError:
            raise FormError(f.name, f"{f.label} must be a number.") from None
        if f.schema.get("type") == "integer":
            if not number.is_integer():
                raise FormError(f.name, f"{f.label} must be a whole number.")
            return int(number)
        return int(number) if number.is_integer() else number
    if f.widget in ("text", "textarea"):
        if text == "" and f.key is not None and not f.required:
            return _MISSING
        return text
    if text.strip() == "":
        return _MISSING if f.key is not None else None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise FormError(f.name, f"{f.label}: not valid JSON ({exc}).") from None


def field_of(engine_field: str) -> str:
    """The form field an engine refusal names: ``command.resume.note`` → ``answer.note``."""
    prefix = "command.resume"
    if engine_field == prefix:
        return "answer"
    if engine_field.startswith(prefix + "."):
        return "answer." + engine_field[len(prefix) + 1 :]
    return engine_field or "answer"


def _in_words(message: str, f: FormField) -> str:
    """``command.resume.note must not be empty.`` → ``Note must not be empty.``"""
    path = f.engine_path or "command.resume" + (f".{f.key}" if f.key else "")
    if message.startswith(path) and message[len(path) : len(path) + 1] in (" ", "[", "."):
        return f.label + message[len(path) :]
    return message


def keep_typed(form: AnswerForm, post: Any, error: FormError | None) -> None:
    """Put back what the operator typed, and the error next to its field."""
    for f in form.fields:
        if f.widget == "checkbox":
            f.value = "on" if f.name in post else ""
        else:
            f.value = post.get(f.name, "")
        if error is not None and (
            error.field == f.name or error.field.startswith((f.name + ".", f.name + "["))
        ):
            f.error = _in_words(error.message, f)
    if error is not None and not any(f.error for f in form.fields):
        form.error = error.message


def state_form(
    schema: Mapping[str, Any] | None,
    state: Mapping[str, Any],
    reducers: Mapping[str, Any] | None = None,
) -> AnswerForm | None:
    """The form of a workflow's declared state schema, filled with ``state``; None when
    there is no schema or it is not an object with properties (the JSON box then).

    A key with a reducer (``append``…) starts empty: what is typed there is merged
    into its value by the reducer, as a node's update is (shown in full, it would be
    appended to itself)."""
    if not isinstance(schema, Mapping) or schema.get("type") not in (None, "object"):
        return None
    properties = schema.get("properties")
    if not isinstance(properties, Mapping) or not properties:
        return None
    required = set(schema.get("required") or [])
    fields = []
    for key, sub in properties.items():
        f = form_field_for(f"values.{key}", key, dict(sub), key in required)
        f.engine_path = f"values.{key}"
        reducer = (reducers or {}).get(key, "overwrite")
        if reducer != "overwrite":
            how = "appended to it" if reducer == "append" else "merged into it"
            f.description = f"What you type is {how}, as a step's update is. " + f.description
            f.value = ""
            f.required = False
            f.merged = True
        elif key in state:
            f.value = _shown(f, state[key])
        fields.append(f)
    return AnswerForm([], fields)


def _shown(f: FormField, value: Any) -> str:
    """A state value as its field shows it."""
    if f.widget in ("radio", "select"):
        options = f.schema["enum"]
        return next((str(i) for i, o in enumerate(options) if _same_json(o, value)), "")
    if f.widget == "checkbox":
        return "on" if value is True else ""
    if f.widget in ("text", "textarea") and isinstance(value, str):
        return value
    if f.widget == "number" and isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return json.dumps(value, ensure_ascii=False, indent=1 if f.widget == "json" else None)


def read_state(post: Any, form: AnswerForm, state: Mapping[str, Any]) -> dict[str, Any]:
    """The keys to change: the form's fields (read as an answer's are) whose value
    differs from ``state``, and what was typed for a key with a reducer; a field left
    empty changes nothing."""
    values = read_answer(post, form, {})
    merged = {f.key for f in form.fields if f.merged}
    changed = {}
    for key, value in values.items():
        if key not in merged and key in state and _same_json(state[key], value):
            continue
        if key not in state and value is False:
            continue  # an unticked box for a key the state lacks: nothing to say
        changed[key] = value
    return changed


def _same_json(a: Any, b: Any) -> bool:
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
