"""Model adapters: what an Agent calls to get the next AI message.

A model is anything with ``complete(messages, tools) -> ai message`` (the ``ChatModel``
protocol). Two ship here:

- ``OpenAIChat``: any chat-completions endpoint (OpenAI, or a compatible server through
  ``base_url`` / ``OPENAI_BASE_URL``), over the official ``openai`` client.
- ``ScriptedModel``: plays a fixed list of replies, for tests, demos and notebooks.

This module imports nothing from Django, and ``openai`` only when an ``OpenAIChat`` makes its first
call. It was ``criogen.models`` (an alias that warns, for one release): in a Django project that
name means tables, which live in ``criogen.storage.models``.
"""

from __future__ import annotations

import inspect
import json
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from criogen.engine.errors import InvalidMessage, ModelError, ScriptExhausted
from criogen.engine.messages import Message, ai, to_openai
from criogen.engine.tools import Tool, tool_specs

if TYPE_CHECKING:
    import openai

__all__ = [
    "ChatModel",
    "OpenAIChat",
    "ScriptItem",
    "ScriptedCall",
    "ScriptedModel",
]

ToolsArg = Sequence[Tool] | Sequence[Mapping[str, Any]] | Sequence[Tool | Mapping[str, Any]]

ScriptItem = str | Mapping[str, Any] | Callable[..., Any]
"""One scripted reply: final text, a ``{"content", "tool_calls", "usage"}`` dict, or a callable
that receives the messages (and the tools, if it takes a second argument) and returns either."""


@runtime_checkable
class ChatModel(Protocol):
    """A chat model the Agent can call."""

    def complete(self, messages: list[Message], tools: ToolsArg = ()) -> Message:
        """Return the model's next AI message for the transcript ``messages``.

        Args:
            messages: The transcript (see ``criogen.engine.messages``); the agent's instructions
                come first as a system message.
            tools: The tools the model may call: ``Tool`` objects or raw OpenAI tool specs.

        Returns:
            One AI message built with ``messages.ai``: ``content``, ``tool_calls`` (each with
            ``id``, ``name``, ``args``) and, when known, ``usage``.

        Raises:
            ModelError: the call failed for good (after the adapter's own retries).
        """
        ...


@dataclass(frozen=True)
class ScriptedCall:
    """One call a ``ScriptedModel`` received."""

    messages: list[Message]
    """The transcript it was given (a shallow copy of the list)."""

    tools: list[Tool | Mapping[str, Any]]
    """The tools it was given."""


class ScriptedModel:
    """A model that plays a fixed script: tests, demos and notebooks only.

    Each call to ``complete`` takes the next item of the script: a string (a final text reply), a
    dict with optional ``content``, ``tool_calls`` (``{"name", "args"}`` with an optional ``"id"``,
    generated when missing) and ``usage``, or a callable that receives the messages (and the tools,
    if it takes two arguments) and returns a string or such a dict::

        ScriptedModel([
            {"tool_calls": [{"name": "issue_refund", "args": {"order_id": "42", "amount": 10.0}}]},
            "Refunded order 42.",
        ])

    Calls are thread-safe: a lock guards the cursor. Calls are recorded in ``calls``. An Agent that
    re-runs a model step after a crash consumes the next item, so scripts for crash tests need
    that item twice (or a ``reset()``).
    """

    def __init__(self, script: Iterable[ScriptItem]) -> None:
        """Check the script's strings and dicts now, so a typo fails before any run.

        Raises:
            InvalidMessage: an item is not a string, dict or callable, or a dict is malformed.
        """
        self._script: list[ScriptItem] = list(script)
        for index, item in enumerate(self._script):
            if not callable(item):
                _scripted_reply(item, index)
        self._cursor = 0
        self._lock = threading.Lock()
        self.calls: list[ScriptedCall] = []
        """Every call received, in order (cleared by ``reset``)."""

    def __repr__(self) -> str:
        return f"ScriptedModel({len(self._script)} items, {self.remaining} left)"

    @property
    def remaining(self) -> int:
        """How many items are left to play."""
        with self._lock:
            return len(self._script) - self._cursor

    def reset(self) -> None:
        """Rewind to the first item and forget the recorded calls."""
        with self._lock:
            self._cursor = 0
            self.calls = []

    def complete(self, messages: list[Message], tools: ToolsArg = ()) -> Message:
        """Return the next scripted reply as an AI message.

        Raises:
            ScriptExhausted: every item has been played.
            InvalidMessage: a callable item returned something that is not a reply.
        """
        tool_list = list(tools)
        with self._lock:
            index = self._cursor
            if index >= len(self._script):
                raise ScriptExhausted(
                    f"ScriptedModel ran out of replies: its script has {len(self._script)} "
                    f"item(s) and this is call {index + 1}. Add the reply the agent needs here "
                    f"(for example a final text reply) or check why it calls the model again.",
                    items=len(self._script),
                    call=index + 1,
                )
            self._cursor += 1
            self.calls.append(ScriptedCall(messages=list(messages), tools=tool_list))
            item = self._script[index]
        reply = _call_script_item(item, messages, tool_list) if callable(item) else item
        return _scripted_reply(reply, index)


def _call_script_item(
    item: Callable[..., Any], messages: list[Message], tools: list[Tool | Mapping[str, Any]]
) -> object:
    try:
        inspect.signature(item).bind(messages, tools)
    except (TypeError, ValueError):
        return item(messages)
    return item(messages, tools)


def _scripted_reply(item: object, index: int) -> Message:
    if isinstance(item, str):
        return ai(item)
    if not isinstance(item, Mapping):
        raise InvalidMessage(
            f"Script item {index} is a {type(item).__name__}: use a string, a dict with "
            f"'content' and/or 'tool_calls', or a callable returning one of those.",
            field=f"script[{index}]",
        )
    unknown = set(item) - {"content", "tool_calls", "usage"}
    if unknown:
        raise InvalidMessage(
            f"Script item {index} has unknown keys {sorted(unknown)}: use 'content', "
            f"'tool_calls' and 'usage'.",
            field=f"script[{index}]",
        )
    try:
        return ai(item.get("content"), item.get("tool_calls"), item.get("usage"))
    except InvalidMessage as exc:
        inner = exc.details.get("field")
        raise InvalidMessage(
            f"Script item {index}: {exc.message}", field=f"script[{index}].{inner}"
        ) from exc


class OpenAIChat:
    """A chat-completions model over the official ``openai`` client.

    The API key comes from ``api_key`` or ``OPENAI_API_KEY``, the endpoint from ``base_url`` or
    ``OPENAI_BASE_URL`` (the ``openai`` client reads both). Retries are the client's own: on
    connection errors, timeouts, 408, 409, 429 and 5xx it retries up to ``max_retries`` times with
    exponential backoff (0.5 s doubling, capped at 8 s, minus up to 25 % jitter), or waits as
    long as the server's ``Retry-After`` header says. ``timeout`` (seconds) bounds each attempt.

    The client is built on the first call (so defining an agent needs no key) and is thread-safe.
    Call ``close()`` (or use ``with``) to release its connections; an injected ``client`` is left
    open and used with its own settings (``base_url``, ``api_key``, ``timeout`` and
    ``max_retries`` are then ignored).

    Extra keyword arguments (``max_tokens``, ``seed``, ``tool_choice``, ...) are sent with every
    request as they are.
    """

    def __init__(
        self,
        model: str = "gpt-4o-mini",
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 3,
        temperature: float | None = None,
        client: openai.OpenAI | None = None,
        **params: Any,
    ) -> None:
        """Store the settings; nothing is imported or connected until the first call."""
        self.model = model
        self.base_url = base_url
        self.timeout = timeout
        self.max_retries = max_retries
        self.temperature = temperature
        self.params = params
        self._api_key = api_key
        self._client = client
        self._owns_client = client is None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        # Never show the API key.
        where = f", base_url={self.base_url!r}" if self.base_url else ""
        return f"OpenAIChat({self.model!r}{where})"

    def __enter__(self) -> OpenAIChat:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the client this adapter created (an injected client is left to its owner)."""
        if not self._owns_client:
            return
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()

    def complete(self, messages: list[Message], tools: ToolsArg = ()) -> Message:
        """Send the transcript and tool specs; return the reply as an AI message with usage.

        Raises:
            ModelError: the request failed after retries (``details["retryable"]`` says whether a
                later attempt may help), or the reply could not be read (no choices, malformed
                tool call arguments).
            InvalidMessage: the transcript is malformed.
        """
        import openai

        request: dict[str, Any] = {"model": self.model, "messages": to_openai(messages)}
        specs = tool_specs(list(tools))
        if specs:
            request["tools"] = specs
        if self.temperature is not None:
            request["temperature"] = self.temperature
        request.update(self.params)
        client = self._get_client()
        try:
            completion = client.chat.completions.create(**request)
            # A body that is not JSON raises ValueError; one that is not an object comes back as is.
            body = completion.model_dump(mode="json")
        except (openai.APIError, ValueError, AttributeError) as exc:
            raise self._model_error(exc) from exc
        return self._read_completion(body)

    def _get_client(self) -> openai.OpenAI:
        import openai

        with self._lock:
            if self._client is None:
                try:
                    self._client = openai.OpenAI(
                        api_key=self._api_key,
                        base_url=self.base_url,
                        timeout=self.timeout,
                        max_retries=self.max_retries,
                    )
                except openai.OpenAIError as exc:
                    raise ModelError(
                        f"Could not set up the OpenAI client for model {self.model!r} ({exc}). "
                        f"Set OPENAI_API_KEY (and OPENAI_BASE_URL for a compatible server) or "
                        f"pass api_key= to OpenAIChat.",
                        model=self.model,
                        retryable=False,
                    ) from exc
            return self._client

    def _model_error(self, exc: Exception) -> ModelError:
        import openai

        # An injected client has its own retry settings: do not claim a number of attempts then.
        attempts = f" after {self.max_retries + 1} attempt(s)" if self._owns_client else ""
        endpoint = self.base_url or "the endpoint in OPENAI_BASE_URL (or api.openai.com)"
        status = getattr(exc, "status_code", None)
        if isinstance(exc, openai.APITimeoutError):
            advice = (
                f"timed out{attempts} ({self.timeout} s each). Check that {endpoint} is up, or "
                f"raise timeout= for slow models."
            )
            retryable = True
        elif isinstance(exc, openai.APIConnectionError):
            advice = f"could not connect to {endpoint}{attempts}. Check the URL and the network."
            retryable = True
        elif isinstance(exc, openai.AuthenticationError | openai.PermissionDeniedError):
            advice = f"was refused ({status}): check OPENAI_API_KEY or api_key= and its access."
            retryable = False
        elif isinstance(exc, openai.NotFoundError):
            advice = (
                f"got 404: check the model name {self.model!r} and base_url (it usually ends in "
                f"/v1)."
            )
            retryable = False
        elif isinstance(exc, openai.RateLimitError):
            advice = (
                f"was rate limited (429){attempts}. Wait and retry the run, raise max_retries=, "
                f"or check the account's quota."
            )
            retryable = True
        elif isinstance(exc, openai.APIStatusError):
            retryable = exc.status_code >= 500 or exc.status_code in (408, 409)
            advice = f"failed with HTTP {exc.status_code}{attempts}" + (
                ": the provider has a problem, retry the run later."
                if retryable
                else ": the request was rejected; check the messages, tools and params."
            )
        else:
            advice = (
                "returned a response that could not be read: check that the endpoint speaks "
                "chat completions."
            )
            retryable = False
        return ModelError(
            f"The call to model {self.model!r} {advice} ({type(exc).__name__}: {exc})",
            model=self.model,
            status_code=status,
            retryable=retryable,
        )

    def _read_completion(self, completion: Mapping[str, Any]) -> Message:
        choices = completion.get("choices") or []
        if not choices:
            raise ModelError(
                f"Model {self.model!r} returned no choices: check that the endpoint speaks chat "
                f"completions and that the params do not ask for zero completions.",
                model=self.model,
                retryable=True,
            )
        reply: Mapping[str, Any] = choices[0].get("message") or {}
        content = reply.get("content") or reply.get("refusal") or ""
        tool_calls = []
        for call in reply.get("tool_calls") or []:
            function = call.get("function")
            if call.get("type", "function") != "function" or not isinstance(function, Mapping):
                raise ModelError(
                    f"Model {self.model!r} returned a {call.get('type')!r} tool call; only "
                    f"function tools are supported.",
                    model=self.model,
                    retryable=False,
                )
            raw = function.get("arguments") or "{}"
            try:
                args = json.loads(raw)
            except ValueError:
                args = None
            if not isinstance(args, dict):
                raise ModelError(
                    f"Model {self.model!r} called tool {function.get('name')!r} with arguments "
                    f"that are not a JSON object: {raw[:200]!r}. This is usually a one-off: retry "
                    f"the step; if it keeps happening, use a model with reliable tool calling.",
                    model=self.model,
                    retryable=True,
                )
            tool_calls.append({"id": call.get("id"), "name": function.get("name"), "args": args})
        usage = completion.get("usage")
        try:
            message = ai(
                content,
                tool_calls,
                {
                    "input_tokens": usage.get("prompt_tokens") or 0,
                    "output_tokens": usage.get("completion_tokens") or 0,
                }
                if isinstance(usage, Mapping)
                else None,
            )
        except InvalidMessage as exc:
            raise ModelError(
                f"Model {self.model!r} returned a reply that is not a valid AI message ({exc}): "
                f"check that the endpoint speaks chat completions.",
                model=self.model,
                retryable=False,
            ) from exc
        message["response_metadata"] = {
            "model": completion.get("model"),
            "finish_reason": choices[0].get("finish_reason"),
        }
        return message
