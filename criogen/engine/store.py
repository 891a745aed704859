"""The storage protocol: the small interface the engine talks to.

Two implementations: :class:`criogen.engine.memory_store.MemoryStorage` (tests, scripts)
and :class:`criogen.storage.orm.OrmStorage` (Django ORM tables on SQLite or
PostgreSQL). ``Storage(url)`` picks one by the URL's scheme, as Django picks a
database backend by its ``ENGINE`` string, so this module imports neither.

How values are kept (both backends): a checkpoint stores, per state key, the version
of the write that holds the key's value (``value_versions``). A write stores one value
row per *changed* key: ``set`` rows hold the whole value, ``append`` rows hold only
the appended items and point at the previous row of the same key. So a key that did
not change costs nothing, a growing list costs only its new items, and a fork (rewind)
just copies ``value_versions``. Each checkpoint also keeps, per key, where the rows
that build the value start (``value_bases``), so a read is one index range scan per
key; building the state follows the ``prev`` pointers within those rows.

The protocol's methods, by concern (each a section of :class:`Storage`, and a module
of ``criogen/storage/orm/``): leases, checkpoints, history maintenance (rollback,
compaction, copy), decisions and the effect ledger, memory facts, collections of
documents, and the audit trail. ``tests/criogen/storage/test_contract.py`` and
``test_agent_storage.py`` run every method on every backend.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, ClassVar
from urllib.parse import urlsplit

from criogen.engine.checkpoints import Checkpoint, CheckpointWrite
from criogen.engine.errors import InvalidArgument, StorageError, UnknownStorageUrl
from criogen.engine.state import encode

__all__ = [
    "BACKENDS",
    "AuditRecord",
    "DecisionRecord",
    "DocumentRecord",
    "EffectRecord",
    "FactRecord",
    "Storage",
    "ThreadInfo",
    "ValueRow",
    "build_state",
    "encode",
    "reachable_values",
]

logger = logging.getLogger("criogen.storage")

Listener = Callable[[Sequence[CheckpointWrite]], None]

BACKENDS: dict[str, str] = {
    "memory": "criogen.engine.memory_store.MemoryStorage",
    "sqlite": "criogen.storage.orm.OrmStorage",
    "postgres": "criogen.storage.orm.OrmStorage",
    "postgresql": "criogen.storage.orm.OrmStorage",
    "django": "criogen.storage.orm.OrmStorage",
}
"""URL scheme -> backend class (dotted path), imported when first used."""


@dataclass(frozen=True, slots=True)
class ValueRow:
    """One stored value of one key, written by the checkpoint with ``version``."""

    kind: str
    """``s`` (the whole value) or ``a`` (items appended to ``prev``)."""
    data: str
    """JSON text of the value or of the appended items."""
    prev: int | None
    """For ``a`` rows: the version of the row the items are appended to."""


@dataclass(frozen=True, slots=True)
class ThreadInfo:
    """A thread as storage sees it (without its checkpoints)."""

    thread_id: str
    """The thread's id."""
    head_version: int
    """Version of the head checkpoint, 0 when the thread has none yet."""
    head_status: str | None
    """Status of the head checkpoint, ``None`` when it has none."""
    lease_id: str | None
    """The run holding the thread, if its lease has not expired."""


def build_state(
    value_versions: Mapping[str, int],
    rows: Mapping[tuple[str, int], ValueRow],
    decode: Callable[[str], Any] = json.loads,
) -> dict[str, Any]:
    """Rebuild a state from its value pointers and the rows they reach."""
    state: dict[str, Any] = {}
    for key, version in value_versions.items():
        chunks: list[str] = []
        row = rows[(key, version)]
        while row.kind == "a":
            chunks.append(row.data)
            if row.prev is None:
                break
            row = rows[(key, row.prev)]
        if row.kind == "a":  # the chain starts with an append: nothing before it
            value: Any = []
        else:
            value = decode(row.data)
        if chunks:
            value = list(value) if value is not None else []
            # Each chunk is a JSON array: join them into one array text and decode once
            # (one parse of a long thread's list, not one per step).
            items = [data[1:-1] for data in reversed(chunks) if data != "[]"]
            if items:
                value.extend(decode("[" + ",".join(items) + "]"))
        state[key] = value
    return state


def reachable_values(
    value_versions: Mapping[str, int], rows: Mapping[tuple[str, int], ValueRow]
) -> set[tuple[str, int]]:
    """``(key, version)`` of every value row a state with ``value_versions`` is built
    from: the row each key points at and, for appended lists, the chain of rows before
    it (what compaction keeps). ``rows`` needs only ``kind`` and ``prev``."""
    keep: set[tuple[str, int]] = set()
    for key, version in value_versions.items():
        at: int | None = version
        while at is not None and (key, at) not in keep:
            keep.add((key, at))
            row = rows.get((key, at))
            at = row.prev if row is not None and row.kind == "a" else None
    return keep


def value_rows_for(write: CheckpointWrite) -> Iterable[tuple[str, int, str, str, int | None]]:
    """``(key, version, kind, data, prev)`` for each value row a write adds."""
    version = write.checkpoint.version
    for key, change in write.delta.items():
        text = change.text if change.text is not None else encode(change.value)
        if change.op == "append":
            yield key, version, "a", text, write.prev_versions.get(key)
        else:
            yield key, version, "s", text, None


DEFAULT_MAX_STATE_BYTES = 16 * 1024 * 1024
"""The default ``max_state_bytes``: what a person's input or update may make a state."""


class Storage(ABC):
    """The database behind threads.

    ``Storage()`` keeps everything in memory (tests, scripts; gone when the process
    ends). ``Storage("sqlite://path/to/file.db")`` and
    ``Storage("postgres://user:password@host/db")`` use the Django ORM tables (in a plain
    script Django is configured and migrated automatically). Inside the Django app,
    ``Storage.default()`` uses the configured database.

    All methods are synchronous and thread-safe. Leases make "one run per thread"
    polite; the real guard is that ``write`` only appends ``head_version + 1``.
    """

    url: str = "memory://"
    supports_background_writes: ClassVar[bool] = False
    """True when writes are slow enough that ``durability="async"`` should batch them."""

    def __new__(cls, url: str | None = None, **options: Any) -> Storage:
        if cls is not Storage:
            return super().__new__(cls)
        scheme = "memory" if url in (None, "", "memory://", ":memory:") else _scheme(url)
        target = BACKENDS.get(scheme)
        if target is None:
            shown = _redact(url or "")  # error messages end up in logs: no password in them
            raise UnknownStorageUrl(
                f"storage URL {shown!r} has the scheme {scheme!r}; use none (memory), "
                "'sqlite://path/to/file.db' or 'postgres://user:password@host/db'.",
                url=shown,
            )
        module, _, name = target.rpartition(".")
        backend: type[Storage] = getattr(importlib.import_module(module), name)
        return backend.__new__(backend, url, **options)

    def add_listener(self, listener: Listener) -> None:
        """Call ``listener(writes)`` after each batch of checkpoints becomes durable.

        Listeners run in the writing thread, after the commit; an exception in one is
        logged and does not affect the run. The Django app uses this to publish events.
        """
        listeners = self.__dict__.setdefault("_listeners", [])
        if listener not in listeners:
            listeners.append(listener)

    def remove_listener(self, listener: Listener) -> None:
        """Stop calling ``listener``."""
        listeners = self.__dict__.get("_listeners", [])
        if listener in listeners:
            listeners.remove(listener)

    def notify(self, writes: Sequence[CheckpointWrite]) -> None:
        """Tell the listeners that ``writes`` were committed (called by the engine)."""
        for listener in self.__dict__.get("_listeners", ()):
            try:
                listener(writes)
            except Exception:
                logger.exception("checkpoint listener %r failed", listener)

    @classmethod
    def default(cls) -> Storage:
        """The storage of the Django project's configured ``default`` database."""
        return cls("django://default")

    # -- leases: one run per thread -------------------------------------------------

    @abstractmethod
    def acquire(self, thread_id: str, lease_id: str, *, seconds: float) -> bool:
        """Take the thread for the run ``lease_id`` for ``seconds``.

        Creates the thread if it does not exist. Returns False, changing nothing, when
        another lease on it has not expired.
        """

    @abstractmethod
    def renew(self, thread_id: str, lease_id: str, *, seconds: float) -> bool:
        """Extend a held lease by ``seconds`` from now; False if it was lost."""

    @abstractmethod
    def release(self, thread_id: str, lease_id: str) -> None:
        """Give the thread back; a no-op when ``lease_id`` no longer holds it."""

    def acquire_head(
        self, thread_id: str, lease_id: str, *, seconds: float
    ) -> tuple[bool, Checkpoint | None]:
        """Take the lease as :meth:`acquire` does and, if taken, read the head.

        Returns ``(False, None)`` when another live lease holds the thread, else
        ``(True, head)``. If reading the head fails, the lease is given back before the
        error goes up. Backends override this to take the lease and learn the head in
        fewer round trips; this default is ``acquire`` then ``head``.
        """
        if not self.acquire(thread_id, lease_id, seconds=seconds):
            return False, None
        try:
            return True, self.head(thread_id)
        except BaseException:
            self.release(thread_id, lease_id)
            raise

    def write_and_release(self, writes: Sequence[CheckpointWrite], *, lease_id: str) -> None:
        """Append checkpoints as :meth:`write` does, then give the lease back.

        For a run's last write. Backends override this to release the lease in the
        write itself (one transaction, one commit); when the write fails nothing is
        written and the lease is still held. This default is ``write`` then ``release``.
        """
        self.write(writes, lease_id=lease_id)
        for thread_id in dict.fromkeys(w.checkpoint.thread_id for w in writes):
            self.release(thread_id, lease_id)

    @abstractmethod
    def thread_info(self, thread_id: str) -> ThreadInfo | None:
        """The thread's head version, head status and live lease; None if unknown."""

    # -- checkpoints -----------------------------------------------------------------

    @abstractmethod
    def write(self, writes: Sequence[CheckpointWrite], *, lease_id: str | None) -> None:
        """Append checkpoints, all or nothing, and move each thread's head.

        Args:
            writes: in order; each must expect the head its predecessor leaves.
            lease_id: the run that writes them; the write fails if it no longer holds
                the lease (``None``: only when the caller holds no lease by design).
        Raises:
            LeaseLost: the lease expired and another run took the thread.
            StorageError: the head moved (a concurrent write) or the database failed.
        """

    @abstractmethod
    def head(self, thread_id: str) -> Checkpoint | None:
        """The thread's newest checkpoint with its state; None if it has none."""

    def heads(self, thread_ids: Sequence[str]) -> dict[str, Checkpoint]:
        """:meth:`head` of each thread that has a checkpoint, by thread id (lists need
        many at once; backends read them in a few queries). This default reads them one
        by one."""
        found = {tid: self.head(tid) for tid in thread_ids}
        return {tid: cp for tid, cp in found.items() if cp is not None}

    @abstractmethod
    def get_checkpoint(self, thread_id: str, checkpoint_id: str) -> Checkpoint:
        """One checkpoint with its state. Raises CheckpointNotFound."""

    @abstractmethod
    def history(
        self, thread_id: str, *, limit: int | None = None, before: int | None = None
    ) -> list[Checkpoint]:
        """Checkpoints newest first, with their states.

        Args:
            limit: at most this many (None: all).
            before: only versions lower than this (for paging: pass the last version seen).
        """

    @abstractmethod
    def delete_thread(self, thread_id: str, *, audit: AuditRecord | None = None) -> bool:
        """Remove the thread and all its checkpoints; False if it did not exist.
        ``audit``: the event of the person's action, stored with the deletion."""

    def delete_idle_thread(
        self, thread_id: str, *, audit: AuditRecord | None = None
    ) -> bool | None:
        """Delete the thread as :meth:`delete_thread` does, unless it is busy.

        Returns:
            True when it was deleted, False when it did not exist, None when a lease
            holds it (a store that keeps runs also refuses while one of them is pending
            or running): nothing changed, the caller cancels and waits first.

        ``audit``'s ``before`` becomes the deleted head's id.
        """
        info = self.thread_info(thread_id)
        if info is None:
            return False
        if info.lease_id is not None:
            return None
        if audit is not None:
            head = self.head(thread_id)
            audit = replace(audit, before=head.id if head is not None else None)
        return self.delete_thread(thread_id, audit=audit)

    @abstractmethod
    def thread_ids(self, *, limit: int = 100, offset: int = 0) -> list[str]:
        """Thread ids, most recently updated first."""

    # -- history maintenance: rollback, compaction, copy --------------------------------
    # Defaults refuse politely (a store that only appends still runs graphs); both
    # shipped stores implement them.

    def rollback_run(self, thread_id: str, run_id: str) -> int:
        """Delete the checkpoints the run ``run_id`` wrote on the thread, and any written
        after its first one, with their value rows; the head moves back to the
        checkpoint before (the thread is empty if there is none).

        The caller holds the thread's lease, so no run writes meanwhile. Returns how many
        checkpoints were deleted (0: the run wrote none, and nothing changed).
        """
        raise self._unsupported("rollbacks")

    def compact_thread(self, thread_id: str, *, audit: AuditRecord | None = None) -> int:
        """Delete every checkpoint of the thread but its head, and every value row the
        head's state is not built from; the head and its state stay as they are.

        ``audit``: the event of the action, stored in the same transaction. Returns how
        many checkpoints were deleted (0 for an unknown or empty thread).
        """
        raise self._unsupported("compaction")

    def copy_thread(
        self, thread_id: str, new_thread_id: str, *, audit: AuditRecord | None = None
    ) -> str | None:
        """Copy the thread's whole history to the new thread ``new_thread_id``:
        checkpoints with new ids (their parent links follow), value rows as stored, so
        the copy costs what the original does. No lease is copied.

        ``audit``: the event of the action, stored in the same transaction with
        ``after`` set to the copy's head. Returns the copy's head checkpoint id (None
        when the source has no checkpoints: the copy is an empty thread). Raises
        StorageError when ``new_thread_id`` exists, ThreadNotFound when ``thread_id``
        does not.
        """
        raise self._unsupported("copies")

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections and background threads; the storage stays usable."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r})"

    # -- options; the agent tables (decisions, effects, memory, documents, audit) ----
    # Defaults refuse politely, so a third-party store that only keeps checkpoints still
    # runs workflows and agents without approvals/memory; both shipped stores override.

    def _init_options(self, options: Mapping[str, Any]) -> None:
        """Read the options every backend shares: ``encryption_key`` and ``audit``.

        ``encryption_key``: a Fernet key, or several comma-separated (the first encrypts);
        default ``$CRIOGEN_ENCRYPTION_KEY``. ``audit``: record the audit trail; default
        ``$CRIOGEN_AUDIT`` (true/false). ``max_state_bytes``: the largest state (as JSON)
        a person's input or update may make a thread's state (default
        ``$CRIOGEN_MAX_STATE_BYTES`` or 16 MiB; 0: no limit). Raises EncryptionKeyInvalid
        for a malformed key.
        """
        from criogen.engine.crypto import Cipher

        self.cipher = Cipher.from_option(options.get("encryption_key"))
        audit = options.get("audit")
        if audit is None:
            audit = os.environ.get("CRIOGEN_AUDIT", "").strip().lower() in (
                "1",
                "true",
                "yes",
                "on",
            )
        self.audit_enabled = bool(audit)
        limit = options.get("max_state_bytes")
        if limit is None:
            limit = os.environ.get("CRIOGEN_MAX_STATE_BYTES", "").strip() or DEFAULT_MAX_STATE_BYTES
        try:
            self.max_state_bytes = int(limit)
        except (TypeError, ValueError):
            raise InvalidArgument(
                f"max_state_bytes is {limit!r}; use a whole number of bytes (0: no limit).",
                field="max_state_bytes",
            ) from None

    def _unsupported(self, what: str) -> StorageError:
        return StorageError(f"{type(self).__name__} does not store {what}.", storage=self.url)

    # -- decisions and the effect ledger --------------------------------------------

    def write_decisions(
        self,
        writes: Sequence[CheckpointWrite],
        decisions: Sequence[DecisionRecord],
        *,
        lease_id: str | None,
    ) -> None:
        """Append checkpoints (as :meth:`write`) and insert decision records, all or nothing.

        Raises:
            AlreadyDecided: a decision for one of the ``(thread, version, call_id)`` exists;
                nothing was written.
            LeaseLost, StorageError: as for :meth:`write`.
        """
        raise self._unsupported("approval decisions")

    def decisions(self, thread_id: str, *, version: int | None = None) -> list[DecisionRecord]:
        """The thread's decision records, newest first (only ``version``'s if given)."""
        return []

    def begin_effect(self, effect: EffectRecord) -> EffectRecord | None:
        """Commit the intent row of a tool call before it runs.

        Returns None when the intent was inserted, or the existing record (unchanged) when
        one with the same idempotency key is already there.
        """
        raise self._unsupported("the effect ledger")

    def retry_effect(self, key: str) -> None:
        """Count one more attempt of an effect whose outcome is unknown (it runs again)."""
        raise self._unsupported("the effect ledger")

    def finish_effect(self, key: str, *, status: str, result: str) -> None:
        """Commit the outcome (``success``/``error`` and the tool message content)."""
        raise self._unsupported("the effect ledger")

    def get_effect(self, key: str) -> EffectRecord | None:
        """The effect with this idempotency key, or None."""
        return None

    def effects(self, thread_id: str) -> list[EffectRecord]:
        """The thread's effects, oldest first."""
        return []

    # -- memory (facts) --------------------------------------------------------------

    def add_fact(self, namespace: str, subject: str, text: str) -> FactRecord:
        """Store a long-term fact about ``subject`` and return it (with its new id)."""
        raise self._unsupported("memory facts")

    def facts(self, namespace: str, subject: str) -> list[FactRecord]:
        """The facts about ``subject``, oldest first."""
        return []

    def get_fact(self, fact_id: str) -> FactRecord | None:
        """One fact, or None."""
        return None

    def update_fact(self, fact_id: str, text: str) -> FactRecord | None:
        """Replace a fact's text; None when there is no such fact."""
        raise self._unsupported("memory facts")

    def delete_fact(self, fact_id: str) -> bool:
        """Remove a fact; False when there was none."""
        raise self._unsupported("memory facts")

    # -- collections (documents) ----------------------------------------------------

    def put_document(
        self, collection: str, doc_id: str, text: str, metadata: Mapping[str, Any]
    ) -> DocumentRecord:
        """Add a document to a collection, or replace the one with the same id."""
        raise self._unsupported("documents")

    def get_document(self, collection: str, doc_id: str) -> DocumentRecord | None:
        """One document, or None."""
        return None

    def delete_document(self, collection: str, doc_id: str) -> bool:
        """Remove a document; False when there was none."""
        raise self._unsupported("documents")

    def documents(
        self, collection: str, *, limit: int = 100, offset: int = 0
    ) -> list[DocumentRecord]:
        """The collection's documents, oldest first."""
        return []

    def search_documents(
        self, collection: str, query: str, *, limit: int = 5
    ) -> list[DocumentRecord]:
        """The documents that best match ``query``, best first (``score`` set).

        PostgreSQL: full-text search (``websearch_to_tsquery``, English stemming, ranked
        by ``ts_rank``). SQLite: FTS5 (``bm25``). Memory, and any store with encryption
        on (the database cannot index ciphertext): every query word must occur in the
        text, case-insensitively, ranked by how often they occur.
        """
        return []

    # -- audit -------------------------------------------------------------------------

    def record_audit(  # noqa: B027 - a no-op unless a backend keeps the audit trail
        self,
        action: str,
        *,
        thread_id: str | None = None,
        actor: str | None = None,
        details: Mapping[str, Any] | None = None,
        door: str = "",
        before: str | None = None,
        after: str | None = None,
    ) -> None:
        """Append an audit event when the audit trail is on (a no-op otherwise).

        An action that writes a checkpoint hands its event to the write instead
        (``CheckpointWrite.audit``), so the two commit together.
        """

    def audit_events(self, *, thread_id: str | None = None, limit: int = 100) -> list[AuditRecord]:
        """Audit events, newest first (only ``thread_id``'s if given).

        A thread's events are those written since it was created: a thread deleted and
        created again under the same id does not show the earlier one's (a deleted
        thread's stay readable under its id until then). Without ``thread_id``, all.
        """
        return []


def _scheme(url: str) -> str:
    scheme, sep, _ = url.partition("://")
    return scheme.lower() if sep else ""


def _redact(url: str) -> str:
    """The URL with its password replaced by ``***``."""
    parts = urlsplit(url)
    if parts.password:
        return parts._replace(netloc=parts.netloc.replace(f":{parts.password}@", ":***@")).geturl()
    return url


# -- records of the agent tables ---------------------------------------------------------


def _utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class DecisionRecord:
    """An operator's decision on one pending tool call (see ``Decision`` model)."""

    thread_id: str
    """The thread."""
    version: int
    """Version of the suspended checkpoint the decision answers."""
    checkpoint_id: str
    """Id of that checkpoint."""
    call_id: str
    """The tool call decided."""
    tool: str
    """The tool's name."""
    digest: str
    """SHA-256 of the call's canonical arguments (what the operator saw)."""
    decision: str
    """``approve``, ``reject``, ``edit`` or ``respond``."""
    args: dict[str, Any] | None = None
    """For ``edit``: the arguments the tool runs with instead."""
    message: str | None = None
    """For ``reject``: the reason; for ``respond``: the reply given to the model."""
    actor: str | None = None
    """Who decided, when known."""
    decided_at: datetime = field(default_factory=_utcnow)
    """When."""


@dataclass(frozen=True, slots=True)
class EffectRecord:
    """One row of the effect ledger (see ``Effect`` model)."""

    key: str
    """Idempotency key: a hash of (thread, checkpoint of the step, call id)."""
    thread_id: str
    """The thread."""
    checkpoint_id: str
    """The checkpoint of the model step that asked for the call."""
    call_id: str
    """The tool call."""
    tool: str
    """The tool's name."""
    args: dict[str, Any]
    """The arguments it runs with."""
    status: str = "intent"
    """``intent`` (running or outcome unknown), ``success`` or ``error``."""
    result: str | None = None
    """The tool message content, once finished."""
    attempts: int = 1
    """How many times the tool was started with this key."""
    created_at: datetime = field(default_factory=_utcnow)
    """When the intent was committed."""
    finished_at: datetime | None = None
    """When the outcome was committed."""


@dataclass(frozen=True, slots=True)
class FactRecord:
    """A long-term memory fact about one person."""

    id: str
    """Random UUID."""
    namespace: str
    """The state key the person is found by (``user_id``)."""
    subject: str
    """Its value: the person."""
    text: str
    """The fact."""
    created_at: datetime = field(default_factory=_utcnow)
    """When it was stored."""
    updated_at: datetime = field(default_factory=_utcnow)
    """When it was last edited."""


@dataclass(frozen=True, slots=True)
class DocumentRecord:
    """A document of a collection."""

    collection: str
    """The collection's name."""
    doc_id: str
    """Its id within the collection."""
    text: str
    """The text searched and shown to the model."""
    metadata: dict[str, Any] = field(default_factory=dict)
    """Free JSON (source, title, url…)."""
    created_at: datetime = field(default_factory=_utcnow)
    """When it was stored."""
    score: float | None = None
    """For search results: how well it matched (higher is better)."""


@dataclass(frozen=True, slots=True)
class AuditRecord:
    """One audit event: who did what to which thread, and when."""

    action: str
    """``input``, ``approve``, ``reject``, ``decide``, ``respond``, ``rewind``, ``retry``,
    ``update_state``, ``delete``…"""
    thread_id: str | None
    """The thread, if the action concerns one."""
    actor: str | None
    """Who, when known."""
    details: dict[str, Any]
    """What exactly (decisions with edits, values, run ids…)."""
    created_at: datetime = field(default_factory=_utcnow)
    """When."""
    door: str = ""
    """Where the action came from: ``ui``, ``api``, ``python``, ``deadline``, ``cron``
    (empty for events written before doors were recorded)."""
    before: str | None = None
    """The thread's head checkpoint id before the action (None: empty thread)."""
    after: str | None = None
    """The head checkpoint id the action wrote (None: it wrote none, e.g. delete)."""
