"""State: a JSON object with string keys, merged after each step by per-key reducers.

A node returns the keys it changes. Each key has a reducer: ``overwrite`` (the
default), ``append`` (lists grow), or a callable ``(old, new) -> value``. What a step
changed is kept as a :class:`Delta`, so storage writes only what changed: an
overwritten key stores its new value once, an appended key stores only the new items.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from json.encoder import encode_basestring
from typing import Any, Literal

from criogen.engine.errors import InvalidArgument, InvalidState

__all__ = [
    "Change",
    "Delta",
    "Reducer",
    "Reducers",
    "CheckedUpdate",
    "apply_update",
    "check_json",
    "check_update",
    "compose",
    "encode",
]

Reducer = Literal["overwrite", "append"] | Callable[[Any, Any], Any]
Reducers = Mapping[str, Reducer]

_JSON_SCALARS = (str, int, float, bool, type(None))
MAX_KEY_LENGTH = 255
"""The longest top-level state key (storage keeps keys in a 255-character column)."""


@dataclass(frozen=True, slots=True)
class Change:
    """What one step did to one key."""

    op: Literal["set", "append"]
    """``set``: the key now holds ``value``; ``append``: ``value`` (a list) was added."""
    value: Any
    """The new value (``set``) or the appended items (``append``); plain JSON."""
    text: str | None = field(default=None, compare=False, repr=False)
    """``encode(value)`` when the merge already made it (storage writes it as is)."""


Delta = dict[str, Change]
"""Key -> what changed; keys that did not change are absent."""


_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)
_c_make_encoder: Callable[..., Any] | None = getattr(json.encoder, "c_make_encoder", None)
"""The json module's C encoder (CPython has it; without it, the Python encoder)."""


def encode(value: Any) -> str:
    """JSON text of a (validated) state value, compact and deterministic.

    The text of ``json.dumps(value, separators=(",", ":"), ensure_ascii=False,
    allow_nan=False)``, without its per-call Python: ``dumps`` builds a new encoder
    for every call with options, and that encoder a new C encoder; this builds only
    the C one (a fresh one per call: it keeps the circular-reference markers).
    """
    kind = type(value)
    if kind is str:
        return encode_basestring(value)
    # The scalars' texts as the C encoder writes them (int.__repr__, float.__repr__,
    # the three constants), without building an encoder: a node's update is mostly
    # small scalars. A NaN or an infinity goes on to the encoder, which refuses it.
    if kind is int:
        return int.__repr__(value)
    if kind is bool:
        return "true" if value else "false"
    if value is None:
        return "null"
    if kind is float and math.isfinite(value):
        return float.__repr__(value)
    if _c_make_encoder is None:  # pragma: no cover
        return _ENCODER.encode(value)
    return "".join(
        _c_make_encoder(
            {}, _ENCODER.default, encode_basestring, None, ":", ",", False, False, False
        )(value, 0)
    )


_scan: Callable[[str, int], tuple[Any, int]] = json.decoder.JSONDecoder().scan_once  # type: ignore[attr-defined]
"""The json module's scanner (its C one in CPython): ``(value, end)`` of the JSON text
at an index. The texts it reads here come from :func:`encode`: one value, nothing after
it, so what ``json.loads`` adds (whitespace, trailing data) is not needed."""

_IMMUTABLE_SCALARS = frozenset({str, int, float, bool, type(None)})
"""Exact types whose JSON text decodes to an equal value of the same type (a float only
when finite: encode refuses NaN and the infinities)."""


def json_copy(value: Any, where: str) -> tuple[Any, str]:
    """A private copy of ``value`` and its JSON text; InvalidState unless plain JSON.

    One encode and one decode, both in C: the copy equals the value exactly when the
    value is plain JSON (a tuple, a non-string key or a NaN would not come back the
    same, or would not encode); only then does the walk in :func:`check_json` run, to
    name what is wrong. The text is what storage writes, so a value is encoded once.
    A str, int, float, bool or None (not a subclass) is its own copy: it cannot change,
    and its text decodes to an equal value, so only the encode runs.
    """
    copied = _json_copy(value)
    if copied is not None:
        return copied
    check_json(value, where)
    raise InvalidState(
        f"{where} does not survive a JSON round trip unchanged; use plain str, int, "
        "float, bool, None, list and dict.",
        key=where,
    )


def _json_copy(value: Any) -> tuple[Any, str] | None:
    """:func:`json_copy`, or None where it would raise (its ``where`` is then built)."""
    try:
        text = encode(value)
        if type(value) in _IMMUTABLE_SCALARS:
            return value, text
        copy = _scan(text, 0)[0]  # json.loads(text), without its Python layers
    except (TypeError, ValueError, RecursionError, StopIteration):
        return None
    return (copy, text) if copy == value else None


def check_json(value: Any, where: str) -> None:
    """Raise :class:`InvalidState` unless ``value`` is plain JSON (no NaN, string keys).

    ``where`` names the key in the message, e.g. ``state['steps'][2]``.
    """
    if isinstance(value, _JSON_SCALARS):
        if isinstance(value, float) and not math.isfinite(value):
            raise InvalidState(
                f"{where} is {value!r}: JSON has no NaN or Infinity; store null or a string.",
                key=where,
            )
        return
    if isinstance(value, list):
        for i, item in enumerate(value):
            check_json(item, f"{where}[{i}]")
        return
    if isinstance(value, dict):
        for k, item in value.items():
            if not isinstance(k, str):
                raise InvalidState(
                    f"{where} has the key {k!r} of type {type(k).__name__}: "
                    "state keys must be strings.",
                    key=where,
                )
            check_json(item, f"{where}[{k!r}]")
        return
    raise InvalidState(
        f"{where} is a {type(value).__name__}, which is not JSON: "
        "use str, int, float, bool, None, list or dict.",
        key=where,
    )


def check_reducers(reducers: Reducers) -> dict[str, Reducer]:
    """Validate a reducers mapping given to Workflow/Agent; return a copy."""
    checked: dict[str, Reducer] = {}
    for key, reducer in reducers.items():
        if not isinstance(key, str):
            raise InvalidArgument(f"reducer key {key!r} must be a string.", field="reducers")
        if reducer not in ("overwrite", "append") and not callable(reducer):
            raise InvalidArgument(
                f"reducers[{key!r}] is {reducer!r}: use 'overwrite', 'append' or a callable "
                "(old, new) -> value.",
                field="reducers",
            )
        checked[key] = reducer
    return checked


class CheckedUpdate(dict[str, tuple[Any, str]]):
    """An update that :func:`check_update` validated: key -> (private copy, JSON text).

    :func:`apply_update` takes it as it is, so input checked before a run takes its
    thread is not checked, copied and encoded a second time.
    """


def check_update(update: Any, *, origin: str) -> CheckedUpdate | None:
    """Validate ``update`` (a JSON object with string keys, or None) and copy it.

    ``origin`` names who produced it (a node name, ``input``) for error messages.
    Raises :class:`InvalidState` when it is not a mapping of plain JSON values.
    """
    if update is None or isinstance(update, CheckedUpdate):
        return update
    if type(update) is not dict and not isinstance(update, Mapping):
        raise InvalidState(
            f"{origin} returned a {type(update).__name__}; return a dict of the state keys "
            "it changes (or None).",
            origin=origin,
        )
    for key in update:
        if type(key) is str and len(key) <= MAX_KEY_LENGTH:
            continue  # the usual key: nothing to say
        if not isinstance(key, str):
            raise InvalidState(
                f"{origin} returned the key {key!r} of type {type(key).__name__}: "
                "state keys must be strings.",
                key=repr(key),
                origin=origin,
            )
        if len(key) > MAX_KEY_LENGTH:
            # Storage keeps each top-level key in a column of this size.
            raise InvalidState(
                f"{origin} returned the key {key[:40]!r}… of {len(key)} characters: "
                f"state keys have at most {MAX_KEY_LENGTH}.",
                key=key,
                origin=origin,
            )
    checked = CheckedUpdate()
    for key, value in update.items():
        if type(value) is str:
            # The usual small value, copied as json_copy would (a str is its own copy).
            checked[key] = (value, encode_basestring(value))
            continue
        copied = _json_copy(value)
        # The key's name in a message is built only when there is one to give.
        checked[key] = copied if copied is not None else json_copy(value, f"state[{key!r}]")
    return checked


def apply_update(
    state: dict[str, Any], update: Any, reducers: Reducers, *, origin: str
) -> tuple[dict[str, Any], Delta]:
    """Merge ``update`` into ``state`` and return ``(new_state, delta)``.

    ``state`` is not modified (a new dict is returned; unchanged values are shared), so
    checkpoints already handed out never change. ``origin`` names who produced the update
    (a node name, ``input``) for error messages. Raises :class:`InvalidState` — before
    anything is merged — when ``update`` is not a JSON object with string keys. An
    update from :func:`check_update` is used as it is.
    """
    copies = check_update(update, origin=origin)
    if copies is None:
        return state, {}
    new_state = dict(state)
    delta: Delta = {}
    # Each value is a copy (from its JSON text), so a node that mutates what it
    # returned later cannot change a checkpoint.
    for key, (value, text) in copies.items():
        reducer = reducers.get(key, "overwrite") if reducers else "overwrite"
        if reducer == "overwrite":
            new_state[key] = value
            delta[key] = Change("set", value, text)
        elif reducer == "append":
            if not isinstance(value, list):
                value, text = [value], f"[{text}]"
            old = state.get(key)
            if old is None:
                old = []
            elif not isinstance(old, list):
                raise InvalidState(
                    f"state[{key!r}] uses the append reducer but holds a "
                    f"{type(old).__name__}, not a list.",
                    key=key,
                    origin=origin,
                )
            new_state[key] = old + value
            if key in state:
                delta[key] = Change("append", value, text)
            else:
                delta[key] = Change("set", old + value, text if not old else None)
        else:
            merged, text = json_copy(
                reducer(state.get(key), value), f"state[{key!r}] (after its reducer)"
            )
            new_state[key] = merged
            delta[key] = Change("set", merged, text)
    return new_state, delta


def compose(first: Delta, then: Delta) -> Delta:
    """One delta with the effect of ``first`` followed by ``then``."""
    if not first:
        return dict(then)  # the usual first step of a run or of a step's nodes
    out = dict(first)
    for key, change in then.items():
        before = out.get(key)
        if change.op == "append" and before is not None:
            out[key] = Change(before.op, before.value + change.value)
        else:
            out[key] = change
    return out
