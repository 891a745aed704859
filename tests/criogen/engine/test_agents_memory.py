"""Long-term memory per person, collections with search and a retrieval tool, and
encryption at rest (raw tables hold no plaintext; a wrong key fails and writes nothing)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from criogen import Agent, Collection, Memory, Storage
from criogen.engine.crypto import Cipher, EncryptionKeyInvalid, generate_key
from criogen.engine.errors import InvalidArgument
from criogen.engine.memory import DocumentNotFound, FactNotFound
from criogen.llms import ScriptedModel


def remember_then_answer(fact: str) -> list[Any]:
    return [{"tool_calls": [{"name": "remember", "args": {"fact": fact}}]}, "Noted."]


def test_memory_keeps_facts_per_person_and_shows_them_in_every_conversation(
    storage: Storage, thread_id: str
) -> None:
    user = f"u-{uuid.uuid4().hex[:8]}"
    model = ScriptedModel([*remember_then_answer("Prefers e-mail."), "Hello again."])
    agent = Agent(model, memory=Memory.by_state("user_id"), storage=storage)
    first = agent.thread(thread_id).send("Please e-mail me, never call.", user_id=user)
    assert first.text == "Noted."
    assert [f.text for f in agent.memory.list(user)] == ["Prefers e-mail."]
    # A new conversation of the same person starts with what is known about them.
    agent.thread(f"{thread_id}-2").send("Hi", user_id=user)
    system = [m for m in model.calls[-1].messages if m["type"] == "system"]
    assert len(system) == 1 and "Prefers e-mail." in system[0]["content"]
    assert "remember" in {t.name for t in model.calls[-1].tools}
    # Another person sees none of it.
    other = ScriptedModel(["Hi stranger."])
    Agent(other, memory=Memory.by_state("user_id"), storage=storage).thread(f"{thread_id}-3").send(
        "Hi", user_id=f"{user}-other"
    )
    assert "Prefers e-mail." not in str(other.calls[0].messages)


def test_memory_facts_can_be_listed_edited_and_deleted_from_python(storage: Storage) -> None:
    memory = Memory.by_state("user_id").bind(storage)
    user = f"u-{uuid.uuid4().hex[:8]}"
    fact = memory.add(user, "Lives in Lyon.")
    memory.add(user, "Has a cat.")
    assert [f.text for f in memory.list(user)] == ["Lives in Lyon.", "Has a cat."]
    edited = memory.edit(fact.id, "Lives in Paris.")
    assert edited.text == "Lives in Paris." and edited.id == fact.id
    memory.delete(fact.id)
    assert [f.text for f in memory.list(user)] == ["Has a cat."]
    with pytest.raises(FactNotFound) as info:
        memory.delete(fact.id)
    assert info.value.code == "fact_not_found"
    with pytest.raises(FactNotFound):
        memory.edit("nope", "x")
    with pytest.raises(InvalidArgument):
        memory.add(user, "  ")
    assert memory.forget(user) == 1 and memory.list(user) == []


def test_remember_without_the_person_in_the_state_is_an_error_for_the_model(
    storage: Storage, thread_id: str
) -> None:
    agent = Agent(
        ScriptedModel([*remember_then_answer("x")]),
        memory=Memory.by_state("user_id"),
        storage=storage,
    )
    reply = agent.thread(thread_id).send("hi")
    tool_message = [m for m in reply.messages if m["type"] == "tool"][0]
    assert tool_message["status"] == "error" and "user_id" in tool_message["content"]


def test_collections_search_and_the_retrieval_tool_finds_documents(
    storage: Storage, thread_id: str
) -> None:
    faq = Collection(f"faq-{uuid.uuid4().hex[:8]}", storage=storage)
    faq.add("Refunds are paid within five days of approval.", id="refunds", metadata={"n": 1})
    faq.add("Shipping to Norway takes two weeks.", id="shipping")
    faq.add("Our shop opens at nine.", id="hours")
    hits = faq.search("refunds paid")
    assert [h.doc_id for h in hits] == ["refunds"]
    assert hits[0].metadata == {"n": 1} and hits[0].score is not None
    assert faq.search('AND OR NEAR( "*') == []  # query syntax in user input is just text
    assert faq.search("") == []
    faq.add("Refunds for gifts go to the buyer.", id="gifts")
    assert {h.doc_id for h in faq.search("refunds")} == {"refunds", "gifts"}
    faq.add("Shipping to Norway takes one week now.", id="shipping")  # replaces
    assert faq.get("shipping").text.endswith("one week now.")
    assert {d.doc_id for d in faq.list()} == {"refunds", "shipping", "hours", "gifts"}
    faq.delete("hours")
    with pytest.raises(DocumentNotFound):
        faq.get("hours")

    model = ScriptedModel(
        [{"tool_calls": [{"name": "search_faq", "args": {"query": "shipping Norway"}}]}, "ok"]
    )
    agent = Agent(model, tools=[Collection(faq.name).as_tool(name="search_faq")], storage=storage)
    reply = agent.thread(thread_id).send("How long to Norway?")
    result = [m for m in reply.messages if m["type"] == "tool"][0]
    assert result["status"] == "success" and "one week now" in result["content"]


def test_encryption_keys_are_checked_and_rotate() -> None:
    with pytest.raises(EncryptionKeyInvalid) as info:
        Storage(encryption_key="not-a-key")
    assert info.value.code == "encryption_key_invalid"
    old, new = generate_key(), generate_key()
    token = Cipher(old).seal("secret")
    assert Cipher(f"{new},{old}").open(token) == "secret"
    with pytest.raises(EncryptionKeyInvalid):
        Cipher(new).open(token)
    assert Cipher(new).open('{"plain": 1}') == '{"plain": 1}'  # written before encryption


def test_lookup_digests_are_keyed_per_key_and_purpose() -> None:
    from criogen.engine.crypto import lookup_keys

    old, new = generate_key(), generate_key()
    rotated = lookup_keys(Cipher(f"{new},{old}"), "memory subject")
    # Every listed key, first one first, then the fixed key used without encryption.
    assert [k.id for k in rotated] == [
        lookup_keys(Cipher(new), "memory subject")[0].id,
        lookup_keys(Cipher(old), "memory subject")[0].id,
        lookup_keys(None, "memory subject")[0].id,
    ]
    digests = [k.digest("42") for k in rotated]
    assert len(set(digests)) == 3 and all(len(d) == 72 for d in digests)
    assert all(
        d.startswith(k.id) and int(d, 16) >= 0 for d, k in zip(digests, rotated, strict=True)
    )
    assert lookup_keys(Cipher(old), "memory subject")[0].digest("42") == digests[1]  # stable
    assert lookup_keys(Cipher(old), "other purpose")[0].digest("42") != digests[1]
    assert rotated[0].digest("43") != digests[0]


SECRET = "Zanzibar-4711"


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_encrypted_storage_keeps_no_plaintext_and_a_wrong_key_writes_nothing(
    backend: str, request: pytest.FixtureRequest, thread_id: str, django_db_blocker: Any
) -> None:
    from django.db import connections

    from criogen.engine.tools import tool

    @tool
    def note(text: str) -> str:
        """Write a note."""
        return f"noted {text}"

    url = str(request.getfixturevalue(f"{backend}_url"))
    key = generate_key()
    with django_db_blocker.unblock():
        storage = Storage(url, encryption_key=key, audit=True)
        # The person's id is user data too: its subject column must not show it.
        user = f"user-{SECRET}-{uuid.uuid4().hex[:6]}"
        # A memory namespace of this test's own: the session's databases are shared,
        # and a namespace holding facts sealed with a key other tests lack fails their
        # lookups (as it should: those facts cannot be read without it).
        person = f"person_{uuid.uuid4().hex[:6]}"
        model = ScriptedModel(
            [
                {"tool_calls": [{"name": "remember", "args": {"fact": f"code {SECRET}"}}]},
                {"tool_calls": [{"name": "note", "args": {"text": SECRET}, "id": "n1"}]},
                f"Your code is {SECRET}.",
            ]
        )
        agent = Agent(
            model,
            tools=[note],
            approve=["note"],
            memory=Memory.by_state(person),
            storage=storage,
        )
        t = agent.thread(thread_id)
        assert t.send(f"My code is {SECRET}", **{person: user}).status == "suspended"
        reply = t.decide({"n1": {"args": {"text": f"{SECRET}!"}}}, by="alice")
        assert reply.text == f"Your code is {SECRET}."
        docs = Collection(f"c-{uuid.uuid4().hex[:6]}", storage=storage)
        docs.add(f"The vault code is {SECRET}.", id="vault", metadata={"secret": SECRET})
        assert [d.doc_id for d in docs.search("vault code")] == ["vault"]
        # Every table holding user data, read raw: no plaintext anywhere.
        tables = {
            "criogen_value": "data",
            "criogen_checkpoint": "body",
            "criogen_memory_fact": "text || subject || subject_digest",
            "criogen_document": "text || metadata",
            "criogen_decision": "args || message",
            "criogen_effect": "args || coalesce(result, '')",
            "criogen_audit_event": "details",
        }
        with connections[storage.alias].cursor() as cur:
            for table, column in tables.items():
                cur.execute(f"SELECT {column} FROM {table}")  # noqa: S608
                rows = [r[0] for r in cur.fetchall()]
                assert rows, table
                assert not any(SECRET in (r or "") for r in rows), table
            cur.execute("SELECT head_status FROM criogen_thread WHERE id = %s", [thread_id])
            assert cur.fetchone()[0] == "completed"  # ids and statuses stay in clear
        # Reading with the right key gives everything back.
        assert SECRET in agent.thread(thread_id).messages[0]["content"]
        assert agent.memory.list(user)[0].text == f"code {SECRET}"
        before = storage.thread_info(thread_id)
        # A wrong key (or none) fails clearly and overwrites nothing.
        for wrong in (Storage(url, encryption_key=generate_key()), Storage(url)):
            stranger = Agent(ScriptedModel(["never"]), storage=wrong)
            with pytest.raises(EncryptionKeyInvalid) as info:
                stranger.thread(thread_id).send("overwrite?")
            assert info.value.code == "encryption_key_invalid"
            after = storage.thread_info(thread_id)
            assert after is not None and before is not None
            assert after.head_version == before.head_version and after.lease_id is None
        assert storage.head(thread_id) is not None
