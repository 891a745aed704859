"""Tools: Python functions the model can call, described to it with a JSON Schema.

::

    @tool
    def issue_refund(order_id: str, amount: float) -> str:
        \"\"\"Refund an order.

        Args:
            order_id: The order to refund.
            amount: Amount in euros.
        \"\"\"

    @tool(name="lookup", idempotent=True)
    def lookup_order(order_id: str, ctx: ToolContext) -> dict[str, Any]: ...

The schema comes from the type hints (``str``, ``int``, ``float``, ``bool``, ``list[X]``,
``dict[str, X]``, ``X | None`` and other unions, ``Literal[...]``, ``Enum``, ``TypedDict``,
dataclasses, ``Annotated[X, "description"]``, ``Any``) and from the docstring: the text before the
first section is the tool's description, and a Google-style ``Args:`` section gives each
parameter's description. Parameters with a default are optional. A parameter annotated
``ToolContext`` is injected by the Agent and left out of the schema.

Arguments from the model are validated (``Tool.validate_args``) against that schema by a small
validator for exactly the subset of JSON Schema generated here, then converted to the annotated
Python types (Enum members, dataclass instances) before the function is called.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import functools
import hashlib
import inspect
import json
import math
import re
import sys
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal, overload

from criogen.engine.checkpoints import CheckpointId, RunId, ThreadId
from criogen.engine.errors import InvalidTool, InvalidToolCall
from criogen.engine.json_schema import Problem, SchemaProblem, json_type, path_text
from criogen.engine.json_schema import check as check_schema

if TYPE_CHECKING:
    from criogen.engine.store import Storage

__all__ = [
    "Tool",
    "ToolContext",
    "build_idempotency_key",
    "tool",
    "tool_specs",
]

JSONSchema = dict[str, Any]
"""A JSON Schema, as a plain dict."""

# OpenAI's rule for function names; other providers accept the same set.
_NAME_PATTERN = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_ARGS_HEADERS = frozenset({"args", "arguments", "parameters", "params"})
_SECTION_HEADER = re.compile(r"^([A-Z][A-Za-z ]*):\s*$")
_ARG_LINE = re.compile(r"^\*{0,2}(?P<name>\w+)\s*(?:\([^)]*\))?\s*:\s*(?P<text>.*)$")


@dataclass(frozen=True, kw_only=True)
class ToolContext:
    """What a tool gets from the Agent when it declares a ``ToolContext`` parameter."""

    call_id: str
    """The id of the tool call being run (from the model's ai message)."""

    idempotency_key: str
    """Stable across re-runs of this same call (after a crash or a retry), different for any other
    call: pass it to outside services (payments, e-mail) so that a re-run does not repeat the side
    effect. The Agent builds it with ``build_idempotency_key``."""

    thread_id: ThreadId | None = None
    """The thread the run belongs to, if any."""

    run_id: RunId | None = None
    """The run executing the call, if any."""

    state: Mapping[str, Any] = field(default_factory=dict)
    """The state when the call runs (including values passed with send), as a read-only shallow
    copy: later changes to the state do not show in it; do not mutate nested values."""

    storage: Storage | None = None
    """The checkpoint store the run uses, for tools that need to read history; ``None`` if unset."""

    def __post_init__(self) -> None:
        if not isinstance(self.state, types.MappingProxyType):
            # Frozen dataclass: bypass the frozen __setattr__ once, to wrap the state read-only.
            object.__setattr__(self, "state", types.MappingProxyType(dict(self.state)))


def build_idempotency_key(
    *, thread_id: ThreadId | str | None, checkpoint_id: CheckpointId | str | None, call_id: str
) -> str:
    """Return the idempotency key of one tool call: the same inputs always give the same key.

    The key is derived from the thread, the checkpoint the tool step starts from and the model's
    call id, so a re-run of the same step (after a crash) gets the same key, while a fork or a new
    model turn gets a new one. It is a hash (``crg_`` + 40 hex digits), short enough for any outside
    API and without the raw ids in it.
    """
    raw = json.dumps([thread_id, checkpoint_id, call_id])
    return "crg_" + hashlib.sha256(raw.encode()).hexdigest()[:40]


@dataclass(frozen=True, eq=False)
class Tool:
    """A function the model can call, with its name, description and parameter schema.

    Build one with ``@tool`` (or ``Tool.from_function``). The object is still callable like the
    function it wraps.
    """

    name: str
    """The name the model calls the tool by (letters, digits, ``_`` and ``-``; at most 64)."""

    description: str
    """What the tool does and when to use it, as the model reads it."""

    parameters: JSONSchema
    """The JSON Schema (``type: object``) of the arguments, without the injected context."""

    fn: Callable[..., Any]
    """The wrapped function (sync or async)."""

    idempotent: bool = False
    """True when calling the tool twice with the same arguments has the same effect as once, so the
    Agent may re-run it freely after a crash."""

    is_async: bool = False
    """True when ``fn`` is a coroutine function."""

    context_param: str | None = None
    """The name of the parameter that receives the ``ToolContext``, if the function has one."""

    annotations: Mapping[str, Any] = field(default_factory=dict)
    """The resolved type hint of each schema parameter, used to convert arguments before a call."""

    if TYPE_CHECKING:
        # Copied from the function by from_function (not dataclass fields: declared for mypy only).
        __name__: ClassVar[str]
        __qualname__: ClassVar[str]
        __wrapped__: ClassVar[Callable[..., Any]]

    @classmethod
    def from_function(
        cls,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        idempotent: bool = False,
        localns: Mapping[str, Any] | None = None,
    ) -> Tool:
        """Build a tool from a function's signature, type hints and docstring.

        ``localns`` resolves type hints that name local types (``@tool`` passes the caller's
        locals, so tools defined inside a function work).

        Raises:
            InvalidTool: no usable name or description, ``*args``/``**kwargs`` or positional-only
                parameters, a parameter without a type hint, or a type hint with no JSON Schema.
        """
        if isinstance(fn, Tool):
            fn = fn.fn
        if not callable(fn):
            raise InvalidTool(
                f"@tool needs a function, not {type(fn).__name__}.", tool=str(name or fn)
            )
        tool_name = name if name is not None else getattr(fn, "__name__", "")
        if not isinstance(tool_name, str) or not _NAME_PATTERN.match(tool_name):
            raise InvalidTool(
                f"Tool name {tool_name!r} is not usable: use 1 to 64 letters, digits, '_' or '-' "
                f"(pass name=... to @tool).",
                tool=str(tool_name),
            )
        summary, arg_docs = _parse_docstring(inspect.getdoc(fn) or "")
        tool_description = description if description is not None else summary
        if not tool_description.strip():
            raise InvalidTool(
                f"Tool {tool_name!r} has no description: give the function a docstring saying "
                f"what it does and when to use it, or pass description=... to @tool.",
                tool=tool_name,
            )
        try:
            hints = typing.get_type_hints(fn, localns=dict(localns or {}), include_extras=True)
        except (NameError, TypeError, AttributeError, SyntaxError) as exc:
            raise InvalidTool(
                f"Could not resolve the type hints of tool {tool_name!r} ({exc}): define the types "
                f"it uses at module level or import them where the tool is defined.",
                tool=tool_name,
            ) from exc

        properties: dict[str, JSONSchema] = {}
        required: list[str] = []
        annotations: dict[str, Any] = {}
        context_param: str | None = None
        for param in inspect.signature(fn).parameters.values():
            where = f"parameter {param.name!r} of tool {tool_name!r}"
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                raise InvalidTool(
                    f"The {where} is *args/**kwargs: a tool's parameters must be named, so list "
                    f"them one by one.",
                    tool=tool_name,
                    parameter=param.name,
                )
            if param.kind is param.POSITIONAL_ONLY:
                raise InvalidTool(
                    f"The {where} is positional-only: remove the '/' from the signature; tools "
                    f"are called with keyword arguments.",
                    tool=tool_name,
                    parameter=param.name,
                )
            if param.name not in hints:
                raise InvalidTool(
                    f"The {where} has no type hint: annotate it (for example `{param.name}: str`) "
                    f"so the model knows what to send.",
                    tool=tool_name,
                    parameter=param.name,
                )
            hint = hints[param.name]
            if _is_context_hint(hint):
                context_param = param.name
                continue
            try:
                schema = _schema_for(hint)
            except _UnsupportedType as exc:
                raise InvalidTool(
                    f"The {where} has type {exc.hint!r}, which has no JSON Schema: use str, int, "
                    f"float, bool, list[X], dict[str, X], X | None, Literal, an Enum, a TypedDict "
                    f"or a dataclass.",
                    tool=tool_name,
                    parameter=param.name,
                ) from exc
            if param.name in arg_docs and "description" not in schema:
                schema = {"description": arg_docs[param.name], **schema}
            if param.default is param.empty:
                required.append(param.name)
            elif _is_json_scalar(_jsonable_default(param.default)):
                schema["default"] = _jsonable_default(param.default)
            properties[param.name] = schema
            annotations[param.name] = hint

        tool_obj = cls(
            name=tool_name,
            description=inspect.cleandoc(tool_description),
            parameters={
                "type": "object",
                "properties": properties,
                "required": required,
                "additionalProperties": False,
            },
            fn=fn,
            idempotent=idempotent,
            is_async=inspect.iscoroutinefunction(fn),
            context_param=context_param,
            annotations=types.MappingProxyType(annotations),
        )
        # Look like the wrapped function to help(), inspect and debuggers. The dataclass is frozen,
        # so set these instance attributes past its __setattr__.
        for attr in ("__module__", "__name__", "__qualname__", "__doc__"):
            if hasattr(fn, attr):
                object.__setattr__(tool_obj, attr, getattr(fn, attr))
        object.__setattr__(tool_obj, "__wrapped__", fn)
        return tool_obj

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the wrapped function directly, as if it were not decorated."""
        return self.fn(*args, **kwargs)

    def spec(self) -> dict[str, Any]:
        """Return the OpenAI ``tools=[...]`` entry for this tool."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }

    def validate_args(self, args: object) -> dict[str, Any]:
        """Check a model's arguments against the schema and return them, cleaned.

        Returns a new dict of JSON values: integers become floats where the schema says ``number``,
        integral floats (``3.0``) become ints where it says ``integer``. Optional arguments that
        were not sent stay absent (the function's defaults apply).

        Raises:
            InvalidToolCall: ``args`` is not an object, an argument is missing, unknown or of the
                wrong type; the message names the argument and is written for the model to read.
        """
        return typing.cast("dict[str, Any]", _validate(self.parameters, args, tool=self.name))

    def invoke(self, args: object, ctx: ToolContext | None = None) -> Any:
        """Validate ``args``, call the tool and return its JSON result.

        An async tool runs in a fresh event loop; from async code, use ``ainvoke`` instead.
        Exceptions raised by the tool itself propagate unchanged: the caller decides how to show
        them to the model.

        Raises:
            InvalidToolCall: the arguments do not fit the schema.
            InvalidTool: the tool returned something that is not JSON.
            TypeError: the tool needs a ``ToolContext`` and ``ctx`` is ``None``.
            RuntimeError: an async tool was invoked from a running event loop.
        """
        kwargs = self._prepare_call(args, ctx)
        result = self.fn(**kwargs)
        if inspect.iscoroutine(result):
            try:
                asyncio.get_running_loop()
            except RuntimeError:
                result = asyncio.run(result)
            else:
                result.close()
                raise RuntimeError(
                    f"Tool {self.name!r} is async and was invoked inside a running event loop: "
                    f"use `await tool.ainvoke(args, ctx)` there."
                )
        return self._check_result(result)

    async def ainvoke(self, args: object, ctx: ToolContext | None = None) -> Any:
        """Validate ``args``, call the tool and return its JSON result, from async code.

        A sync tool runs in a worker thread (``asyncio.to_thread``) so it does not block the loop.

        Raises:
            InvalidToolCall: the arguments do not fit the schema.
            InvalidTool: the tool returned something that is not JSON.
            TypeError: the tool needs a ``ToolContext`` and ``ctx`` is ``None``.
        """
        kwargs = self._prepare_call(args, ctx)
        if self.is_async:
            result = await self.fn(**kwargs)
        else:
            result = await asyncio.to_thread(functools.partial(self.fn, **kwargs))
            if inspect.isawaitable(result):
                result = await result
        return self._check_result(result)

    def _prepare_call(self, args: object, ctx: ToolContext | None) -> dict[str, Any]:
        validated = self.validate_args(args)
        kwargs = {key: _to_python(self.annotations[key], value) for key, value in validated.items()}
        if self.context_param is not None:
            if ctx is None:
                raise TypeError(
                    f"Tool {self.name!r} takes a ToolContext ({self.context_param!r}): pass ctx=."
                )
            kwargs[self.context_param] = ctx
        return kwargs

    def _check_result(self, result: Any) -> Any:
        problem = _json_problem(result, "result")
        if problem is not None:
            raise InvalidTool(
                f"Tool {self.name!r} returned a value that is not JSON ({problem}): return a str, "
                f"number, bool, None, list or dict with string keys.",
                tool=self.name,
            )
        return result


@overload
def tool(fn: Callable[..., Any], /) -> Tool: ...


@overload
def tool(
    *, name: str | None = None, description: str | None = None, idempotent: bool = False
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    idempotent: bool = False,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Turn a function into a ``Tool``; use bare (``@tool``) or with options (``@tool(name=...)``).

    Args:
        fn: The function (when used bare).
        name: The tool's name for the model; defaults to the function's name.
        description: Replaces the docstring's description.
        idempotent: Mark the tool safe to re-run with the same arguments.

    Raises:
        InvalidTool: the function cannot be described to the model (see ``Tool.from_function``).
    """
    # Type hints may name types local to the function that defines the tool: resolve them there.
    localns = sys._getframe(1).f_locals
    if fn is not None:
        if isinstance(fn, str):
            raise TypeError(f"Use @tool(name={fn!r}) to name a tool, not @tool({fn!r}).")
        return Tool.from_function(fn, localns=localns)

    def decorate(fn: Callable[..., Any]) -> Tool:
        return Tool.from_function(
            fn, name=name, description=description, idempotent=idempotent, localns=localns
        )

    return decorate


def tool_specs(tools: Sequence[Tool | Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Return the OpenAI ``tools=[...]`` list for a mix of ``Tool`` objects and raw dict specs.

    A dict is used as it is if it already has ``"type"``; a bare function description
    (``{"name", "description", "parameters"}``) is wrapped as ``{"type": "function", ...}``.
    """
    specs: list[dict[str, Any]] = []
    for item in tools:
        if isinstance(item, Tool):
            specs.append(item.spec())
        elif "type" in item:
            specs.append(dict(item))
        else:
            specs.append({"type": "function", "function": dict(item)})
    return specs


# --- docstrings ------------------------------------------------------------------------------


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """Split a cleaned docstring into (text before the first section, {param: description})."""
    lines = doc.splitlines()
    description: list[str] = []
    arg_docs: dict[str, str] = {}
    index = 0
    while index < len(lines) and not _SECTION_HEADER.match(lines[index]):
        description.append(lines[index])
        index += 1
    while index < len(lines):
        header = _SECTION_HEADER.match(lines[index])
        index += 1
        body: list[str] = []
        while index < len(lines) and (not lines[index].strip() or lines[index][0].isspace()):
            body.append(lines[index])
            index += 1
        if header and header.group(1).strip().lower() in _ARGS_HEADERS:
            arg_docs.update(_parse_args_section(body))
    return "\n".join(description).strip(), arg_docs


def _parse_args_section(body: list[str]) -> dict[str, str]:
    indents = [len(line) - len(line.lstrip()) for line in body if line.strip()]
    if not indents:
        return {}
    entry_indent = min(indents)
    docs: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in body:
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        match = _ARG_LINE.match(line.strip()) if indent == entry_indent else None
        if match:
            current = docs.setdefault(match.group("name"), [])
            if match.group("text"):
                current.append(match.group("text").strip())
        elif current is not None:
            current.append(line.strip())
    return {name: " ".join(parts) for name, parts in docs.items() if parts}


# --- type hints → JSON Schema ----------------------------------------------------------------


class _UnsupportedType(Exception):
    def __init__(self, hint: Any) -> None:
        super().__init__(hint)
        self.hint = hint


def _strip_annotated(hint: Any) -> tuple[Any, list[Any]]:
    """Return the type under ``Annotated``/``Required``/``NotRequired``, and the metadata."""
    metadata: list[Any] = []
    while True:
        origin = typing.get_origin(hint)
        if origin is typing.Annotated:
            hint, *extra = typing.get_args(hint)
            metadata.extend(extra)
        elif origin in (typing.Required, typing.NotRequired):
            hint = typing.get_args(hint)[0]
        else:
            return hint, metadata


def _is_context_hint(hint: Any) -> bool:
    """True for ``ToolContext``, ``ToolContext | None`` and their ``Annotated`` forms."""
    hint, _ = _strip_annotated(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        arms = [arm for arm in typing.get_args(hint) if arm is not type(None)]
        return arms == [ToolContext]
    return hint is ToolContext


def _is_typeddict(hint: Any) -> bool:
    return isinstance(hint, type) and typing.is_typeddict(hint)


def _schema_for(hint: Any) -> JSONSchema:
    hint, metadata = _strip_annotated(hint)
    schema = _schema_for_plain(hint)
    notes = [item for item in metadata if isinstance(item, str)]
    if notes:
        schema = {"description": " ".join(notes), **schema}
    return schema


def _schema_for_plain(hint: Any) -> JSONSchema:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if hint is Any:
        return {}
    if hint is None or hint is type(None):
        return {"type": "null"}
    if hint in (str, int, float, bool):
        return {"type": _PRIMITIVE_TYPES[hint]}
    if hint is list:
        return {"type": "array"}
    if hint is dict:
        return {"type": "object"}
    if origin in (list, Sequence):
        return {"type": "array", "items": _schema_for(args[0])} if args else {"type": "array"}
    if origin in (dict, Mapping):
        if args and args[0] is not str:
            raise _UnsupportedType(hint)
        if not args:
            return {"type": "object"}
        return {"type": "object", "additionalProperties": _schema_for(args[1])}
    if origin in (typing.Union, types.UnionType):
        arms = [_schema_for(arm) for arm in args]
        return {"anyOf": arms}
    if origin is Literal:
        return _enum_schema(list(args), hint)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return _enum_schema([member.value for member in hint], hint)
    if _is_typeddict(hint):
        hints = typing.get_type_hints(hint, include_extras=True)
        return _object_schema(
            {key: _schema_for(value) for key, value in hints.items()},
            [key for key, value in hints.items() if _typeddict_key_required(hint, key, value)],
        )
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        hints = typing.get_type_hints(hint, include_extras=True)
        fields = [item for item in dataclasses.fields(hint) if item.init]
        return _object_schema(
            {item.name: _schema_for(hints[item.name]) for item in fields},
            [
                item.name
                for item in fields
                if item.default is dataclasses.MISSING
                and item.default_factory is dataclasses.MISSING
            ],
        )
    raise _UnsupportedType(hint)


_PRIMITIVE_TYPES: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}
_JSON_TYPE_OF: dict[type, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}


def _typeddict_key_required(typeddict: Any, key: str, hint: Any) -> bool:
    # Under `from __future__ import annotations`, Python 3.11 cannot see NotRequired[...] inside
    # the string annotations and lists such keys in __required_keys__: read the hint itself.
    origin = typing.get_origin(hint)
    if origin is typing.Annotated:
        origin = typing.get_origin(typing.get_args(hint)[0])
    if origin is typing.NotRequired:
        return False
    return origin is typing.Required or key in getattr(typeddict, "__required_keys__", ())


def _enum_schema(values: list[Any], hint: Any) -> JSONSchema:
    if not values or not all(_is_json_scalar(value) for value in values):
        raise _UnsupportedType(hint)
    kinds = {_JSON_TYPE_OF.get(type(value)) for value in values}
    schema: JSONSchema = {"enum": values}
    if len(kinds) == 1 and None not in kinds:
        schema = {"type": kinds.pop(), "enum": values}
    return schema


def _object_schema(properties: dict[str, JSONSchema], required: list[str]) -> JSONSchema:
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


def _is_json_scalar(value: object) -> bool:
    return value is None or isinstance(value, str | int | float | bool)


def _jsonable_default(value: object) -> object:
    return value.value if isinstance(value, enum.Enum) else value


# --- validation of arguments against the generated schema -------------------------------------


def _describe(value: object) -> str:
    kind = json_type(value)
    text = repr(value)
    return f"{kind} {text if len(text) <= 60 else text[:57] + '...'}"


def _fail(tool: str, path: str, problem: str) -> InvalidToolCall:
    where = f"argument {path!r}" if path else "the arguments"
    return InvalidToolCall(
        f"Invalid call to tool {tool!r}: {where} {problem}. Fix the call to match the tool's "
        f"parameters and try again.",
        tool=tool,
        argument=path or None,
    )


def _validate(schema: JSONSchema, value: object, *, tool: str) -> object:
    """Return ``value`` cleaned if it matches ``schema`` (the subset ``_schema_for`` emits).

    Lenient, as LangChain's tools are (pydantic's lax mode): a string that spells what
    the schema asks for is taken as that ("5" for a number, as a person typing an edit
    in a text box sends it); anything else is refused, worded for the model to read.
    """
    try:
        return check_schema(schema, value, lenient=True)
    except SchemaProblem as exc:
        raise _invalid_call(tool, exc.problem) from None


def _invalid_call(tool: str, problem: Problem) -> InvalidToolCall:
    path = path_text("", problem.path)
    value = problem.value
    if problem.kind == "required":
        return _fail(tool, path, "is required but missing")
    if problem.kind == "unexpected":
        known = ", ".join(problem.schema.get("properties") or {}) or "none"
        parent = path_text("", problem.path[:-1])
        if parent:
            return _fail(tool, path, f"is not a field of {parent!r} (known: {known})")
        return _fail(tool, path, f"is not a parameter of this tool (known: {known})")
    if problem.kind == "key":
        return _fail(tool, path, f"has a non-string key {value!r}")
    if problem.kind == "enum":
        options = ", ".join(json.dumps(option) for option in problem.schema["enum"])
        return _fail(tool, path, f"must be one of {options}, got {_describe(value)}")
    if problem.kind == "finite":
        return _fail(tool, path, f"must be a finite number, got {value!r}")
    if problem.kind == "type":
        return _fail(tool, path, f"must be {_expected(problem.schema)}, got {_describe(value)}")
    # const, lengths, bounds: schemas made from type hints have none; a hand-written one may.
    rule = {
        k: problem.schema.get(k)
        for k in ("const", "minLength", "maxLength", "minimum", "maximum")
        if k in problem.schema
    }
    return _fail(tool, path, f"does not fit {json.dumps(rule)}, got {_describe(value)}")


def _expected(schema: Mapping[str, Any]) -> str:
    if "anyOf" in schema:
        return " or ".join(_expected(arm) for arm in schema["anyOf"])
    if "enum" in schema:
        return "one of " + ", ".join(json.dumps(option) for option in schema["enum"])
    kind = schema.get("type")
    if kind == "array" and "items" in schema:
        return f"an array of {_expected(schema['items'])}"
    names = {"integer": "an integer", "array": "an array", "object": "an object", "null": "null"}
    return names.get(kind, f"a {kind}") if isinstance(kind, str) else "any value"


# --- conversion of validated JSON to the annotated Python types -------------------------------


def _to_python(hint: Any, value: Any) -> Any:
    """Convert a validated JSON value to ``hint``: Enum members and dataclass instances."""
    hint, _ = _strip_annotated(hint)
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return hint(value)
    if dataclasses.is_dataclass(hint) and isinstance(hint, type) and isinstance(value, Mapping):
        hints = typing.get_type_hints(hint, include_extras=True)
        return hint(**{key: _to_python(hints[key], item) for key, item in value.items()})
    if _is_typeddict(hint) and isinstance(value, Mapping):
        hints = typing.get_type_hints(hint, include_extras=True)
        return {key: _to_python(hints[key], item) for key, item in value.items()}
    if origin in (list, Sequence) and args and isinstance(value, list):
        return [_to_python(args[0], item) for item in value]
    if origin in (dict, Mapping) and args and isinstance(value, Mapping):
        return {key: _to_python(args[1], item) for key, item in value.items()}
    if origin in (typing.Union, types.UnionType):
        # The first arm the value validates against wins, the same order the schema lists them.
        for arm in args:
            try:
                check_schema(_schema_for(arm), value, lenient=True)
            except SchemaProblem:
                continue
            return _to_python(arm, value)
    return value


def _json_problem(value: object, path: str) -> str | None:
    """Return what makes ``value`` not JSON (naming where), or None if it is JSON."""
    if value is None or isinstance(value, str | bool | int):
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else f"{path} is {value!r}"
    if isinstance(value, list | tuple):
        for index, item in enumerate(value):
            problem = _json_problem(item, f"{path}[{index}]")
            if problem:
                return problem
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                return f"{path} has the non-string key {key!r}"
            problem = _json_problem(item, f"{path}.{key}")
            if problem:
                return problem
        return None
    return f"{path} is a {type(value).__name__}"
