"""The storage protocol: the small interface the engine talks to.

Two implementations: :class:`criogen.storage.memory.MemoryStorage` (tests, scripts)
and :class:`criogen.storage.orm.OrmStorage` (Django ORM tables on SQLite or
PostgreSQL). ``Storage(url)`` picks one by the URL's scheme, as Django picks a
database backend by its ``ENGINE`` string, so this module imports neither.

How values are kept (both backends): a checkpoint stores, per state key, the version
of the write that holds the key's value (``value_versions``). A write stores one value
row per *changed* key: ``set`` rows hold the whole value, ``append`` rows hold only
the appended items and point at the previous row of the same key. So a key that did
not change costs nothing, a growing list costs only its new items, and a fork (rewind)
just copies ``value_versions``. Reading a state follows those pointers.
"""

from __future__ import annotations

import importlib
import json
import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from criogen.engine.checkpoints import Checkpoint, CheckpointWrite
from criogen.engine.errors import UnknownStorageUrl

__all__ = ["BACKENDS", "Storage", "ThreadInfo", "ValueRow", "build_state", "encode"]

logger = logging.getLogger("criogen.storage")

Listener = Callable[[Sequence[CheckpointWrite]], None]

BACKENDS: dict[str, str] = {
    "memory": "criogen.storage.memory.MemoryStorage",
    "sqlite": "criogen.storage.orm.OrmStorage",
    "postgres": "criogen.storage.orm.OrmStorage",
    "postgresql": "criogen.storage.orm.OrmStorage",
    "django": "criogen.storage.orm.OrmStorage",
}
"""URL scheme -> backend class (dotted path), imported when first used."""


def encode(value: Any) -> str:
    """JSON text of a (validated) state value, compact and deterministic."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


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
            for data in reversed(chunks):
                value.extend(decode(data))
        state[key] = value
    return state


def value_rows_for(write: CheckpointWrite) -> Iterable[tuple[str, int, str, str, int | None]]:
    """``(key, version, kind, data, prev)`` for each value row a write adds."""
    version = write.checkpoint.version
    for key, change in write.delta.items():
        if change.op == "append":
            yield key, version, "a", encode(change.value), write.prev_versions.get(key)
        else:
            yield key, version, "s", encode(change.value), None


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
            raise UnknownStorageUrl(
                f"storage URL {url!r} has the scheme {scheme!r}; use none (memory), "
                "'sqlite://path/to/file.db' or 'postgres://user:password@host/db'.",
                url=url,
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
    def delete_thread(self, thread_id: str) -> bool:
        """Remove the thread and all its checkpoints; False if it did not exist."""

    @abstractmethod
    def thread_ids(self, *, limit: int = 100, offset: int = 0) -> list[str]:
        """Thread ids, most recently updated first."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections and background threads; the storage stays usable."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r})"


def _scheme(url: str) -> str:
    scheme, sep, _ = url.partition("://")
    return scheme.lower() if sep else ""
