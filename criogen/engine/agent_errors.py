"""Old path of the agent errors (messages, tools, model adapters): they are defined
with every other error in :mod:`criogen.engine.errors`. Kept for one release."""

from __future__ import annotations

from criogen.engine.errors import (
    InvalidMessage,
    InvalidTool,
    InvalidToolCall,
    ModelError,
    ScriptExhausted,
)

__all__ = [
    "InvalidMessage",
    "InvalidTool",
    "InvalidToolCall",
    "ModelError",
    "ScriptExhausted",
]
