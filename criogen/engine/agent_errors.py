"""Errors raised by the agent building blocks: messages, tools and model adapters.

Every error carries a stable ``code`` (the API puts it in the problem+json ``code`` field) and a
message that says what to do about it::

    CriogenError                    (criogen.engine.errors)
    ├── InvalidMessage              invalid_message     a transcript message has a bad field
    ├── InvalidTool                 invalid_tool        a tool's definition or result is unusable
    ├── InvalidToolCall             invalid_tool_call   a model's tool call does not fit the tool
    ├── ModelError                  model_error         the model call failed after retries
    └── ScriptExhausted             script_exhausted    a ScriptedModel ran out of replies

``InvalidToolCall`` is the model's mistake, not the program's: the Agent shows its message to the
model as an error tool result so that the model can correct the call.
"""

from __future__ import annotations

from criogen.engine.errors import CriogenError

__all__ = [
    "InvalidMessage",
    "InvalidTool",
    "InvalidToolCall",
    "ModelError",
    "ScriptExhausted",
]


class InvalidMessage(CriogenError):
    """A message could not be read as a transcript message; the message names the bad field."""

    code = "invalid_message"


class InvalidTool(CriogenError):
    """A function cannot be used as a tool (no description, unsupported type hint, bad result)."""

    code = "invalid_tool"


class InvalidToolCall(CriogenError):
    """A tool call's arguments do not fit the tool's parameters; the message names the argument."""

    code = "invalid_tool_call"


class ModelError(CriogenError):
    """The model call failed after the client's retries; the message says what to check.

    ``details["retryable"]`` tells whether trying again later may help (rate limits, server errors,
    timeouts, connection errors) or not (bad request, authentication, unknown model).
    """

    code = "model_error"


class ScriptExhausted(CriogenError):
    """A ScriptedModel was called more times than its script has items."""

    code = "script_exhausted"
