"""The ``criogen`` app's tables, one module per area; each is imported here so that
Django finds its models."""

from __future__ import annotations

from criogen.storage.models.agents import AuditEvent, Decision, Document, Effect, MemoryFact
from criogen.storage.models.claims import Claim
from criogen.storage.models.crons import Cron
from criogen.storage.models.langgraph import LangGraphBlob, LangGraphCheckpoint, LangGraphWrite
from criogen.storage.models.outbound import OutboundAttempt
from criogen.storage.models.runs import Assistant, DeadlineFiring, Run
from criogen.storage.models.streams import StreamEvent
from criogen.storage.models.threads import Checkpoint, Thread, Value
from criogen.storage.models.tokens import ApiToken

__all__ = [
    "ApiToken",
    "Assistant",
    "AuditEvent",
    "Checkpoint",
    "Claim",
    "Cron",
    "DeadlineFiring",
    "Decision",
    "Document",
    "LangGraphBlob",
    "LangGraphCheckpoint",
    "LangGraphWrite",
    "Effect",
    "MemoryFact",
    "OutboundAttempt",
    "Run",
    "StreamEvent",
    "Thread",
    "Value",
]
