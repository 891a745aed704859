"""The Criogen engine: workflows, agents, checkpoints and runs. Imports no Django."""

from __future__ import annotations

from criogen.engine.active_run import ActiveRun
from criogen.engine.checkpoints import Checkpoint, CheckpointId, RunId, ThreadId
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

__all__ = [
    "END",
    "START",
    "ActiveRun",
    "Checkpoint",
    "CheckpointId",
    "CompiledWorkflow",
    "NodeContext",
    "RunId",
    "RunResult",
    "ThreadId",
    "Workflow",
    "WorkflowThread",
    "suspend",
]
