"""How an agent turn ended (:class:`Reply`), and the shape of an agent's state.

The state holds the transcript under ``messages`` (appended), the values passed with
``send`` (overwritten), and the engine's counters under :data:`RESERVED_KEY`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from criogen.engine.checkpoints import Checkpoint, to_snapshot
from criogen.engine.messages import Message

__all__ = ["MODEL", "RESERVED_KEY", "REDUCERS", "TOOLS", "Reply", "open_calls", "text_of"]

RESERVED_KEY = "__criogen__"
"""The state key of the engine's counters: ``steps``, ``tool_calls``, ``usage``."""
MODEL, TOOLS = "model", "tools"
"""The two phases of a turn, as a checkpoint's ``next`` names them."""
REDUCERS: dict[str, Any] = {"messages": "append"}
"""How an agent's state merges updates: the transcript grows, other keys are replaced."""


def text_of(content: Any) -> str:
    """The text of a message's content (a string, or the text blocks of a list)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            b if isinstance(b, str) else str(b.get("text", ""))
            for b in content
            if isinstance(b, str) or (isinstance(b, Mapping) and b.get("type") == "text")
        )
    return ""


def open_calls(state: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The tool calls of the last AI message that have no tool message yet, in order."""
    messages = state.get("messages") or []
    answered: set[str] = set()
    for message in reversed(messages):
        if message.get("type") == "tool":
            answered.add(message.get("tool_call_id"))
        elif message.get("type") == "ai":
            return [c for c in message.get("tool_calls") or [] if c["id"] not in answered]
        else:
            return []
    return []


@dataclass(frozen=True)
class Reply:
    """How an agent turn ended (a failure raises instead: ModelError, MaxStepsExceeded,
    RunFailed, each with ``.checkpoint``)."""

    status: Literal["completed", "suspended"]
    """``completed`` (a final answer) or ``suspended`` (waiting for a decision)."""
    text: str
    """The final answer's text (``""`` while suspended)."""
    pending: list[dict[str, Any]]
    """While suspended: the calls waiting for a decision, ``{"id", "name", "args",
    "digest"}``, in order."""
    state: dict[str, Any]
    """The state at the end of the turn (``messages``, send values, ``__criogen__``)."""
    checkpoint: Checkpoint
    """The thread's head after the turn."""
    thread_id: str
    """The thread."""
    run_id: str
    """The run that produced this reply."""

    @property
    def messages(self) -> list[Message]:
        """The transcript."""
        return list(self.state.get("messages", []))

    @property
    def interrupts(self) -> list[dict[str, Any]]:
        """The pending interrupt (at most one), as stored on the checkpoint."""
        return list(self.checkpoint.interrupts)

    @property
    def reason(self) -> str | None:
        """Why it is suspended: ``approval`` or ``outcome_unknown`` (None when completed)."""
        if not self.checkpoint.interrupts:
            return None
        reason = self.checkpoint.interrupts[0].get("reason")
        return str(reason) if reason is not None else None

    @property
    def usage(self) -> dict[str, int]:
        """Tokens used on this thread so far, ``{"input_tokens", "output_tokens"}``."""
        return dict(self.state.get(RESERVED_KEY, {}).get("usage", {}))

    @property
    def snapshot(self) -> dict[str, Any]:
        """The head checkpoint as plain JSON."""
        return to_snapshot(self.checkpoint)
