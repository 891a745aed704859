"""The thread protocol that agents and workflows share: reading a thread, and the
operator verbs that change it without running the graph.

Every door (the dashboard, the REST API, a Python script, deadlines, crons) reaches
these verbs through one implementation each:

- :meth:`ThreadBase.rewind` writes a ``fork`` checkpoint copying an earlier one;
- :meth:`ThreadBase.update_state` writes a ``fork`` checkpoint with values merged in;
- :meth:`ThreadBase.resolve` closes a suspension as settled by a person, without
  running what waited (a ``fork`` checkpoint, ``completed``; audit action ``resolve``);
- :meth:`ThreadBase.delete` removes the thread.

The verbs that run the graph (a new turn, ``resume`` and the agent's decisions,
``retry``) live on the subclasses and follow the same rules:

- ``by`` names the actor (a user name, ``system`` for deadlines, ``cron:<id>``) and
  ``door`` where the action came from (``ui``, ``api``, ``python``, ``deadline``,
  ``cron``);
- ``expected`` (optional) is the head checkpoint id the caller acted on: if the
  thread has moved on since, :class:`StaleHead` (409) is raised and nothing changes —
  two clicks on one page make one change;
- exactly one audit event (:class:`AuditRecord`) is written, in the same transaction
  as the checkpoint the action writes.

update_state writes a ``fork`` checkpoint for agents and workflows alike: a person
wrote it, not a run, so it never reads as "the process died", and a run without
input carries on from its ``next``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import replace
from json.encoder import encode_basestring
from typing import Any

from criogen.engine.active_run import ActiveRun
from criogen.engine.checkpoints import Checkpoint, Status
from criogen.engine.errors import (
    AlreadyDecided,
    InvalidArgument,
    NotSuspended,
    StaleHead,
    StateTooLarge,
)
from criogen.engine.state import Delta, encode
from criogen.engine.store import AuditRecord, Storage

__all__ = [
    "ANSWER_ACTIONS",
    "DOORS",
    "ThreadBase",
    "check_answered",
    "check_door",
    "check_expected",
    "check_state_size",
    "json_size",
]

DOORS = ("ui", "api", "python", "deadline", "cron")
"""Where an action on a thread can come from."""


def check_door(door: Any) -> str:
    """``door`` if it is one of :data:`DOORS`; else InvalidArgument naming ``door``."""
    if door not in DOORS:
        raise InvalidArgument(f"door is {door!r}; use one of {', '.join(DOORS)}.", field="door")
    return str(door)


def check_state_size(
    storage: Storage, thread_id: str, state: Mapping[str, Any], delta: Delta | None = None
) -> None:
    """Raise :class:`StateTooLarge` when ``state``, as JSON, is over the storage's
    ``max_state_bytes`` (checked where a person's input or update grows a state).

    ``delta``, the change that made ``state``, lends the JSON text of the values it
    set, so those are not encoded a second time.
    """
    limit = getattr(storage, "max_state_bytes", 0) or 0
    if not limit:
        return
    size = json_size(state, delta)
    if size > limit:
        raise StateTooLarge(
            f"this would make the state of thread {thread_id!r} {size:,} bytes, over the "
            f"limit of {limit:,} (CRIOGEN_MAX_STATE_BYTES); nothing was stored.",
            thread_id=thread_id,
            size=size,
            limit=limit,
        )


def json_size(state: Mapping[str, Any], delta: Delta | None = None) -> int:
    """``len(encode(dict(state)).encode())``, the size in bytes of the state as JSON,
    counted key by key: a value that ``delta`` set with its text is not encoded again.
    """
    if not delta:
        return _utf8_len(encode(dict(state)))
    # "{" and "}", a ":" in each item and a "," between two.
    size = 2 * len(state) + 1 if state else 2
    texts: list[str] = []
    for key, value in state.items():
        change = delta.get(key)
        text = change.text if change is not None and change.op == "set" else None
        texts += (encode_basestring(key), encode(value) if text is None else text)
    # One measure of all the texts at once (a call per text cost more than the count).
    return size + _utf8_len("".join(texts))


def _utf8_len(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode())


ANSWER_ACTIONS = ("resume", "decide", "approve", "reject", "respond", "resolve", "goto")
"""The audit actions that answer a suspension (an agent's answers are all ``decide``;
``approve``, ``reject`` and ``respond`` are in trails written before they were)."""


def check_answered(storage: Storage, thread_id: str, expected: str) -> None:
    """Raise :class:`AlreadyDecided` naming who answered the suspension ``expected``
    (a checkpoint id the caller answered), when its answer is in the thread's audit
    trail: a second answer to one suspension is "already decided", not a stale head."""
    answers = [
        event
        for event in storage.audit_events(thread_id=thread_id)
        if event.before == expected and event.action in ANSWER_ACTIONS
    ]
    if not answers:
        return
    first = answers[-1]  # newest first: the last is the first answer
    raise AlreadyDecided(
        f"thread {thread_id!r} was already answered by {first.actor or 'someone'}; "
        "nothing was changed.",
        thread_id=thread_id,
        decided_by=first.actor,
        decided_at=first.created_at.isoformat(),
    )


def check_expected(thread_id: str, head: Checkpoint | None, expected: str | None) -> None:
    """Raise :class:`StaleHead` when ``expected`` (a checkpoint id the caller acted on)
    is given and is not the thread's head ``head``."""
    if expected is None:
        return
    current = head.id if head is not None else None
    if current == expected:
        return
    moved_by = str((head.metadata or {}).get("actor") or "") if head is not None else ""
    where = f"v{head.version} ({head.source})" if head is not None else "empty"
    raise StaleHead(
        f"thread {thread_id!r} moved on since you looked at it: its head is now {where}"
        + (f", written by {moved_by}" if moved_by else "")
        + "; reload it and try again. Nothing was changed.",
        thread_id=thread_id,
        expected=expected,
        current=current,
        moved_by=moved_by or None,
    )


class ThreadBase:
    """What agent and workflow threads have in common. Subclasses set ``id`` and
    provide :attr:`storage`, :meth:`_active` (a lease on the thread) and the graph's
    way of merging values (:meth:`_prepare_update`, :meth:`_merge`)."""

    id: str

    @property
    def storage(self) -> Storage:
        """The storage this thread lives in."""
        raise NotImplementedError

    _active: Callable[..., AbstractContextManager[ActiveRun]]
    """A lease on this thread for the run ``options`` (not yet entered): entered, it
    gives the :class:`ActiveRun` that writes. Each subclass defines it as a method
    taking its own options."""

    # -- reading ------------------------------------------------------------------------

    @property
    def head(self) -> Checkpoint | None:
        """The newest checkpoint, or None before the first run."""
        return self.storage.head(self.id)

    @property
    def state(self) -> dict[str, Any]:
        """The state at the head ({} before the first run)."""
        head = self.head
        return head.state if head else {}

    def history(self, limit: int | None = None, *, before: int | None = None) -> list[Checkpoint]:
        """Checkpoints, newest first; ``before`` a version to page back from."""
        if limit is not None and (
            isinstance(limit, bool) or not isinstance(limit, int) or limit < 0
        ):
            raise InvalidArgument(
                f"limit is {limit!r}; use None (all) or a whole number ≥ 0.", field="limit"
            )
        return self.storage.history(self.id, limit=limit, before=before)

    def checkpoint(self, checkpoint_id: str) -> Checkpoint:
        """One checkpoint of this thread. Raises CheckpointNotFound."""
        return self.storage.get_checkpoint(self.id, checkpoint_id)

    def audit(self, limit: int = 100) -> list[AuditRecord]:
        """The audit trail of this thread (``AuditRecord``), newest first."""
        return self.storage.audit_events(thread_id=self.id, limit=limit)

    def check_answer(self, value: Any) -> None:
        """Check an answer to the pending suspension as the graph's resume would,
        without taking the thread or writing anything (InvalidArgument naming what is
        wrong). A thread that does not wait passes: resuming it is refused by name."""

    # -- the audit trail ------------------------------------------------------------------

    def _audit_event(
        self, action: str, *, by: str | None, door: str, details: Mapping[str, Any]
    ) -> AuditRecord:
        """The audit event of ``action`` (the write that carries it fills in the
        checkpoints before and after)."""
        return AuditRecord(action, self.id, by, dict(details), door=check_door(door))

    # -- verbs that write without running the graph ---------------------------------------

    def rewind(
        self,
        checkpoint_id: str,
        *,
        by: str | None = None,
        door: str = "python",
        expected: str | None = None,
        **options: Any,
    ) -> Checkpoint:
        """Write a ``fork`` checkpoint with the state of an earlier one; the next call
        continues from it. History keeps everything (nothing is deleted).

        Raises CheckpointNotFound, StaleHead (the head is not ``expected``),
        ThreadBusy (a run holds the thread and ``on_busy`` says not to wait).
        """
        check_door(door)
        with self._active(**options) as active:
            check_expected(self.id, active.head, expected)
            target = self.storage.get_checkpoint(self.id, checkpoint_id)
            active.audit = self._audit_event(
                "rewind",
                by=by,
                door=door,
                details={"checkpoint_id": target.id, "version": target.version},
            )
            checkpoint = active.write(
                source="fork",
                status=target.status,
                state=target.state,
                delta={},
                next=target.next,
                interrupts=target.interrupts,
                tasks=target.tasks,
                metadata={"forked_from": target.id, "forked_version": target.version, "actor": by},
                value_versions=dict(target.value_versions),
                value_bases=dict(target.value_bases),
                final=True,
            )
        assert checkpoint is not None
        return checkpoint

    def update_state(
        self,
        values: Mapping[str, Any] | None,
        *,
        as_node: str | None = None,
        by: str | None = None,
        door: str = "python",
        expected: str | None = None,
        **options: Any,
    ) -> Checkpoint:
        """Write a ``fork`` checkpoint with ``values`` merged by the graph's reducers.

        Without ``as_node`` the head's status, next step and pending interrupts stay as
        they were; with it (workflows) the next nodes are that node's successors, as if
        it had just run. Values are checked before the thread is taken, so bad values
        change nothing. Raises InvalidArgument / InvalidState naming what is wrong,
        StaleHead (the head is not ``expected``), ThreadBusy.
        """
        check_door(door)
        update = self._prepare_update(values, as_node)
        plain = dict(values or {})
        with self._active(**options) as active:
            head = active.head
            check_expected(self.id, head, expected)
            state, delta, status, nxt, interrupts, tasks = self._merge(head, update, as_node)
            check_state_size(self.storage, self.id, state, delta)
            active.audit = self._audit_event(
                "update_state",
                by=by,
                door=door,
                details={
                    "keys": sorted(plain),
                    "values": plain,
                    **({"as_node": as_node} if as_node else {}),
                },
            )
            checkpoint = active.write(
                source="fork",
                status=status,
                state=state,
                delta=delta,
                next=nxt,
                interrupts=interrupts,
                tasks=tasks,
                metadata={
                    "update": True,
                    "as_node": as_node,
                    "step": active._tip_version,
                    "actor": by,
                },
                updates={as_node or "update_state": plain},
                final=True,
            )
        assert checkpoint is not None
        return checkpoint

    def resolve(
        self,
        *,
        by: str | None = None,
        door: str = "python",
        expected: str | None = None,
        **options: Any,
    ) -> Checkpoint:
        """Close the pending suspension as resolved by ``by``, without running the step
        or tool that waited: the thread completes (a ``fork`` checkpoint with status
        ``completed``, ``metadata["resolved_by"]``) and one ``resolve`` audit event is
        written with it. What REST's ``command: {"goto": "__end__"}`` does.

        Raises NotSuspended (nothing waits), StaleHead (the head is not
        ``expected``), ThreadBusy.
        """
        check_door(door)
        with self._active(**options) as active:
            head = active.head
            check_expected(self.id, head, expected)
            if head is None or head.status != "suspended":
                raise NotSuspended(
                    f"thread {self.id!r} is not suspended (its head is "
                    f"{head.status if head else 'empty'}); there is nothing to resolve.",
                    thread_id=self.id,
                )
            state, delta = self._resolved_state(head, by)
            active.audit = self._audit_event(
                "resolve",
                by=by,
                door=door,
                details={
                    "version": head.version,
                    "interrupts": [i.get("id") for i in head.interrupts],
                    "next": list(head.next),
                    **({"run_id": active.run_id} if active.run_id else {}),
                },
            )
            checkpoint = active.write(
                source="fork",
                status="completed",
                state=state,
                delta=delta,
                next=[],
                interrupts=(),
                tasks={},
                metadata={
                    "resolved_by": by,
                    "actor": by,
                    "step": active._tip_version,
                },
                final=True,
            )
        assert checkpoint is not None
        return checkpoint

    def _resolved_state(self, head: Checkpoint, by: str | None) -> tuple[dict[str, Any], Any]:
        """(state, delta) of a resolved suspension: the head's state, unchanged."""
        return head.state, {}

    def _prepare_update(self, values: Mapping[str, Any] | None, as_node: str | None) -> Any:
        """``values`` checked and normalised for this graph (raises before any write)."""
        raise NotImplementedError

    def _merge(
        self, head: Checkpoint | None, update: Any, as_node: str | None
    ) -> tuple[dict[str, Any], Any, Status, list[str], Any, dict[str, Any]]:
        """(state, delta, status, next, interrupts, tasks) of the head with ``update``."""
        raise NotImplementedError

    def delete(self, *, by: str | None = None, door: str = "python") -> bool:
        """Delete the thread and its checkpoints (its audit events stay, with this one).
        False when there was no such thread."""
        head = self.storage.head(self.id)
        event = self._audit_event("delete", by=by, door=door, details={})
        if head is not None:
            event = replace(event, before=head.id)
        return bool(self.storage.delete_thread(self.id, audit=event))
