"""What every run of an agent thread holds: its options, its lease on the thread, and
how it writes checkpoints, replies and fails (:class:`TurnBase`).

The turn itself is built on this in layers, one module each: the approvals
(:mod:`.approvals`), the effect ledger (:mod:`.effects`) and the loop
(:mod:`.turn`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, NoReturn

from criogen.engine.active_run import ActiveRun, OnBusy, check_durability, check_on_busy
from criogen.engine.agents.reply import RESERVED_KEY, Reply, text_of
from criogen.engine.checkpoints import Checkpoint, Source, Status, to_snapshot
from criogen.engine.errors import CriogenError, InvalidArgument, RunCancelled, RunFailed, ThreadBusy
from criogen.engine.records import RunError
from criogen.engine.state import Delta
from criogen.engine.store import Storage
from criogen.engine.threads import check_door

if TYPE_CHECKING:
    from criogen.engine.agents.config import Agent
    from criogen.engine.agents.thread import AgentThread

__all__ = ["RUN_OPTIONS", "Lease", "Suspended", "TurnBase", "in_worker", "open_active"]

RUN_OPTIONS = (
    "durability",
    "on_busy",
    "busy_timeout",
    "run_id",
    "metadata",
    "should_stop",
    "door",
    "expected",
)
"""The options a turn takes besides its input (``by`` is an argument of its own)."""


def in_worker(storage: Storage, fn: Callable[..., Reply], *args: Any, **kwargs: Any) -> Reply:
    """Run ``fn`` on an asyncio worker thread, then close that thread's database
    connection: the executor's threads end with the event loop, and a connection left
    open in a dead thread is never closed."""
    try:
        return fn(*args, **kwargs)
    finally:
        storage.close()


def open_active(active: ActiveRun) -> None:
    """Open a run; if loading the head fails (a wrong encryption key…), give the lease
    back instead of leaving it held by the heartbeat."""
    try:
        active.open()
    except ThreadBusy:
        raise
    except BaseException:
        active.close(flush=False, raise_errors=False)
        raise


class Suspended(Exception):
    """Internal: the turn stopped at a suspend checkpoint."""

    def __init__(self, reply: Reply) -> None:
        super().__init__("suspended")
        self.reply = reply


class Lease:
    """Context manager: the turn holds ``active`` while inside."""

    def __init__(self, turn: TurnBase, active: ActiveRun, *, opened: bool = False) -> None:
        self.turn = turn
        self.active = active
        self.opened = opened

    def __enter__(self) -> ActiveRun:
        if not self.opened:
            open_active(self.active)
        self.turn.active = self.active
        return self.active

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self.active.close(flush=True, raise_errors=exc is None)


class TurnBase:
    """One run of an agent thread: its options, its lease, and its writes."""

    def __init__(
        self,
        thread: AgentThread,
        options: Mapping[str, Any],
        metadata: dict[str, Any] | None,
        by: str | None,
    ) -> None:
        unknown = set(options) - set(RUN_OPTIONS)
        if unknown:
            raise InvalidArgument(
                f"unknown option(s) {sorted(unknown)}; use {list(RUN_OPTIONS)}.",
                field=sorted(unknown)[0],
            )
        self.thread = thread
        self.agent: Agent = thread.agent
        self.storage: Storage = thread.storage
        self.options: dict[str, Any] = {k: v for k, v in options.items() if v is not None}
        self.metadata = dict(metadata or self.options.pop("metadata", None) or {})
        self.by = by
        self.door = check_door(self.options.pop("door", "python"))
        self.expected: str | None = self.options.pop("expected", None)
        self.active: ActiveRun | None = None
        self.steps = 0

    # -- lease ----------------------------------------------------------------------------

    def _make_active(self, on_busy: OnBusy | None = None) -> ActiveRun:
        agent, o = self.agent, self.options
        return ActiveRun(
            self.storage,
            self.thread.id,
            run_id=o.get("run_id"),
            durability=check_durability(o.get("durability") or agent.durability),
            on_busy=check_on_busy(on_busy or o.get("on_busy") or agent.on_busy),
            busy_timeout=o.get("busy_timeout", agent.busy_timeout),
            lease_seconds=agent.lease_seconds,
            should_stop=o.get("should_stop"),
        )

    def lease(self) -> Lease:
        """The thread's lease for this turn (a context manager)."""
        return Lease(self, self._make_active())

    @property
    def run(self) -> ActiveRun:
        """The run while the turn holds the thread."""
        assert self.active is not None, "the turn does not hold the thread"
        return self.active

    # -- the loop's hooks -------------------------------------------------------------------

    def _loop(self, state: dict[str, Any], phase: str, tasks: dict[str, Any]) -> Reply:
        """Walk model → tools → model until the turn answers or suspends."""
        raise NotImplementedError

    def _check_stop(self, state: dict[str, Any], phase: str, tasks: dict[str, Any]) -> None:
        """Stop between two steps when the runner asks (cancel, shutdown): the head is
        the last step's checkpoint, and retry() continues from it. A ``should_stop`` that
        raises TimeoutError (the run's time limit passed) ends the run with a failure
        checkpoint carrying it instead."""
        active = self.active
        if active is None or active.should_stop is None:
            return
        try:
            stop = active.should_stop()
        except TimeoutError as exc:
            self._fail(state, [phase], tasks, exc)
        if stop:
            raise RunCancelled(
                f"run {active.run_id} on thread {active.thread_id!r} was stopped before its "
                "next step; retry() continues it.",
                thread_id=active.thread_id,
                run_id=active.run_id,
            )

    def _counters(self, state: Mapping[str, Any]) -> dict[str, Any]:
        c = state.get(RESERVED_KEY) or {}
        usage = c.get("usage") or {}
        return {
            "steps": int(c.get("steps", 0)),
            "tool_calls": int(c.get("tool_calls", 0)),
            "usage": {
                "input_tokens": int(usage.get("input_tokens", 0)),
                "output_tokens": int(usage.get("output_tokens", 0)),
            },
        }

    # -- writes -----------------------------------------------------------------------------

    def _write(
        self,
        source: Source,
        status: Status,
        state: dict[str, Any],
        delta: Delta,
        next: list[str],
        tasks: dict[str, Any],
        *,
        interrupts: Sequence[dict[str, Any]] = (),
        error: dict[str, Any] | None = None,
        updates: dict[str, Any] | None = None,
        final: bool = False,
    ) -> Checkpoint | None:
        active = self.run
        return active.write(
            source=source,
            status=status,
            state=state,
            delta=delta,
            next=next,
            interrupts=interrupts,
            tasks=tasks,
            error=error,
            metadata={**self.metadata, "step": active._tip_version + 1},
            updates=updates,
            final=final,
        )

    def _reply(self, status: Literal["completed", "suspended"], state: dict[str, Any]) -> Reply:
        active = self.run
        active.flush()
        last = active.last
        assert last is not None
        messages = state.get("messages", [])
        text = text_of(messages[-1].get("content")) if messages else ""
        return Reply(status, text, [], state, last, self.thread.id, active.run_id)

    def _fail(
        self, state: dict[str, Any], nxt: list[str], tasks: dict[str, Any], exc: BaseException
    ) -> NoReturn:
        """Write the failure checkpoint (state as before the failed step) and raise."""
        node = nxt[0] if nxt else None
        error = RunError.from_exception(exc, node=node, code="run_error")
        checkpoint = self._write(
            "failure", "failed", state, {}, nxt, tasks, error=error.to_dict(), final=True
        )
        assert checkpoint is not None
        if isinstance(exc, CriogenError):
            exc.checkpoint = checkpoint
            exc.snapshot = to_snapshot(checkpoint)
            raise exc
        raise RunFailed(
            f"the agent's {node or 'run'} step raised {type(exc).__name__}: {exc}. "
            "The thread's head is now a failure checkpoint: retry() continues from it, "
            "send() starts a new turn.",
            checkpoint=checkpoint,
            snapshot=to_snapshot(checkpoint),
            thread_id=self.thread.id,
            node=node,
        ) from exc
