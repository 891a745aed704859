"""Long-term memory (facts per person) and document collections with search.

::

    memory = Memory.by_state("user_id")     # the person is state["user_id"]
    agent = Agent(model=..., memory=memory, storage=storage)
    agent.thread("t1").send("I prefer e-mail.", user_id="42")
    agent.memory.list("42")                 # FactRecord(id, text, …) oldest first

    faq = Collection("faq", storage=storage)
    faq.add("Refunds take 5 days.", id="refunds")
    faq.search("how long refunds")          # best first
    agent = Agent(..., tools=[faq.as_tool()])

Memory facts are shown to the model as a system message at the start of every model
call of a conversation whose state names the person; the model adds facts with the
``remember`` tool. Facts and documents live in the agent's storage (memory, SQLite or
PostgreSQL), encrypted at rest when the storage has a key.
"""

from __future__ import annotations

import builtins
import uuid
from collections.abc import Mapping
from typing import Any

from criogen.engine.errors import DocumentNotFound, FactNotFound, InvalidArgument
from criogen.engine.messages import Message, system
from criogen.engine.store import DocumentRecord, FactRecord, Storage
from criogen.engine.tools import Tool, ToolContext

__all__ = ["Collection", "DocumentNotFound", "FactNotFound", "Memory"]


def _check_name(value: Any, field: str) -> str:
    if not isinstance(value, str) or not value.strip() or len(value) > 255:
        raise InvalidArgument(f"{field} {value!r} must be 1–255 characters.", field=field)
    return value


def _storage_of(owner: Storage | None, storage: Storage | None, what: str) -> Storage:
    found = storage if storage is not None else owner
    if found is None:
        raise InvalidArgument(
            f"this {what} has no storage: create it with storage=..., or use the one the "
            "agent binds (agent.memory).",
            field="storage",
        )
    return found


class Memory:
    """Facts about people, kept in storage and shown to the model.

    Build it with :meth:`by_state`: the person is identified by a state key (values
    passed with ``send`` land in the state). A conversation whose state lacks the key
    has no memory: no facts are shown and ``remember`` tells the model so.
    """

    def __init__(
        self,
        key: str,
        *,
        storage: Storage | None = None,
        tool_name: str = "remember",
        max_facts: int = 100,
    ) -> None:
        self.key = _check_name(key, "memory key")
        self.storage: Storage | None = storage
        self.tool_name = tool_name
        self.max_facts = max_facts

    @classmethod
    def by_state(cls, key: str, **options: Any) -> Memory:
        """Memory per person, the person being ``state[key]`` (e.g. ``"user_id"``)."""
        return cls(key, **options)

    def __repr__(self) -> str:
        return f"Memory.by_state({self.key!r})"

    def bind(self, storage: Storage) -> Memory:
        """The same memory on ``storage`` (the Agent binds its own)."""
        bound = Memory(self.key, storage=storage, tool_name=self.tool_name)
        bound.max_facts = self.max_facts
        return bound

    # -- used by the agent ----------------------------------------------------------------

    def subject(self, state: Mapping[str, Any]) -> str | None:
        """The person a state is about (``str(state[key])``), or None."""
        value = state.get(self.key)
        if value is None or value == "":
            return None
        return value if isinstance(value, str) else str(value)

    def system_message(self, storage: Storage, state: Mapping[str, Any]) -> Message | None:
        """The system message listing what is known about the state's person."""
        who = self.subject(state)
        if who is None:
            return None
        facts = storage.facts(self.key, who)[-self.max_facts :]
        if not facts:
            return system(
                f"Long-term memory about this person ({self.key}={who}): nothing yet. "
                f"Use the {self.tool_name} tool to keep lasting facts they tell you."
            )
        lines = "\n".join(f"- {f.text}" for f in facts)
        return system(
            f"Long-term memory about this person ({self.key}={who}), from earlier "
            f"conversations:\n{lines}\nUse the {self.tool_name} tool to keep new lasting facts."
        )

    def tool(self) -> Tool:
        """The ``remember`` tool given to the model."""
        memory = self

        def remember(fact: str, ctx: ToolContext) -> str:
            """Remember a lasting fact about the person you are talking to (a preference,
            a detail of their situation), for future conversations.

            Args:
                fact: The fact, as one short sentence.
            """
            who = memory.subject(ctx.state)
            if who is None:
                raise ValueError(
                    f"there is no {memory.key!r} in this conversation, so there is nobody to "
                    "remember it for; do not call remember here."
                )
            if len(who) > 255:
                raise ValueError(f"the {memory.key} is longer than 255 characters.")
            storage = _storage_of(memory.storage, ctx.storage, "memory")
            text = fact.strip()
            if not text:
                raise ValueError("the fact is empty; send one short sentence.")
            # The same fact twice is stored once, so re-running the call is harmless.
            if not any(f.text == text for f in storage.facts(memory.key, who)):
                storage.add_fact(memory.key, who, text)
            return f"Remembered: {text}"

        return Tool.from_function(remember, name=self.tool_name, idempotent=True)

    # -- Python API: list, add, edit, delete ----------------------------------------------

    def list(self, subject: str) -> list[FactRecord]:
        """The facts about ``subject`` (``FactRecord``: id, text, created_at…), oldest first."""
        return _storage_of(self.storage, None, "memory").facts(self.key, str(subject))

    def add(self, subject: str, text: str) -> FactRecord:
        """Store a fact about ``subject``; return its ``FactRecord``."""
        if not isinstance(text, str) or not text.strip():
            raise InvalidArgument("a fact must be a non-empty string.", field="text")
        storage = _storage_of(self.storage, None, "memory")
        return storage.add_fact(self.key, _check_name(str(subject), "subject"), text.strip())

    def edit(self, fact_id: str, text: str) -> FactRecord:
        """Replace a fact's text. Raises FactNotFound."""
        if not isinstance(text, str) or not text.strip():
            raise InvalidArgument("a fact must be a non-empty string.", field="text")
        found = _storage_of(self.storage, None, "memory").update_fact(fact_id, text.strip())
        if found is None:
            raise FactNotFound(f"no memory fact {fact_id!r}.", fact_id=fact_id)
        return found

    def delete(self, fact_id: str) -> None:
        """Forget one fact. Raises FactNotFound."""
        if not _storage_of(self.storage, None, "memory").delete_fact(fact_id):
            raise FactNotFound(f"no memory fact {fact_id!r}.", fact_id=fact_id)

    def forget(self, subject: str) -> int:
        """Forget everything about ``subject``; return how many facts were deleted."""
        storage = _storage_of(self.storage, None, "memory")
        facts = storage.facts(self.key, str(subject))
        return sum(1 for f in facts if storage.delete_fact(f.id))


class Collection:
    """A named set of documents in storage, searched with the database's full-text
    search (see ``Storage.search_documents``)."""

    def __init__(self, name: str, *, storage: Storage | None = None) -> None:
        self.name = _check_name(name, "collection name")
        self.storage: Storage | None = storage

    def __repr__(self) -> str:
        return f"Collection({self.name!r})"

    def bind(self, storage: Storage) -> Collection:
        """The same collection on another storage."""
        return Collection(self.name, storage=storage)

    def _store(self) -> Storage:
        return _storage_of(self.storage, None, "collection")

    def add(
        self, text: str, *, id: str | None = None, metadata: Mapping[str, Any] | None = None
    ) -> DocumentRecord:
        """Add a document (or replace the one with the same ``id``); return its record."""
        if not isinstance(text, str) or not text.strip():
            raise InvalidArgument("a document's text must be a non-empty string.", field="text")
        doc_id = _check_name(id, "document id") if id is not None else str(uuid.uuid4())
        from criogen.engine.state import check_json

        check_json(dict(metadata or {}), "metadata")
        return self._store().put_document(self.name, doc_id, text, dict(metadata or {}))

    def get(self, id: str) -> DocumentRecord:
        """One document. Raises DocumentNotFound."""
        found = self._store().get_document(self.name, id)
        if found is None:
            raise DocumentNotFound(f"collection {self.name!r} has no document {id!r}.", id=id)
        return found

    def delete(self, id: str) -> None:
        """Remove a document. Raises DocumentNotFound."""
        if not self._store().delete_document(self.name, id):
            raise DocumentNotFound(f"collection {self.name!r} has no document {id!r}.", id=id)

    def list(self, *, limit: int = 100, offset: int = 0) -> builtins.list[DocumentRecord]:
        """The documents, oldest first."""
        return self._store().documents(self.name, limit=limit, offset=offset)

    def search(self, query: str, *, limit: int = 5) -> builtins.list[DocumentRecord]:
        """The best matches for ``query``, best first (each with ``score``)."""
        if not isinstance(query, str):
            raise InvalidArgument("the search query must be a string.", field="query")
        return self._store().search_documents(self.name, query, limit=limit)

    def as_tool(
        self, *, name: str | None = None, description: str | None = None, limit: int = 5
    ) -> Tool:
        """A retrieval tool: the model searches this collection and reads the matches.

        It searches the storage of the run that calls it (so an agent rebound to the
        server's database searches there), or this collection's own storage.
        """
        collection = self

        def search(query: str, ctx: ToolContext) -> builtins.list[dict[str, Any]]:
            """Search the documents for passages relevant to a question.

            Args:
                query: Key words to look for.
            """
            storage = ctx.storage if ctx.storage is not None else collection.storage
            bound = (
                collection
                if storage is None or storage is collection.storage
                else collection.bind(storage)
            )
            return [
                {"id": d.doc_id, "text": d.text, "metadata": d.metadata, "score": d.score}
                for d in bound.search(query, limit=limit)
            ]

        return Tool.from_function(
            search,
            name=name or f"search_{self.name}".replace(" ", "_")[:64],
            description=description
            or f"Search the {self.name!r} documents for passages relevant to a question.",
            idempotent=True,
        )
