"""The transcript format: LangChain-style message dicts kept in ``state["messages"]``.

LangGraph clients render these dicts as they are, so the shapes follow LangChain's::

    {"type": "human",  "content": "Refund order 42", "id": "…"}
    {"type": "ai",     "content": "", "id": "…",
     "tool_calls": [{"id": "call_1", "name": "issue_refund", "args": {"order_id": "42"}}],
     "usage": {"input_tokens": 120, "output_tokens": 18}}          # usage only when known
    {"type": "tool",   "content": "Refunded.", "id": "…",
     "tool_call_id": "call_1", "name": "issue_refund", "status": "success"}
    {"type": "system", "content": "You are a support agent.", "id": "…"}

``content`` is a string, or a list of content blocks (``[{"type": "text", "text": "…"}]``) kept as
they are. Every message has an ``id`` (a uuid4 string). AI messages always have a ``tool_calls``
list, possibly empty. Messages are plain dicts so that they are JSON as they stand: checkpoints
store them without conversion.

``normalize_message`` reads what people and clients send (a plain string, LangChain-style dicts,
OpenAI chat-completions dicts) into this shape; ``to_openai`` writes the transcript back out as the
chat-completions ``messages`` parameter.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

from criogen.engine.errors import InvalidMessage

__all__ = [
    "Message",
    "MessageType",
    "ai",
    "human",
    "new_call_id",
    "new_message_id",
    "normalize_message",
    "normalize_messages",
    "system",
    "to_openai",
    "tool_result",
]

Message = dict[str, Any]
"""One transcript message: a JSON-ready dict in the shape described in the module docstring."""

MessageType = Literal["human", "ai", "tool", "system"]
"""The ``type`` of a transcript message."""

# Both LangChain's "type" values and OpenAI's "role" values name the same four kinds of message.
_KINDS: dict[str, MessageType] = {
    "human": "human",
    "user": "human",
    "ai": "ai",
    "assistant": "ai",
    "tool": "tool",
    "system": "system",
    "developer": "system",
}
_TOOL_STATUSES = ("success", "error")
# Keys that normalize_message rewrites itself; everything else a caller put on a message is kept.
_OWN_KEYS = frozenset({"type", "role", "content", "id", "tool_calls", "tool_call_id", "name"})


def new_message_id() -> str:
    """Return a fresh message id (a uuid4 string)."""
    return str(uuid.uuid4())


def new_call_id() -> str:
    """Return a fresh tool call id in OpenAI's style (``call_`` and 24 hex digits)."""
    return f"call_{uuid.uuid4().hex[:24]}"


def human(text: str | list[Any], **extra: Any) -> Message:
    """Build a human message.

    ``extra`` keys (for example ``name`` or ``id``) are kept on the message; ``type`` and
    ``content`` cannot be overridden.

    Raises:
        InvalidMessage: ``text`` is neither a string nor a list of content blocks.
    """
    extra.pop("type", None)
    extra.pop("content", None)
    message_id = _read_id(extra.pop("id", None))
    return {"type": "human", "content": _read_content(text, "content"), "id": message_id, **extra}


def ai(
    content: str | list[Any] | None,
    tool_calls: Iterable[Mapping[str, Any]] | None = None,
    usage: Mapping[str, Any] | None = None,
) -> Message:
    """Build an AI message.

    Args:
        content: The reply text (``None`` is read as ``""``, as OpenAI sends it with tool calls).
        tool_calls: Calls as ``{"name", "args"}`` with an optional ``"id"`` (generated when
            missing); OpenAI-shaped calls (``function.name`` / ``function.arguments``) are read too.
        usage: ``{"input_tokens", "output_tokens"}`` when the model reported them.

    Raises:
        InvalidMessage: a tool call or the usage is malformed; the message names the field.
    """
    message: Message = {
        "type": "ai",
        "content": _read_content("" if content is None else content, "content"),
        "id": new_message_id(),
        "tool_calls": _read_tool_calls(tool_calls or [], "tool_calls"),
    }
    if usage is not None:
        message["usage"] = _read_usage(usage, "usage")
    return message


def tool_result(
    call_id: str,
    name: str | None,
    content: Any,
    status: Literal["success", "error"] = "success",
) -> Message:
    """Build the tool message that answers the tool call ``call_id``.

    A string ``content`` is used as it is; any other JSON value (a tool's return value) is
    serialized with ``json.dumps``. Use ``status="error"`` for a failed call, with content that
    tells the model what went wrong and what to do instead.

    Raises:
        InvalidMessage: ``call_id`` is empty, ``status`` is unknown or ``content`` is not JSON.
    """
    if not isinstance(content, str):
        try:
            content = json.dumps(content, ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise InvalidMessage(
                f"Tool message content must be a string or a JSON value, not "
                f"{type(content).__name__}: convert the tool's result to str, number, bool, list "
                f"or dict ({exc}).",
                field="content",
            ) from exc
    return {
        "type": "tool",
        "content": content,
        "id": new_message_id(),
        "tool_call_id": _read_nonempty_str(call_id, "tool_call_id"),
        "name": _read_optional_str(name, "name"),
        "status": _read_status(status, "status"),
    }


def system(text: str) -> Message:
    """Build a system message (the agent's instructions go first in the transcript).

    Raises:
        InvalidMessage: ``text`` is neither a string nor a list of content blocks.
    """
    return {"type": "system", "content": _read_content(text, "content"), "id": new_message_id()}


def normalize_message(obj: object) -> Message:
    """Read one message from any accepted input shape into a new transcript message.

    Accepted: a plain string (a human message); a LangChain-style dict with ``type`` (``human``,
    ``ai``, ``tool``, ``system``, or the aliases ``user`` / ``assistant``); an OpenAI chat dict with
    ``role`` (``user``, ``assistant``, ``tool``, ``system``, ``developer``), whose ``tool_calls``
    carry ``function.name`` and a JSON ``function.arguments`` string. The input is not modified.
    A missing ``id`` is generated; unknown extra keys are kept. A tool message without a ``name``
    gets ``None`` (``normalize_messages`` fills it in from the matching call).

    Raises:
        InvalidMessage: the input is not a message; the error names the bad field.
    """
    if isinstance(obj, str):
        return human(obj)
    if not isinstance(obj, Mapping):
        raise InvalidMessage(
            f"A message must be a string or a dict with 'type' (or 'role') and 'content', not "
            f"{type(obj).__name__}.",
            field="message",
        )
    kind = _read_kind(obj)
    extra = {key: value for key, value in obj.items() if key not in _OWN_KEYS}
    content = obj.get("content")
    if content is None and kind != "ai":
        raise InvalidMessage(
            f"A {kind} message needs 'content' (a string or a list of content blocks).",
            field="content",
        )
    message: Message = {
        "type": kind,
        "content": _read_content("" if content is None else content, "content"),
        "id": _read_id(obj.get("id")),
    }
    if "name" in obj and kind != "tool":
        message["name"] = _read_optional_str(obj["name"], "name")
    if kind == "ai":
        extra.pop("function_call", None)
        if obj.get("function_call") is not None:
            raise InvalidMessage(
                "'function_call' (OpenAI's legacy function calling) is not supported: send "
                "'tool_calls' instead.",
                field="function_call",
            )
        message["tool_calls"] = _read_tool_calls(obj.get("tool_calls") or [], "tool_calls")
        usage = extra.pop("usage", None)
        usage_metadata = extra.pop("usage_metadata", None)
        if usage is None and isinstance(usage_metadata, Mapping):
            # LangChain calls it usage_metadata; keep the counts under our own key.
            usage = usage_metadata
        if usage is not None:
            message["usage"] = _read_usage(usage, "usage")
    elif kind == "tool":
        message["tool_call_id"] = _read_nonempty_str(obj.get("tool_call_id"), "tool_call_id")
        message["name"] = _read_optional_str(obj.get("name"), "name")
        message["status"] = _read_status(extra.pop("status", "success"), "status")
    message.update(extra)
    return message


def normalize_messages(objs: object) -> list[Message]:
    """Read a list of messages (or a single string or dict) into transcript messages.

    Each item goes through ``normalize_message``. A tool message without a ``name`` (OpenAI does not
    send one) gets the name of the earlier tool call it answers.

    Raises:
        InvalidMessage: the input is not a list of messages; the error names the bad item and field.
    """
    if isinstance(objs, str | Mapping):
        objs = [objs]
    if not isinstance(objs, Sequence):
        raise InvalidMessage(
            f"Messages must be a list of messages, not {type(objs).__name__}.", field="messages"
        )
    messages: list[Message] = []
    call_names: dict[str, str] = {}
    for index, obj in enumerate(objs):
        try:
            message = normalize_message(obj)
        except InvalidMessage as exc:
            inner = exc.details.get("field")
            field = f"messages[{index}]" + (f".{inner}" if inner and inner != "message" else "")
            raise InvalidMessage(f"messages[{index}]: {exc.message}", field=field) from exc
        if message["type"] == "ai":
            for call in message["tool_calls"]:
                call_names[call["id"]] = call["name"]
        elif message["type"] == "tool" and message["name"] is None:
            message["name"] = call_names.get(message["tool_call_id"])
        messages.append(message)
    return messages


def to_openai(messages: object) -> list[dict[str, Any]]:
    """Convert the transcript to the chat-completions ``messages`` parameter.

    Human → ``user``, ai → ``assistant`` (tool calls as ``{"id", "type": "function", "function":
    {"name", "arguments": <JSON string>}}``; content ``None`` when empty and there are calls),
    tool → ``tool`` with ``tool_call_id``, system → ``system``. Ids, usage and status are dropped:
    the API does not take them. The input is normalized first, so any accepted shape works.

    Raises:
        InvalidMessage: a message is malformed; the error names it.
    """
    out: list[dict[str, Any]] = []
    for message in normalize_messages(messages):
        kind = message["type"]
        if kind == "ai":
            entry: dict[str, Any] = {"role": "assistant", "content": message["content"]}
            if message["tool_calls"]:
                entry["content"] = message["content"] or None
                entry["tool_calls"] = [
                    {
                        "id": call["id"],
                        "type": "function",
                        "function": {
                            "name": call["name"],
                            "arguments": json.dumps(call["args"], ensure_ascii=False),
                        },
                    }
                    for call in message["tool_calls"]
                ]
        elif kind == "tool":
            entry = {
                "role": "tool",
                "tool_call_id": message["tool_call_id"],
                "content": message["content"],
            }
        else:
            entry = {"role": "user" if kind == "human" else "system", "content": message["content"]}
            if isinstance(message.get("name"), str) and message["name"]:
                entry["name"] = message["name"]
        out.append(entry)
    return out


# --- field readers: each returns the clean value or raises InvalidMessage naming the field -------


def _read_kind(obj: Mapping[str, Any]) -> MessageType:
    kinds = {key: obj[key] for key in ("type", "role") if obj.get(key) is not None}
    found = {
        key: _KINDS.get(value) if isinstance(value, str) else None for key, value in kinds.items()
    }
    known = {kind for kind in found.values() if kind is not None}
    if len(known) == 1:
        return known.pop()
    if len(known) > 1:
        raise InvalidMessage(
            f"The message's type {obj['type']!r} and role {obj['role']!r} disagree: "
            f"send only one of them.",
            field="type",
        )
    field = "type" if "type" in kinds or "role" not in kinds else "role"
    raise InvalidMessage(
        f"Unknown message {field} {kinds.get(field)!r}: use one of 'human', 'ai', 'tool', 'system' "
        f"(or OpenAI's roles 'user', 'assistant', 'tool', 'system').",
        field=field,
    )


def _read_content(content: object, field: str) -> str | list[Any]:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        for index, block in enumerate(content):
            if not isinstance(block, str | Mapping):
                raise InvalidMessage(
                    f"Content block {field}[{index}] must be a string or a dict like "
                    f'{{"type": "text", "text": "…"}}, not {type(block).__name__}.',
                    field=f"{field}[{index}]",
                )
        return [dict(block) if isinstance(block, Mapping) else block for block in content]
    raise InvalidMessage(
        f"'{field}' must be a string or a list of content blocks, not {type(content).__name__}.",
        field=field,
    )


def _read_id(value: object) -> str:
    if value is None or value == "":
        return new_message_id()
    if not isinstance(value, str):
        raise InvalidMessage(
            f"A message 'id' must be a string, not {type(value).__name__}: "
            f"leave it out to get one.",
            field="id",
        )
    return value


def _read_nonempty_str(value: object, field: str) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidMessage(f"'{field}' must be a non-empty string, got {value!r}.", field=field)
    return value


def _read_optional_str(value: object, field: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise InvalidMessage(
            f"'{field}' must be a string, not {type(value).__name__}.", field=field
        )
    return value


def _read_status(value: object, field: str) -> Literal["success", "error"]:
    if value == "success":
        return "success"
    if value == "error":
        return "error"
    raise InvalidMessage(
        f"A tool message's '{field}' must be 'success' or 'error', got {value!r}.", field=field
    )


def _read_usage(usage: object, field: str) -> dict[str, int]:
    if not isinstance(usage, Mapping):
        raise InvalidMessage(
            f"'{field}' must be a dict with 'input_tokens' and 'output_tokens'.", field=field
        )
    out: dict[str, int] = {}
    for key in ("input_tokens", "output_tokens"):
        value = usage.get(key, 0)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InvalidMessage(
                f"'{field}.{key}' must be a non-negative integer, got {value!r}.",
                field=f"{field}.{key}",
            )
        out[key] = value
    return out


def _read_tool_calls(calls: object, field: str) -> list[dict[str, Any]]:
    if not isinstance(calls, Sequence) or isinstance(calls, str):
        raise InvalidMessage(
            f"'{field}' must be a list of tool calls, not {type(calls).__name__}.", field=field
        )
    return [_read_tool_call(call, f"{field}[{index}]") for index, call in enumerate(calls)]


def _read_tool_call(call: object, field: str) -> dict[str, Any]:
    if not isinstance(call, Mapping):
        raise InvalidMessage(
            f"'{field}' must be a dict with 'name' and 'args', not {type(call).__name__}.",
            field=field,
        )
    function = call.get("function")
    if isinstance(function, Mapping):
        # OpenAI shape: {"id", "type": "function", "function": {"name", "arguments": "<json>"}}.
        name = function.get("name")
        args: object = function.get("arguments")
        args_field = f"{field}.function.arguments"
        name_field = f"{field}.function.name"
    else:
        name = call.get("name")
        args = call.get("args")
        args_field = f"{field}.args"
        name_field = f"{field}.name"
    if args is None or args == "":
        args = {}
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError as exc:
            raise InvalidMessage(
                f"'{args_field}' is not valid JSON ({exc}): send the arguments as a JSON object.",
                field=args_field,
            ) from exc
    if not isinstance(args, Mapping):
        raise InvalidMessage(
            f"'{args_field}' must be a JSON object (a dict of argument names to values), not "
            f"{type(args).__name__}.",
            field=args_field,
        )
    call_id = call.get("id")
    if call_id is not None and not isinstance(call_id, str):
        raise InvalidMessage(
            f"'{field}.id' must be a string, not {type(call_id).__name__}.", field=f"{field}.id"
        )
    return {
        "id": call_id or new_call_id(),
        "name": _read_nonempty_str(name, name_field),
        "args": dict(args),
    }
