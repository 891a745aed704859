"""The one hand-off from the services to the runner.

Services create runs and cancel them; the runner executes them. The services never
import the runner (no import cycle between them): they call these functions, and the
runner that this process uses registers itself at start-up (``StorageConfig.ready``).
Every call happens after the transaction that wrote the run has committed
(``transaction.on_commit``), so a runner never sees a run that is not there.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Protocol

__all__ = ["Runner", "enqueue", "register", "start_next", "stop"]


class Runner(Protocol):
    """What the services ask of a runner."""

    def enqueue_run(self, run_id: Any, *, at: datetime | None = None) -> None:
        """Have the committed run executed (harmless twice: one claim wins); ``at``:
        not before that time (a delayed run)."""

    def request_stop(self, run_id: Any) -> None:
        """Stop the run before its next step, if this process executes it."""

    def start_next(self, thread_id: str) -> str | None:
        """Enqueue the oldest pending run of the thread; return its id."""


_runner: Runner | None = None


def register(runner: Runner) -> None:
    """Make ``runner`` the one the services hand runs to (at start-up)."""
    global _runner
    _runner = runner


def _current() -> Runner:
    if _runner is None:
        raise RuntimeError(
            "no runner is registered: the criogen.storage app registers criogen.runner "
            "when Django starts (django.setup())."
        )
    return _runner


def enqueue(run_id: Any, *, at: datetime | None = None) -> None:
    """Hand the committed run to the runner (``at``: a delayed run's time)."""
    _current().enqueue_run(run_id, at=at)


def stop(run_id: Any) -> None:
    """Ask the runner to stop the run before its next step."""
    _current().request_stop(run_id)


def start_next(thread_id: str) -> str | None:
    """Have the runner start the thread's next pending run."""
    return _current().start_next(thread_id)
