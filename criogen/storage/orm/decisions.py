"""Decisions and effects: the approvals a person gave (inserted in the transaction of the
checkpoint that resumes the run) and the effect ledger of tool calls. Not the hot path:
the ORM is fine here. User data goes through ``_seal``/``_open``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NoReturn

from django.db import IntegrityError, transaction

from criogen.engine.checkpoints import (
    CheckpointWrite,
)
from criogen.engine.errors import AlreadyDecided
from criogen.engine.store import (
    DecisionRecord,
    EffectRecord,
)
from criogen.storage.orm.writes import OrmWrites, _by_thread

__all__ = ["OrmDecisions"]


class OrmDecisions(OrmWrites):
    """Decision records (written with the checkpoint that resumes the run) and the
    effect ledger."""

    def write_decisions(
        self,
        writes: Sequence[CheckpointWrite],
        decisions: Sequence[DecisionRecord],
        *,
        lease_id: str | None,
    ) -> None:
        from criogen.storage.models import Decision

        rows = [
            Decision(
                thread_id=d.thread_id,
                version=d.version,
                checkpoint_id=d.checkpoint_id,
                call_id=d.call_id,
                tool=d.tool,
                digest=d.digest,
                decision=d.decision,
                args="" if d.args is None else self._json_in(d.args),
                message="" if d.message is None else self._seal(d.message),
                actor=d.actor,
                decided_at=d.decided_at,
            )
            for d in decisions
        ]
        # One transaction for the decisions and the checkpoint that resumes the run
        # (also on PostgreSQL, where write() would use its single-statement path).
        with self._write_errors(writes, "decision write"), transaction.atomic(using=self.alias):
            try:
                with transaction.atomic(using=self.alias):
                    Decision.objects.using(self.alias).bulk_create(rows)
            except IntegrityError as exc:
                # (thread, version, call id) is unique: another decision got there first.
                self._already_decided(decisions, exc)
            self._write_groups(_by_thread(writes), lease_id)
            self._insert_audit([w.audit for w in writes if w.audit is not None])

    def _already_decided(self, decisions: Sequence[DecisionRecord], exc: Exception) -> NoReturn:
        first = decisions[0]
        found = self.decisions(first.thread_id, version=first.version)
        actor = found[0].actor if found else None
        when = found[0].decided_at.isoformat() if found else None
        raise AlreadyDecided(
            f"the suspension v{first.version} of thread {first.thread_id!r} was already "
            f"decided by {actor or 'someone'} at {when}.",
            thread_id=first.thread_id,
            decided_by=actor,
            decided_at=when,
        ) from exc

    def decisions(self, thread_id: str, *, version: int | None = None) -> list[DecisionRecord]:
        from criogen.storage.models import Decision

        qs = Decision.objects.using(self.alias).filter(thread_id=thread_id)
        if version is not None:
            qs = qs.filter(version=version)
        return [
            DecisionRecord(
                thread_id=d.thread_id,
                version=d.version,
                checkpoint_id=d.checkpoint_id,
                call_id=d.call_id,
                tool=d.tool,
                digest=d.digest,
                decision=d.decision,
                args=self._json_out(d.args),
                message=self._open(d.message) if d.message else None,
                actor=d.actor,
                decided_at=d.decided_at,
            )
            for d in qs.order_by("-decided_at", "-version", "-id")
        ]

    def _effect(self, e: Any) -> EffectRecord:
        return EffectRecord(
            key=e.key,
            thread_id=e.thread_id,
            checkpoint_id=e.checkpoint_id,
            call_id=e.call_id,
            tool=e.tool,
            args=self._json_out(e.args),
            status=e.status,
            result=self._open(e.result) if e.result is not None else None,
            attempts=e.attempts,
            created_at=e.created_at,
            finished_at=e.finished_at,
        )

    def begin_effect(self, effect: EffectRecord) -> EffectRecord | None:
        from criogen.storage.models import Effect

        try:
            with transaction.atomic(using=self.alias):
                Effect.objects.using(self.alias).create(
                    key=effect.key,
                    thread_id=effect.thread_id,
                    checkpoint_id=effect.checkpoint_id,
                    call_id=effect.call_id,
                    tool=effect.tool,
                    args=self._json_in(effect.args),
                    status=effect.status,
                    attempts=effect.attempts,
                    created_at=effect.created_at,
                )
        except IntegrityError:
            return self.get_effect(effect.key)
        return None

    def retry_effect(self, key: str) -> None:
        from django.db.models import F

        from criogen.storage.models import Effect

        Effect.objects.using(self.alias).filter(key=key).update(attempts=F("attempts") + 1)

    def finish_effect(self, key: str, *, status: str, result: str) -> None:
        from django.utils import timezone

        from criogen.storage.models import Effect

        Effect.objects.using(self.alias).filter(key=key).update(
            status=status, result=self._seal(result), finished_at=timezone.now()
        )

    def get_effect(self, key: str) -> EffectRecord | None:
        from criogen.storage.models import Effect

        found = Effect.objects.using(self.alias).filter(key=key).first()
        return self._effect(found) if found else None

    def effects(self, thread_id: str) -> list[EffectRecord]:
        from criogen.storage.models import Effect

        qs = Effect.objects.using(self.alias).filter(thread_id=thread_id)
        return [self._effect(e) for e in qs.order_by("created_at", "key")]
