"""The storage contract for the agent tables, on memory, SQLite and PostgreSQL:
decisions written atomically with a checkpoint, the effect ledger, facts, documents,
and the audit trail."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from criogen import Storage
from criogen.engine.checkpoints import Checkpoint, CheckpointId, CheckpointWrite, ThreadId, new_id
from criogen.engine.errors import AlreadyDecided, StorageError
from criogen.engine.state import Change
from criogen.engine.store import DecisionRecord, EffectRecord


def checkpoint_write(thread_id: str, version: int, state: dict[str, Any]) -> CheckpointWrite:
    cp = Checkpoint(
        id=CheckpointId(new_id()),
        thread_id=ThreadId(thread_id),
        run_id=None,
        version=version,
        source="input",
        status="in_progress",
        state=state,
        next=("tools",),
        value_versions=dict.fromkeys(state, version),
    )
    return CheckpointWrite(cp, {k: Change("set", v) for k, v in state.items()}, version - 1, {})


def decision(thread_id: str, version: int, call_id: str, actor: str) -> DecisionRecord:
    return DecisionRecord(
        thread_id=thread_id,
        version=version,
        checkpoint_id="cp",
        call_id=call_id,
        tool="refund",
        digest="d" * 64,
        decision="edit",
        args={"amount": 1.5},
        message="smaller",
        actor=actor,
    )


def test_decisions_are_written_with_their_checkpoint_all_or_nothing(
    storage: Storage, thread_id: str
) -> None:
    assert storage.acquire(thread_id, "lease-1", seconds=30)
    storage.write([checkpoint_write(thread_id, 1, {"x": 1})], lease_id="lease-1")
    storage.write_decisions(
        [checkpoint_write(thread_id, 2, {"x": 2})],
        [decision(thread_id, 1, "c1", "alice"), decision(thread_id, 1, "c2", "alice")],
        lease_id="lease-1",
    )
    head = storage.head(thread_id)
    assert head is not None and head.version == 2 and head.state == {"x": 2}
    found = storage.decisions(thread_id)
    assert {d.call_id for d in found} == {"c1", "c2"}
    assert found[0].args == {"amount": 1.5} and found[0].message == "smaller"
    assert found[0].actor == "alice" and found[0].decided_at is not None
    assert storage.decisions(thread_id, version=7) == []

    # A second decision on the same call: AlreadyDecided, and its checkpoint is not written.
    with pytest.raises(AlreadyDecided) as info:
        storage.write_decisions(
            [checkpoint_write(thread_id, 3, {"x": 3})],
            [decision(thread_id, 1, "c1", "bob")],
            lease_id="lease-1",
        )
    assert info.value.details["decided_by"] == "alice"
    assert storage.head(thread_id).version == 2  # type: ignore[union-attr]

    # A checkpoint that lost the race: StorageError, and its decisions are not kept.
    with pytest.raises(StorageError):
        storage.write_decisions(
            [checkpoint_write(thread_id, 2, {"x": 9})],
            [decision(thread_id, 2, "c9", "carol")],
            lease_id="lease-1",
        )
    assert storage.decisions(thread_id, version=2) == []


def test_the_effect_ledger_keeps_intents_and_outcomes(storage: Storage, thread_id: str) -> None:
    assert storage.acquire(thread_id, "lease-1", seconds=30)
    key = f"crg_{uuid.uuid4().hex}"
    effect = EffectRecord(
        key=key, thread_id=thread_id, checkpoint_id="cp", call_id="c1", tool="t", args={"a": 1}
    )
    assert storage.begin_effect(effect) is None
    again = storage.begin_effect(effect)
    assert again is not None and (again.status, again.result) == ("intent", None)
    storage.retry_effect(key)
    storage.finish_effect(key, status="success", result="done")
    done = storage.get_effect(key)
    assert done is not None
    assert (done.status, done.result, done.attempts, done.args) == ("success", "done", 2, {"a": 1})
    assert done.finished_at is not None
    assert [e.key for e in storage.effects(thread_id)] == [key]
    assert storage.get_effect("missing") is None


def test_deleting_a_thread_removes_its_decisions_and_effects(
    storage: Storage, thread_id: str
) -> None:
    assert storage.acquire(thread_id, "lease-1", seconds=30)
    storage.write([checkpoint_write(thread_id, 1, {"x": 1})], lease_id="lease-1")
    storage.write_decisions(
        [checkpoint_write(thread_id, 2, {"x": 2})],
        [decision(thread_id, 1, "c1", "a")],
        lease_id="lease-1",
    )
    key = f"crg_{uuid.uuid4().hex}"
    storage.begin_effect(
        EffectRecord(
            key=key, thread_id=thread_id, checkpoint_id="cp", call_id="c", tool="t", args={}
        )
    )
    assert storage.delete_thread(thread_id)
    assert storage.decisions(thread_id) == [] and storage.get_effect(key) is None


def test_facts_are_kept_per_namespace_and_subject(storage: Storage) -> None:
    who = f"p-{uuid.uuid4().hex[:8]}"
    a = storage.add_fact("user_id", who, "likes tea")
    storage.add_fact("user_id", who, "has a dog")
    storage.add_fact("team_id", who, "other namespace")
    assert [f.text for f in storage.facts("user_id", who)] == ["likes tea", "has a dog"]
    updated = storage.update_fact(a.id, "likes coffee")
    assert updated is not None and updated.text == "likes coffee"
    assert storage.get_fact(a.id).text == "likes coffee"  # type: ignore[union-attr]
    assert storage.delete_fact(a.id) and not storage.delete_fact(a.id)
    assert storage.update_fact(a.id, "x") is None
    assert [f.text for f in storage.facts("user_id", who)] == ["has a dog"]


def test_documents_are_searched_by_words(storage: Storage) -> None:
    name = f"docs-{uuid.uuid4().hex[:8]}"
    storage.put_document(name, "a", "The kettle boils water quickly.", {"k": 1})
    storage.put_document(name, "b", "A toaster browns bread.", {})
    storage.put_document(f"{name}-other", "c", "Kettle in another collection.", {})
    hits = storage.search_documents(name, "kettle water")
    assert [h.doc_id for h in hits] == ["a"] and hits[0].metadata == {"k": 1}
    assert storage.search_documents(name, "") == []
    assert {d.doc_id for d in storage.documents(name)} == {"a", "b"}
    storage.put_document(name, "a", "The kettle is broken.", {})
    assert storage.get_document(name, "a").text == "The kettle is broken."  # type: ignore[union-attr]
    assert storage.search_documents(name, "water") == []  # the FTS index followed the update
    assert storage.delete_document(name, "b") and not storage.delete_document(name, "b")
    assert storage.search_documents(name, "toaster") == []


def test_the_audit_trail_is_append_only_and_off_by_default(
    storage_url: str, thread_id: str, django_db_blocker: Any
) -> None:
    with django_db_blocker.unblock():
        quiet = Storage(storage_url)
        quiet.record_audit("approve", thread_id=thread_id, actor="x", details={})
        assert quiet.audit_events(thread_id=thread_id) == []
        audited = Storage(storage_url, audit=True)
        audited.record_audit("approve", thread_id=thread_id, actor="alice", details={"v": 4})
        audited.record_audit("delete", thread_id=thread_id, actor=None)
        events = audited.audit_events(thread_id=thread_id)
    assert [(e.action, e.actor, e.details) for e in events] == [
        ("delete", None, {}),
        ("approve", "alice", {"v": 4}),
    ]
    assert events[0].created_at >= events[1].created_at
