"""The ``criogen`` app's tables, one module per area; each is imported here so that
Django finds its models."""

from __future__ import annotations

from criogen.storage.models.threads import Checkpoint, Thread, Value

__all__ = ["Checkpoint", "Thread", "Value"]
