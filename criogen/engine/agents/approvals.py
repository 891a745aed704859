"""Approvals: suspending a turn for a person, and answering the suspension.

A gated tool call suspends the turn with one :class:`Interrupt` listing every pending
gated call with the SHA-256 digest of its canonical arguments (:func:`args_digest`).
The person's answer is checked (:func:`normalize_decision`, :func:`parse_answer`)
before the thread is taken, then written as server-side records
(:class:`DecisionRecord`) bound to the thread, the suspended checkpoint's version, the
call id and the digest, in the same transaction as the checkpoint that resumes the
run. A decision for another version, an unknown call or other arguments fails closed
(:class:`StaleDecision`); a suspension already answered fails with
:class:`AlreadyDecided`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from collections.abc import Callable, Mapping
from typing import Any, NoReturn

from criogen.engine.active_run import ActiveRun
from criogen.engine.agents.reply import TOOLS, Reply
from criogen.engine.agents.run import Lease, Suspended, TurnBase, open_active
from criogen.engine.checkpoints import Checkpoint, CheckpointId, CheckpointWrite, new_id, utcnow
from criogen.engine.errors import (
    AlreadyDecided,
    InvalidArgument,
    InvalidToolCall,
    NotSuspended,
    StaleDecision,
    ThreadBusy,
)
from criogen.engine.records import (
    DECISION_TYPES,
    Decision,
    Interrupt,
    PendingCall,
    TakenDecision,
)
from criogen.engine.state import check_json
from criogen.engine.store import AuditRecord, DecisionRecord
from criogen.engine.threads import check_expected

__all__ = [
    "ALLOWED_DECISIONS",
    "ApprovalTurn",
    "DecisionsBuilder",
    "args_digest",
    "check_edits",
    "normalize_decision",
    "parse_answer",
    "pending_calls",
]

ALLOWED_DECISIONS = list(DECISION_TYPES)
"""What a person may decide on a pending call: approve, edit, reject, respond."""

DecisionsBuilder = Callable[[list[PendingCall]], dict[str, Decision]]
"""From the pending calls to the decision per call id (raises on a bad answer)."""


def args_digest(args: Mapping[str, Any]) -> str:
    """SHA-256 (hex) of a call's canonical arguments JSON (sorted keys, no spaces)."""
    text = json.dumps(args, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def pending_calls(head: Checkpoint | None) -> list[PendingCall]:
    """The calls the head's interrupt waits on (empty when it does not wait)."""
    if head is None or not head.interrupts:
        return []
    return [PendingCall.from_dict(c) for c in head.interrupts[0].get("calls", [])]


def normalize_decision(raw: Any, call: PendingCall, index: int, thread_id: str) -> Decision:
    """One HITL decision (a type name or a dict) as a :class:`Decision`; InvalidArgument
    naming ``decisions[index]`` if bad, StaleDecision if made for other arguments."""
    where = f"decisions[{index}]"
    if isinstance(raw, str):
        raw = {"type": raw}
    if not isinstance(raw, Mapping):
        raise InvalidArgument(
            f"{where} must be 'approve', 'reject' or a dict with 'type'.", field=where
        )
    kind = raw.get("type")
    if kind is None and "args" in raw:
        kind = "edit"
    if kind not in ALLOWED_DECISIONS:
        raise InvalidArgument(
            f"{where} has type {kind!r}; use one of {ALLOWED_DECISIONS}.", field=f"{where}.type"
        )
    digest = raw.get("digest")
    if digest is not None and digest != call.digest:
        raise StaleDecision(
            f"{where} was made for other arguments of call {call.id!r} than the ones "
            "pending (digest mismatch); reload the thread and decide again.",
            thread_id=thread_id,
            call_id=call.id,
        )
    if kind == "edit":
        edited = raw.get("edited_action") or {}
        args = raw.get("args", edited.get("args") if isinstance(edited, Mapping) else None)
        if not isinstance(args, Mapping):
            raise InvalidArgument(
                f"{where} edits the call but gives no 'args' object.", field=f"{where}.args"
            )
        name = edited.get("name") if isinstance(edited, Mapping) else None
        if name not in (None, call.name):
            raise InvalidArgument(
                f"{where} renames the tool ({name!r}); an edit may change the arguments only.",
                field=f"{where}.edited_action.name",
            )
        check_json(dict(args), f"{where}.args")
        return Decision("edit", args=dict(args))
    if kind in ("reject", "respond"):
        message = raw.get("message", raw.get("reason", ""))
        if message is None:
            message = ""
        if not isinstance(message, str):
            raise InvalidArgument(f"{where}.message must be a string.", field=f"{where}.message")
        if kind == "respond" and not message.strip():
            raise InvalidArgument(
                f"{where} responds with an empty message.", field=f"{where}.message"
            )
        return Decision("respond" if kind == "respond" else "reject", message=message)
    return Decision("approve")


def parse_answer(
    value: Any, version: int | None, thread_id: str
) -> tuple[DecisionsBuilder, int | None]:
    """The HITL response ``value`` parsed: a function from the pending calls to the
    decision per call id, and the version it is bound to (from ``value`` if given)."""
    every: Any = None
    if isinstance(value, Mapping) and "decisions" in value:
        raw = value["decisions"]
        # The version may travel in the value (a run's command), binding the
        # decisions to the suspension the operator saw.
        if version is None and value.get("version") is not None:
            version = value["version"]
            if not isinstance(version, int) or isinstance(version, bool):
                raise InvalidArgument("version must be an integer.", field="version")
    elif isinstance(value, list):
        raw = value
    elif value in ALLOWED_DECISIONS or (isinstance(value, Mapping) and "type" in value):
        # One decision for every pending call: "approve", {"type": "reject", …}.
        raw, every = [], value
    else:
        raise InvalidArgument(
            'resume an agent with {"decisions": [...]}, one per pending call; or use '
            "approve(), reject(), decide() or respond().",
            field="decisions",
        )
    if not isinstance(raw, list):
        raise InvalidArgument("decisions must be a list.", field="decisions")
    given: list[Any] = raw

    def build(calls: list[PendingCall]) -> dict[str, Decision]:
        answers = [every] * len(calls) if every is not None else given
        if len(answers) != len(calls):
            raise InvalidArgument(
                f"{len(calls)} call(s) are pending and {len(answers)} decision(s) were given; "
                "give one per call, in order (or use decide({call_id: ...})).",
                field="decisions",
            )
        return {
            c.id: normalize_decision(d, c, i, thread_id)
            for i, (c, d) in enumerate(zip(calls, answers, strict=True))
        }

    return build, version


def check_edits(
    tools: Mapping[str, Any], calls: list[PendingCall], chosen: Mapping[str, Decision]
) -> dict[str, Decision]:
    """``chosen`` with each edit's arguments cleaned as its tool will read them ("5" ->
    5.0 for a number), so the decision records what runs; InvalidArgument naming the
    call when they do not fit the tool."""
    by_id = {c.id: c for c in calls}
    out: dict[str, Decision] = {}
    for cid, d in chosen.items():
        tool = tools.get(by_id[cid].name)
        if d.type == "edit" and tool is not None:
            try:
                d = dataclasses.replace(d, args=tool.validate_args(d.args or {}))
            except InvalidToolCall as exc:
                raise InvalidArgument(
                    f"the edited arguments of call {cid!r} do not fit tool "
                    f"{tool.name!r}: {exc.message}",
                    field=f"decisions.{cid}.args",
                ) from exc
        out[cid] = d
    return out


class ApprovalTurn(TurnBase):
    """A turn's approvals: the rule, the suspension, and answering it."""

    def _gated(
        self, call: Mapping[str, Any], state: dict[str, Any], tasks: dict[str, Any] | None = None
    ) -> bool:
        """The agent's approval rule; a rule that raises fails the run."""
        try:
            return self.agent.needs_approval(call, state)
        except Exception as exc:  # noqa: BLE001 - a broken rule fails the run, clearly
            self._fail(state, [TOOLS], tasks or {}, exc)

    def _suspend(
        self,
        state: dict[str, Any],
        tasks: dict[str, Any],
        reason: str,
        calls: list[dict[str, Any]],
        attempts: int | None = None,
    ) -> NoReturn:
        """Write the ``suspend`` checkpoint waiting on ``calls`` and stop the turn."""
        requests, configs, listed = [], [], []
        for c in calls:
            tool = self.agent.tools.get(c["name"])
            args_text = json.dumps(c["args"], ensure_ascii=False, sort_keys=True)
            if reason == "approval":
                description = f"{c['name']}({args_text}) needs approval before it runs."
            else:
                description = (
                    f"The process stopped while {c['name']}({args_text}) was running: it may or "
                    "may not have taken effect. Approve to run it again (same idempotency "
                    "key), reject to tell the model it failed, or respond with what happened."
                )
            requests.append({"name": c["name"], "args": c["args"], "description": description})
            configs.append(
                {
                    "action_name": c["name"],
                    "allowed_decisions": list(ALLOWED_DECISIONS),
                    "args_schema": tool.parameters if tool else {},
                }
            )
            listed.append(
                PendingCall(c["id"], c["name"], c["args"], args_digest(c["args"]), attempts)
            )
        interrupt = Interrupt(
            id=new_id(),
            node=TOOLS,
            reason=reason,
            payload={"action_requests": requests, "review_configs": configs},
            calls=tuple(listed),
            # One suspension may hold calls of several tools: the deadline options of
            # the first of them that has some (see Agent.suspension_options).
            extra=self.agent.suspension_options(c["name"] for c in calls)
            if reason == "approval"
            else {},
        )
        checkpoint = self._write(
            "suspend",
            "suspended",
            state,
            {},
            [TOOLS],
            tasks,
            interrupts=[interrupt.to_dict()],
            final=True,
        )
        assert checkpoint is not None
        raise Suspended(
            Reply(
                "suspended",
                "",
                [c.to_dict() for c in listed],
                state,
                checkpoint,
                self.thread.id,
                self.active.run_id if self.active else "",
            )
        )

    # -- answering --------------------------------------------------------------------------

    def start_decisions(self, build: DecisionsBuilder, version: int | None) -> Reply:
        """Answer the pending suspension with ``build``'s decisions and run on.

        Audited as ``decide`` whichever verb or door asked (``approve()``, ``reject()``,
        ``respond()``, ``resume()``, ``decide()``, the API, the dashboard, a deadline):
        one name for one action, the decisions themselves in the event's details."""
        tid = self.thread.id
        seen: Checkpoint | None = self.storage.head(tid)
        if seen is None or seen.status != "suspended":
            if self.expected is not None and (seen is None or seen.id != self.expected):
                self._moved_on_from(self.expected, seen)
            self._not_suspended(seen, version)
        if version is not None and version != seen.version:
            self._moved_on(version)
        if self.expected is not None and self.expected != seen.id:
            self._moved_on_from(self.expected, seen)
        # Validate before taking the thread: bad decisions change nothing.
        chosen = check_edits(self.agent.tools, pending_calls(seen), build(pending_calls(seen)))
        active = self._lease_for_decision(seen.version)
        with Lease(self, active, opened=True):
            head = active.head
            if head is None or head.version != seen.version:
                self._moved_on(seen.version)
            interrupt = Interrupt.from_dict(head.interrupts[0])
            calls_by_id = {c.id: c for c in interrupt.calls or ()}
            when = utcnow()
            reason = interrupt.reason or "approval"
            records = [
                DecisionRecord(
                    thread_id=tid,
                    version=head.version,
                    checkpoint_id=head.id,
                    call_id=cid,
                    tool=calls_by_id[cid].name,
                    digest=calls_by_id[cid].digest,
                    decision=d.type,
                    args=d.args,
                    message=d.message,
                    actor=self.by,
                    decided_at=when,
                )
                for cid, d in chosen.items()
            ]
            tasks = dict(head.tasks)
            decided = dict(tasks.get("decisions", {}))
            for cid, d in chosen.items():
                attempts = (calls_by_id[cid].attempts or 1) if reason == "outcome_unknown" else None
                decided[cid] = TakenDecision(d, reason, self.by, head.version, attempts).to_dict()
            tasks["decisions"] = decided
            summary = [
                {"call_id": cid, "name": calls_by_id[cid].name, **d.to_dict()}
                for cid, d in chosen.items()
            ]
            metadata = {**self.metadata, "actor": self.by, "decisions": summary}
            audit = self.thread._audit_event(
                "decide",
                by=self.by,
                door=self.door,
                details={"version": head.version, "reason": reason, "decisions": summary},
            )
            self._write_decision_checkpoint(head, tasks, metadata, records, audit)
            return self._loop(head.state, TOOLS, tasks)

    def _not_suspended(self, head: Checkpoint | None, version: int | None) -> NoReturn:
        tid = self.thread.id
        latest = self.storage.decisions(tid, version=version)
        if latest:
            self._raise_decided(latest[0])
        if version is not None:
            self._moved_on(version)
        raise NotSuspended(
            f"thread {tid!r} is not suspended (its head is "
            f"{head.status if head else 'empty'}); there is nothing to decide.",
            thread_id=tid,
        )

    def _raise_decided(self, d: DecisionRecord) -> NoReturn:
        raise AlreadyDecided(
            f"the suspension v{d.version} of thread {self.thread.id!r} was already decided "
            f"by {d.actor or 'someone'} at {d.decided_at.isoformat()}.",
            thread_id=self.thread.id,
            decided_by=d.actor,
            decided_at=d.decided_at.isoformat(),
            version=d.version,
        )

    def _moved_on_from(self, expected: str, head: Checkpoint | None) -> NoReturn:
        """The head is not the suspension ``expected`` the caller decided on: already
        decided (by whom, when) if it was, else StaleHead."""
        found = [d for d in self.storage.decisions(self.thread.id) if d.checkpoint_id == expected]
        if found:
            self._raise_decided(found[0])
        check_expected(self.thread.id, head, expected)
        raise AssertionError("unreachable: the head differs from expected")

    def _moved_on(self, version: int) -> NoReturn:
        found = self.storage.decisions(self.thread.id, version=version)
        if found:
            self._raise_decided(found[0])
        raise StaleDecision(
            f"thread {self.thread.id!r} is no longer at the suspension v{version} (it was "
            "rewound or changed); reload it and decide on what is pending now.",
            thread_id=self.thread.id,
            version=version,
        )

    def _lease_for_decision(self, version: int) -> ActiveRun:
        """Take the thread, failing fast with AlreadyDecided when another decision on
        ``version`` commits while this one waits (two operators racing)."""
        timeout = self.options.get("busy_timeout", self.agent.busy_timeout)
        wait = self.options.get("on_busy") or self.agent.on_busy
        deadline = time.monotonic() + timeout
        delay = 0.005
        while True:
            found = self.storage.decisions(self.thread.id, version=version)
            if found:
                self._raise_decided(found[0])
            active = self._make_active(on_busy="fail")
            try:
                open_active(active)
                return active
            except ThreadBusy:
                if wait == "fail" or time.monotonic() >= deadline:
                    raise
            time.sleep(delay)
            delay = min(delay * 2, 0.2)

    def _write_decision_checkpoint(
        self,
        head: Checkpoint,
        tasks: dict[str, Any],
        metadata: dict[str, Any],
        records: list[DecisionRecord],
        audit: AuditRecord,
    ) -> None:
        """The ``input`` checkpoint that resumes the run, in one transaction with the
        decision records and the audit event (ActiveRun.write has no place for them)."""
        active = self.run
        active.flush()
        checkpoint = Checkpoint(
            id=CheckpointId(new_id()),
            thread_id=head.thread_id,
            run_id=active.run_id,
            version=head.version + 1,
            source="input",
            status="in_progress",
            state=head.state,
            next=(TOOLS,),
            interrupts=(),
            tasks=tasks,
            parent_id=head.id,
            created_at=utcnow(),
            metadata=metadata,
            value_versions=dict(head.value_versions),
            value_bases=dict(head.value_bases),
        )
        audit = dataclasses.replace(audit, before=head.id, after=checkpoint.id)
        write = CheckpointWrite(checkpoint, {}, head.version, {}, audit=audit)
        self.storage.write_decisions([write], records, lease_id=active.run_id)
        self.storage.notify([write])
        active.start_from(checkpoint)
        active.last = checkpoint
