"""A run holding a thread: the lease, the heartbeat, and durable checkpoint writes.

Workflows and agents both run inside an :class:`ActiveRun`. It takes the thread's
lease (waiting or failing when another run holds it), keeps the lease alive with a
heartbeat so other processes can tell a live run from a dead one, numbers the
checkpoints, and writes them as the durability mode says:

- ``sync``: each checkpoint is written before the next step starts.
- ``async``: checkpoints are written by a background thread while the next step runs;
  writes that queue up behind a slow commit go in one transaction (group commit).
  Everything is flushed before the run returns.
- ``exit``: nothing is written until the run completes, fails or suspends; then one
  checkpoint holds everything the run changed.

This is one run inside the engine, in whatever process calls it. The server's run
executor, which claims runs from the database and runs them on threads or Celery
workers, is :mod:`criogen.runner`; it calls the engine, which calls this.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
import weakref
from collections.abc import Callable, MutableMapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, cast

from criogen.engine.checkpoints import (
    Checkpoint,
    CheckpointId,
    CheckpointWrite,
    RunId,
    Source,
    Status,
    ThreadId,
    new_id,
    utcnow,
)
from criogen.engine.errors import InvalidArgument, LeaseLost, ThreadBusy
from criogen.engine.state import Delta, compose

if TYPE_CHECKING:
    from criogen.engine.store import Storage

__all__ = [
    "DEFAULT_BUSY_TIMEOUT",
    "DEFAULT_LEASE_SECONDS",
    "DURABILITIES",
    "ActiveRun",
    "Durability",
    "OnBusy",
    "check_durability",
    "check_on_busy",
]

Durability = Literal["sync", "async", "exit"]
OnBusy = Literal["wait", "fail"]
DURABILITIES: tuple[str, ...] = ("sync", "async", "exit")
DEFAULT_LEASE_SECONDS = 30.0
DEFAULT_BUSY_TIMEOUT = 60.0
_ENDS_RUN = frozenset({"completed", "suspended", "failed"})
"""Statuses of a ``final`` checkpoint that ends the run: its write gives the lease back."""

logger = logging.getLogger("criogen.engine")


def check_durability(value: Any, field: str = "durability") -> Durability:
    """Return ``value`` if it is a durability mode, else raise InvalidArgument."""
    if value not in DURABILITIES:
        raise InvalidArgument(
            f"{field} is {value!r}; use 'sync', 'async' or 'exit'.", field=field, value=value
        )
    return cast(Durability, value)


def check_on_busy(value: Any) -> OnBusy:
    """Return ``value`` if it is an on_busy policy, else raise InvalidArgument."""
    if value not in ("wait", "fail"):
        raise InvalidArgument(f"on_busy is {value!r}; use 'wait' or 'fail'.", field="on_busy")
    return cast(OnBusy, value)


class _Heartbeat:
    """One daemon thread per storage that renews the leases of its live runs.

    The thread stays for ``LINGER`` seconds after the last run ends, so a process that
    runs one short run after another does not start a thread per run.
    """

    LINGER = 5.0

    def __init__(self, storage: Storage) -> None:
        # Weak: the registry below is keyed weakly by the storage, and a strong
        # reference from its value would keep every Storage ever used alive.
        self._storage = weakref.ref(storage)
        self._runs: dict[str, ActiveRun] = {}
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None
        self._interval = float("inf")
        """How long the loop's current wait lasts (from when it started)."""

    def add(self, run: ActiveRun) -> None:
        with self._wake:
            self._runs[run.run_id] = run
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._loop, name="criogen-heartbeat", daemon=True
                )
                self._thread.start()
            elif run.lease_seconds / 3 < self._interval:
                # Wake the loop only when this run needs an earlier renewal than the
                # wait in progress allows (waking it per run costs a thread switch).
                self._wake.notify()

    def remove(self, run: ActiveRun) -> None:
        with self._wake:
            self._runs.pop(run.run_id, None)

    def _loop(self) -> None:
        try:
            while True:
                with self._wake:
                    if not self._runs:
                        self._interval = self.LINGER
                        self._wake.wait(self.LINGER)
                        if not self._runs:
                            self._thread = None
                            self._interval = float("inf")
                            return
                    interval = min(r.lease_seconds for r in self._runs.values()) / 3
                    self._interval = interval
                    self._wake.wait(interval)
                    # add() wakes this loop early to pick up a shorter interval: renew
                    # only the leases that are due, not every lease at every wake-up.
                    now = time.monotonic()
                    due = [
                        r
                        for r in self._runs.values()
                        if now - r._renewed_at >= r.lease_seconds / 3 * 0.9
                    ]
                for run in due:
                    try:
                        run.renew()
                    except Exception as exc:  # noqa: BLE001 - logged; the loop goes on
                        # A database hiccup must not stop the heartbeat of every run,
                        # and a broken connection must not stay broken: close it, and
                        # the next renewal (a third of a lease later) opens a new one.
                        logger.warning("renewing the lease of run %s failed: %r", run.run_id, exc)
                        self._reconnect()
        finally:
            # The thread's database connection (ORM storage) would outlive it: close it.
            self._reconnect()

    def _reconnect(self) -> None:
        """Close this thread's storage connection; the next renewal opens a new one."""
        try:
            storage = self._storage()
            if storage is not None:
                storage.close()
        except Exception:
            logger.exception("closing the heartbeat's storage connection failed")


_heartbeats: weakref.WeakKeyDictionary[Storage, _Heartbeat] = weakref.WeakKeyDictionary()
_writers: weakref.WeakKeyDictionary[Storage, ThreadPoolExecutor] = weakref.WeakKeyDictionary()
_writers_by_database: dict[str, ThreadPoolExecutor] = {}
_registry_lock = threading.Lock()


def _heartbeat_for(storage: Storage) -> _Heartbeat:
    with _registry_lock:
        beat = _heartbeats.get(storage)
        if beat is None:
            beat = _heartbeats[storage] = _Heartbeat(storage)
        return beat


def _pool_for(storage: Storage) -> ThreadPoolExecutor:
    # One pool per database (Django alias), not per Storage object: each pool thread
    # keeps its own connection open, and a process may make many Storage objects on
    # one database (one per request or test); per object, the connections pile up.
    alias = getattr(storage, "alias", None)
    pools: MutableMapping[Any, ThreadPoolExecutor] = (
        _writers_by_database if isinstance(alias, str) else _writers
    )
    key: Any = alias if isinstance(alias, str) else storage
    with _registry_lock:
        pool = pools.get(key)
        if pool is None:
            pool = pools[key] = ThreadPoolExecutor(
                max_workers=8, thread_name_prefix="criogen-writer"
            )
        return pool


class _BackgroundWriter:
    """Writes one run's checkpoints in order, off the run's thread (``async``).

    Checkpoints that queue up while a commit is in flight go in the next transaction
    together, so a run whose steps are faster than the disk pays one commit per batch.
    """

    def __init__(self, storage: Storage, lease_id: str) -> None:
        self._storage = storage
        self._lease_id = lease_id
        self._lock = threading.Lock()
        self._queue: list[CheckpointWrite] = []
        self._releasing: CheckpointWrite | None = None
        self._running = False
        self._idle = threading.Event()
        self._idle.set()
        self._error: BaseException | None = None
        self.committed = False
        """True once a batch of this run's checkpoints has committed."""

    def submit(self, write: CheckpointWrite, *, release: bool = False) -> None:
        """Queue ``write``; with ``release`` its batch also gives the lease back."""
        with self._lock:
            if self._error is not None:
                raise self._error
            self._queue.append(write)
            if release:
                self._releasing = write
            if self._running:
                return
            self._running = True
            self._idle.clear()
        _pool_for(self._storage).submit(self._drain)

    def _drain(self) -> None:
        while True:
            with self._lock:
                batch, self._queue = self._queue, []
                if not batch:
                    self._running = False
                    self._idle.set()
                    return
            try:
                if batch[-1] is self._releasing:
                    self._storage.write_and_release(batch, lease_id=self._lease_id)
                else:
                    self._storage.write(batch, lease_id=self._lease_id)
                self.committed = True
                self._storage.notify(batch)
            except BaseException as exc:  # noqa: BLE001 - handed to the run's thread
                with self._lock:
                    self._error = exc
                    self._queue.clear()
                    self._running = False
                    self._idle.set()
                return

    def flush(self) -> None:
        self._idle.wait()
        if self._error is not None:
            raise self._error


class ActiveRun:
    """A run that holds a thread's lease and writes its checkpoints.

    Use as a context manager: entering takes the lease and loads the head
    (:attr:`head`); leaving flushes pending writes and releases the lease, also when
    the run raised. After a crash the lease simply expires.
    """

    def __init__(
        self,
        storage: Storage,
        thread_id: str,
        *,
        run_id: str | None = None,
        durability: Durability = "async",
        on_busy: OnBusy = "wait",
        busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        should_stop: Callable[[], bool] | None = None,
        new_thread: bool = False,
    ) -> None:
        self.storage = storage
        self.thread_id = ThreadId(thread_id)
        self.run_id = RunId(run_id or new_id())
        self.durability = check_durability(durability)
        self.on_busy = check_on_busy(on_busy)
        self.busy_timeout = busy_timeout
        self.lease_seconds = lease_seconds
        self.should_stop = should_stop
        """Asked before each step; True stops the run with RunCancelled (cancel, shutdown).
        Raising TimeoutError (a time limit passed) ends the run with a failure checkpoint
        that carries it: retry() continues from there."""
        self.head: Checkpoint | None = None
        """The thread's head when the run took the lease."""
        self.last: Checkpoint | None = None
        """The newest checkpoint this run wrote (or, for ``exit``, will write)."""
        self._tip_version = 0
        self._tip_values: dict[str, int] = {}
        self._tip_bases: dict[str, int] = {}
        self._tip_id: CheckpointId | None = None
        self._exit_delta: Delta = {}
        self._writer: _BackgroundWriter | None = None
        self._lost = False
        self._held = False
        self._released = False
        """True once a run-ending write gave the lease back (``close`` has nothing to do)."""
        self._renewed_at = 0.0
        self._new_thread = new_thread
        """``thread_id`` is one the engine just made up (``app.run()`` on a fresh
        thread): no row exists and nobody else knows the id, so the run takes no lease
        up front; its first write creates the thread holding the lease
        (``CheckpointWrite.new_thread``) and fails with LeaseLost if the id is taken."""
        self._create = False
        """The next write creates the thread (set by ``open`` on a new thread)."""
        self._unborn = False
        """True from ``open`` on a new thread until its creating write has committed:
        there is no row yet to renew or give back."""
        self._beat = _heartbeat_for(storage)
        """The storage's heartbeat (one per storage, for as long as the storage lives)."""
        self.audit: Any = None
        """The audit event (``AuditRecord``) of the person's action this run carries
        out; the run's next stored checkpoint carries it, so both commit together."""

    # -- lease -----------------------------------------------------------------------

    def __enter__(self) -> ActiveRun:
        self.open()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close(flush=True, raise_errors=exc is None)

    def open(self) -> None:
        """Take the lease (as ``on_busy`` says) and load the head."""
        if self._new_thread:
            # Nothing to take and no head to read: the first write creates the thread.
            # One statement per run fewer (for ``exit``, one instead of two).
            self._new_thread = False
            self._held = self._create = self._unborn = True
            self._released = False
            self.head = None
            return
        deadline = time.monotonic() + self.busy_timeout
        delay = 0.002
        while True:
            # One call: on the SQL backends the lease statement also tells the head's
            # version, so a fresh thread costs one round trip. If reading the head
            # fails (a wrong encryption key, a lost connection), storage has already
            # given the lease back.
            taken, head = self.storage.acquire_head(
                self.thread_id, self.run_id, seconds=self.lease_seconds
            )
            if taken:
                break
            remaining = deadline - time.monotonic()
            if self.on_busy == "fail" or remaining <= 0:
                waited = "" if self.on_busy == "fail" else f" after waiting {self.busy_timeout}s"
                raise ThreadBusy(
                    f"thread {self.thread_id!r} is busy with another run{waited}; try again "
                    "later, or pass on_busy='wait' with a longer timeout.",
                    thread_id=self.thread_id,
                )
            time.sleep(min(delay, remaining))
            delay = min(delay * 2, 0.2)
        self._held = True
        self._released = False
        self._renewed_at = time.monotonic()
        self._beat.add(self)
        self.head = head
        self.start_from(head)

    def start_from(self, checkpoint: Checkpoint | None) -> None:
        """Continue the numbering from ``checkpoint`` (the head, or an imported one)."""
        if checkpoint is not None:
            self._tip_version = checkpoint.version
            self._tip_values = dict(checkpoint.value_versions)
            self._tip_bases = dict(checkpoint.value_bases)
            self._tip_id = checkpoint.id

    def renew(self) -> None:
        """Extend the lease (called by the heartbeat)."""
        self._renewed_at = time.monotonic()
        if not self._exists():
            # The creating write is still on the background writer's queue: its row
            # holds a fresh lease once it commits, and until then there is no row.
            return
        if (
            self._held
            and not self._released
            and not self.storage.renew(self.thread_id, self.run_id, seconds=self.lease_seconds)
        ):
            self._lost = True

    def _exists(self) -> bool:
        """Whether the thread's row exists (False until a new thread's creating write
        has committed)."""
        if self._unborn and self._writer is not None and self._writer.committed:
            self._unborn = False
        return not self._unborn

    def close(self, *, flush: bool = True, raise_errors: bool = True) -> None:
        """Flush what is queued, stop the heartbeat and give the thread back."""
        if not self._held:
            return
        try:
            if flush:
                self.flush()
        except BaseException:
            if raise_errors:
                raise
        finally:
            if not self._released:
                self._beat.remove(self)
                if self._exists():  # else no row was written: nothing to give back
                    self.storage.release(self.thread_id, self.run_id)
            # else: the run-ending write gave the lease back and stopped the heartbeat.
            self._held = False
            self._released = False

    def _retake(self) -> None:
        """Take the lease again after a run-ending write gave it back (a caller that
        writes on after a completed, suspended or failed checkpoint)."""
        if not self.storage.acquire(self.thread_id, self.run_id, seconds=self.lease_seconds):
            raise LeaseLost(
                f"run {self.run_id} gave thread {self.thread_id!r} back and another run "
                "has taken it since.",
                thread_id=self.thread_id,
            )
        self._released = False
        self._renewed_at = time.monotonic()
        self._beat.add(self)

    # -- checkpoints -----------------------------------------------------------------

    def write(
        self,
        *,
        source: Source,
        status: Status,
        state: dict[str, Any],
        delta: Delta,
        next: Sequence[str] = (),
        interrupts: Sequence[dict[str, Any]] = (),
        tasks: dict[str, Any] | None = None,
        error: dict[str, Any] | None = None,
        metadata: dict[str, Any] | None = None,
        value_versions: dict[str, int] | None = None,
        value_bases: dict[str, int] | None = None,
        updates: dict[str, Any] | None = None,
        final: bool = False,
        parent_id: str | None = None,
    ) -> Checkpoint | None:
        """Record a checkpoint; return it, or None when ``exit`` durability defers it.

        ``final`` marks the run's last checkpoint (completed, suspended, failed): it is
        always written, also with ``exit``; when its status ends the run (completed,
        suspended, failed) the same write gives the lease back (a later write takes it
        again). ``value_versions`` is only for forks, which
        copy another checkpoint's values instead of storing a delta. ``updates`` (what
        each node returned) goes to storage listeners only. ``parent_id`` is the
        checkpoint this one follows: by default the run's previous one, and for a fork
        the checkpoint it copies (``metadata["forked_from"]``).
        """
        if self._released:
            self._retake()
        if self._lost:
            raise LeaseLost(
                f"run {self.run_id} lost its lease on thread {self.thread_id!r} (its "
                "heartbeat could not renew it); another run may have taken over.",
                thread_id=self.thread_id,
            )
        if self.durability == "exit" and value_versions is None:
            self._exit_delta = compose(self._exit_delta, delta)
            if not final:
                return None
            delta, self._exit_delta = self._exit_delta, {}
        version = self._tip_version + 1
        prev: dict[str, int] = {}
        if value_versions is None:
            value_versions = dict(self._tip_values)
            value_bases = dict(self._tip_bases)
            for key, change in delta.items():
                if change.op == "append" and key in value_versions:
                    prev[key] = value_versions[key]
                    value_bases[key] = self._tip_bases.get(key, 0)
                else:
                    value_bases[key] = version
                value_versions[key] = version
        value_bases = value_bases or {}
        checkpoint = Checkpoint(
            id=CheckpointId(new_id()),
            thread_id=self.thread_id,
            run_id=self.run_id,
            version=version,
            source=source,
            status=status,
            state=state,
            next=tuple(next),
            interrupts=tuple(interrupts),
            tasks=tasks or {},
            error=error,
            parent_id=(
                CheckpointId(parent_id)
                if parent_id
                else self._tip_id
                if source != "fork"
                else self._fork_parent(source, metadata)
            ),
            created_at=utcnow(),
            metadata=metadata or {},
            value_versions=value_versions,
            value_bases=value_bases,
        )
        audit, self.audit = self.audit, None
        if audit is not None:
            audit = dataclasses.replace(audit, before=self._tip_id, after=checkpoint.id)
        creating, self._create = self._create, False
        last = self.last
        write = CheckpointWrite(
            checkpoint,
            delta,
            self._tip_version,
            prev,
            updates,
            audit,
            self.lease_seconds if creating else None,
            # A step in the middle of the run: the thread's status and updated_at stay.
            touch=final or last is None or last.status != status or status != "in_progress",
        )
        if self.durability == "async" and self.storage.supports_background_writes and not final:
            if self._writer is None:
                self._writer = _BackgroundWriter(self.storage, self.run_id)
            self._writer.submit(write)
            if creating:
                # Renewals begin once the write commits (renew() waits for it).
                self._renewed_at = time.monotonic()
                self._beat.add(self)
        else:
            # The run's last write gives the lease back in the same transaction (one
            # statement and one commit less per run). The heartbeat stops first so it
            # cannot renew a lease that is gone; if the write fails the lease is still
            # held, the heartbeat resumes, and close() releases it.
            release = final and status in _ENDS_RUN
            if release:
                self._beat.remove(self)
            try:
                if self._writer is not None:
                    self._writer.submit(write, release=release)
                    self._writer.flush()
                elif release:
                    self.storage.write_and_release([write], lease_id=self.run_id)
                    self.storage.notify([write])
                else:
                    self.storage.write([write], lease_id=self.run_id)
                    self.storage.notify([write])
            except BaseException:
                self._create = creating  # nothing was written: the next write creates
                if release and self._exists():
                    self._beat.add(self)
                raise
            if creating and not release:
                self._renewed_at = time.monotonic()
                self._beat.add(self)
            self._unborn = False
            self._released = release
        self._tip_version, self._tip_values, self._tip_id = version, value_versions, checkpoint.id
        self._tip_bases = value_bases
        self.last = checkpoint
        return checkpoint

    def _fork_parent(self, source: Source, metadata: dict[str, Any] | None) -> CheckpointId | None:
        # A fork follows the checkpoint it copies, not the head it was written over:
        # that is what lets a timeline draw the fork as a branch.
        forked_from = (metadata or {}).get("forked_from") if source == "fork" else None
        return CheckpointId(forked_from) if isinstance(forked_from, str) else self._tip_id

    def flush(self) -> None:
        """Wait until every checkpoint recorded so far is durable."""
        if self._writer is not None:
            self._writer.flush()
