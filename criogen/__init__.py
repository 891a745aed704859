"""Criogen: run AI agents and workflows durably, with a person in the loop.

Usable from a plain script (no Django settings needed)::

    from criogen import Workflow, Storage, START, END, suspend
    from criogen import Agent, Memory, tool
"""

from __future__ import annotations

from criogen.engine.agents import Agent, AgentThread, Reply
from criogen.engine.checkpoints import Checkpoint
from criogen.engine.errors import CriogenError
from criogen.engine.memory import Collection, Memory
from criogen.engine.store import Storage
from criogen.engine.tools import tool
from criogen.engine.workflows import (
    END,
    START,
    CompiledWorkflow,
    NodeContext,
    RunResult,
    Workflow,
    WorkflowThread,
    suspend,
)

__version__ = "0.1.0"

__all__ = [
    "END",
    "START",
    "Agent",
    "AgentThread",
    "Checkpoint",
    "Collection",
    "CompiledWorkflow",
    "CriogenError",
    "Memory",
    "NodeContext",
    "Reply",
    "RunResult",
    "Storage",
    "Workflow",
    "WorkflowThread",
    "__version__",
    "suspend",
    "tool",
]
