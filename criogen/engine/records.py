"""Typed records the engine builds and stores as JSON: interrupts, decisions, run errors.

A checkpoint keeps its interrupts, its tasks and its error as plain JSON (that is what
storage writes and what the REST API returns); the engine builds them through these
records so that each shape is written in one place. ``to_dict`` gives the stored JSON
(the same keys, in the same order, as before the records existed) and ``from_dict``
reads it back, tolerating the keys older checkpoints lack.
"""

from __future__ import annotations

import traceback
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, cast

__all__ = [
    "DECISION_TYPES",
    "Decision",
    "DecisionType",
    "Interrupt",
    "PendingCall",
    "RunError",
    "TakenDecision",
]

DecisionType = Literal["approve", "edit", "reject", "respond"]
DECISION_TYPES: tuple[DecisionType, ...] = ("approve", "edit", "reject", "respond")
"""What a person may decide on a pending tool call."""


@dataclass(frozen=True, slots=True)
class PendingCall:
    """A tool call waiting for a person, as listed on an agent's interrupt."""

    id: str
    """The model's tool-call id."""
    name: str
    """The tool's name."""
    args: dict[str, Any]
    """The arguments the model asked for."""
    digest: str
    """SHA-256 of the canonical arguments (what the person saw; see ``args_digest``)."""
    attempts: int | None = None
    """For an ``outcome_unknown`` suspension: how many times the tool was started."""

    def to_dict(self) -> dict[str, Any]:
        """``{"id", "name", "args", "digest", "attempts"?}``."""
        data: dict[str, Any] = {
            "id": self.id,
            "name": self.name,
            "args": self.args,
            "digest": self.digest,
        }
        if self.attempts is not None:
            data["attempts"] = self.attempts
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PendingCall:
        """The call as stored on an interrupt."""
        attempts = data.get("attempts")
        return cls(
            id=str(data["id"]),
            name=str(data["name"]),
            args=dict(data.get("args") or {}),
            digest=str(data.get("digest", "")),
            attempts=int(attempts) if attempts is not None else None,
        )


@dataclass(frozen=True, slots=True)
class Interrupt:
    """One pending suspension of a thread (agents: an approval or an unknown outcome;
    workflows: a node's ``suspend()``)."""

    id: str
    """Random UUID; a workflow resumes one interrupt of several by this id."""
    node: str
    """The node that suspended (``tools`` for an agent)."""
    reason: str
    """Why: ``approval``, ``outcome_unknown``, or a workflow's own text."""
    payload: Any
    """JSON shown to the person (an agent's ``action_requests``/``review_configs``)."""
    index: int | None = None
    """Workflows: which ``suspend()`` call of the node this is (0 for the first)."""
    calls: tuple[PendingCall, ...] | None = None
    """Agents: the calls waiting for a decision, in the model's order."""
    extra: Mapping[str, Any] = field(default_factory=dict)
    """More JSON kept on the interrupt: deadline options (``deadline``, ``default``,
    ``remind``) or a workflow's ``suspend(**extra)``."""

    def to_dict(self) -> dict[str, Any]:
        """``{"id", "node", "index"?, "reason", "payload", "calls"?, **extra}``."""
        data: dict[str, Any] = {"id": self.id, "node": self.node}
        if self.index is not None:
            data["index"] = self.index
        data["reason"] = self.reason
        data["payload"] = self.payload
        if self.calls is not None:
            data["calls"] = [c.to_dict() for c in self.calls]
        data.update(self.extra)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Interrupt:
        """The interrupt as stored on a checkpoint."""
        known = {"id", "node", "index", "reason", "payload", "calls"}
        calls = data.get("calls")
        index = data.get("index")
        return cls(
            id=str(data.get("id", "")),
            node=str(data.get("node", "")),
            reason=str(data.get("reason", "")),
            payload=data.get("payload"),
            index=int(index) if index is not None else None,
            calls=tuple(PendingCall.from_dict(c) for c in calls) if calls is not None else None,
            extra={k: v for k, v in data.items() if k not in known},
        )


@dataclass(frozen=True, slots=True)
class Decision:
    """A person's decision on one pending call, checked (see ``normalize_decision``)."""

    type: DecisionType
    """``approve``, ``edit``, ``reject`` or ``respond``."""
    args: dict[str, Any] | None = None
    """For ``edit``: the arguments the tool runs with instead."""
    message: str | None = None
    """For ``reject``: the reason; for ``respond``: the tool result given to the model."""

    def to_dict(self) -> dict[str, Any]:
        """``{"type", "args"?, "message"?}`` (only the keys the type uses)."""
        data: dict[str, Any] = {"type": self.type}
        if self.args is not None:
            data["args"] = self.args
        if self.message is not None:
            data["message"] = self.message
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Decision:
        """A decision as stored (in a checkpoint's tasks or metadata)."""
        kind = data.get("type", "approve")
        if kind not in DECISION_TYPES:
            kind = "approve"
        args = data.get("args")
        message = data.get("message")
        return cls(
            type=cast(DecisionType, kind),
            args=dict(args) if isinstance(args, Mapping) else None,
            message=str(message) if message is not None else None,
        )


@dataclass(frozen=True, slots=True)
class TakenDecision:
    """A decision as the resumed run carries it in its checkpoint's ``tasks``, keyed by
    call id: what was decided, on which suspension, by whom."""

    decision: Decision
    """What was decided."""
    reason: str
    """The suspension's reason (stored as ``for``): ``approval`` or ``outcome_unknown``."""
    by: str | None
    """Who decided, when known."""
    version: int
    """The version of the suspended checkpoint it answers."""
    attempts: int | None = None
    """For ``outcome_unknown``: the attempts the decision was made on (a rerun is
    allowed only while they match the ledger)."""

    def to_dict(self) -> dict[str, Any]:
        """``{"type", "args"?, "message"?, "for", "by", "version", "attempts"?}``."""
        data = self.decision.to_dict()
        data["for"] = self.reason
        data["by"] = self.by
        data["version"] = self.version
        if self.attempts is not None:
            data["attempts"] = self.attempts
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TakenDecision:
        """The decision as stored in ``tasks["decisions"][call_id]``."""
        attempts = data.get("attempts")
        by = data.get("by")
        return cls(
            decision=Decision.from_dict(data),
            reason=str(data.get("for", "approval")),
            by=str(by) if by is not None else None,
            version=int(data.get("version", 0)),
            attempts=int(attempts) if attempts is not None else None,
        )


TRACEBACK_CHARS = 4000
"""The end of a failure's traceback kept on its checkpoint."""


@dataclass(frozen=True, slots=True)
class RunError:
    """Why a run failed, as kept on its ``failure`` checkpoint (``Checkpoint.error``)."""

    type: str
    """The exception's class name."""
    code: str
    """Its stable ``code`` (a ``CriogenError``), else ``run_error`` / ``node_error``."""
    message: str
    """``str(exc)``."""
    node: str | None
    """The node (or agent phase, ``model``/``tools``) that failed."""
    traceback: str
    """The end of the formatted traceback (the last frames)."""

    @classmethod
    def from_exception(cls, exc: BaseException, *, node: str | None, code: str) -> RunError:
        """The record of ``exc``; ``code`` is used when the exception has none."""
        text = "".join(traceback.format_exception(exc, limit=-8))[-TRACEBACK_CHARS:]
        return cls(
            type=type(exc).__name__,
            code=getattr(exc, "code", None) or code,
            message=str(exc),
            node=node,
            traceback=text,
        )

    def to_dict(self) -> dict[str, Any]:
        """``{"type", "code", "message", "node", "traceback"}``."""
        return {
            "type": self.type,
            "code": self.code,
            "message": self.message,
            "node": self.node,
            "traceback": self.traceback,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunError:
        """The error as stored on a checkpoint (older ones may lack ``code``)."""
        node = data.get("node")
        return cls(
            type=str(data.get("type", "")),
            code=str(data.get("code") or "run_error"),
            message=str(data.get("message", "")),
            node=str(node) if node is not None else None,
            traceback=str(data.get("traceback", "")),
        )
