"""A memory fact's subject (a person's id) at rest, on SQLite and PostgreSQL: sealed with
an encryption key and found through a keyed digest, across a key rotation, before and
after encryption is turned on, and through the migration that seals existing rows; a
wrong key (or none) fails as every other sealed row does."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from criogen import Storage
from criogen.engine.crypto import Cipher, EncryptionKeyInvalid, generate_key, lookup_keys
from criogen.storage.models.agents import SUBJECT_DIGEST_PURPOSE

pytestmark = pytest.mark.parametrize("backend", ["sqlite", "postgres"])


@pytest.fixture
def url(backend: str, request: pytest.FixtureRequest, django_db_blocker: Any) -> Iterator[str]:
    """The session's database of ``backend`` (tests keep apart by their namespaces)."""
    with django_db_blocker.unblock():
        yield str(request.getfixturevalue(f"{backend}_url"))


@pytest.fixture
def namespace() -> str:
    """A memory namespace no other test uses: facts sealed under this test's keys must
    not meet other tests' lookups."""
    return f"ns_{uuid.uuid4().hex[:8]}"


def raw_rows(storage: Storage, namespace: str) -> list[dict[str, Any]]:
    """The namespace's rows of criogen_memory_fact, read with SQL (every column)."""
    from django.db import connections

    with connections[storage.alias].cursor() as cur:  # type: ignore[attr-defined]
        cur.execute("SELECT * FROM criogen_memory_fact WHERE namespace = %s", [namespace])
        names = [c[0] for c in cur.description]
        return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


def key_id(key: str) -> str:
    return lookup_keys(Cipher(key), SUBJECT_DIGEST_PURPOSE)[0].id


def test_a_raw_scan_finds_no_subject_in_clear(url: str, namespace: str) -> None:
    key = generate_key()
    storage = Storage(url, encryption_key=key)
    person = f"person-{uuid.uuid4().hex}"
    storage.add_fact(namespace, person, "likes tea")
    storage.add_fact(namespace, person, "has a dog")
    storage.add_fact(namespace, f"{person}-other", "someone else")
    rows = raw_rows(storage, namespace)
    assert len(rows) == 3
    for row in rows:
        assert not any(person in str(value) for value in row.values()), row
        assert row["subject"].startswith("gAAAAA")  # a Fernet token
        assert re.fullmatch(r"[0-9a-f]{72}", row["subject_digest"]), row["subject_digest"]
        assert row["subject_digest"].startswith(key_id(key))
    # The two facts about the person share a digest; the other person's differs.
    assert len({r["subject_digest"] for r in rows}) == 2
    found = storage.facts(namespace, person)
    assert [(f.subject, f.text) for f in found] == [(person, "likes tea"), (person, "has a dog")]
    assert storage.get_fact(found[0].id).subject == person  # type: ignore[union-attr]
    assert [f.text for f in storage.facts(namespace, f"{person}-other")] == ["someone else"]
    assert storage.facts(namespace, "nobody") == []


def test_lookups_by_subject_find_facts_across_a_key_rotation(url: str, namespace: str) -> None:
    old, new = generate_key(), generate_key()
    person = f"person-{uuid.uuid4().hex[:8]}"
    before = Storage(url, encryption_key=old).add_fact(namespace, person, "written under old")
    rotated = Storage(url, encryption_key=f"{new},{old}")
    after = rotated.add_fact(namespace, person, "written under new")
    assert [f.text for f in rotated.facts(namespace, person)] == [
        "written under old",
        "written under new",
    ]
    digests = {r["id"]: r["subject_digest"] for r in raw_rows(rotated, namespace)}
    assert digests[before.id].startswith(key_id(old))
    assert digests[after.id].startswith(key_id(new))
    # Without the old key listed, its row cannot be read: an error, not a missing fact.
    with pytest.raises(EncryptionKeyInvalid):
        Storage(url, encryption_key=new).facts(namespace, person)
    # An edit seals and digests the subject again under the first key...
    edited = rotated.update_fact(before.id, "edited under new")
    assert edited is not None and edited.subject == person
    assert raw_rows(rotated, namespace)[0]["subject_digest"][:8] == key_id(new)
    # ...so the old key is no longer needed for it.
    assert [f.text for f in Storage(url, encryption_key=new).facts(namespace, person)] == [
        "edited under new",
        "written under new",
    ]


def test_facts_written_without_a_key_are_found_after_encryption_is_on(
    url: str, namespace: str
) -> None:
    person = f"person-{uuid.uuid4().hex[:8]}"
    plain = Storage(url, encryption_key=False)
    plain.add_fact(namespace, person, "before encryption")
    row = raw_rows(plain, namespace)[0]
    # Without a key the subject stays in clear; the digest (a fixed public key) is
    # what lookups match all the same.
    assert row["subject"] == person
    assert row["subject_digest"] == lookup_keys(None, SUBJECT_DIGEST_PURPOSE)[0].digest(person)
    assert [f.text for f in plain.facts(namespace, person)] == ["before encryption"]
    sealed = Storage(url, encryption_key=generate_key())
    sealed.add_fact(namespace, person, "after encryption")
    assert [(f.subject, f.text) for f in sealed.facts(namespace, person)] == [
        (person, "before encryption"),
        (person, "after encryption"),
    ]


def test_a_wrong_key_or_none_fails_as_other_sealed_rows_do(url: str, namespace: str) -> None:
    key = generate_key()
    storage = Storage(url, encryption_key=key)
    person = f"person-{uuid.uuid4().hex[:8]}"
    fact = storage.add_fact(namespace, person, "likes tea")
    collection = f"c-{uuid.uuid4().hex[:8]}"
    storage.put_document(collection, "doc", "a sealed document", {})
    before = raw_rows(storage, namespace)
    for wrong in (Storage(url, encryption_key=generate_key()), Storage(url, encryption_key=False)):
        with pytest.raises(EncryptionKeyInvalid) as document_error:
            wrong.get_document(collection, "doc")
        calls = (
            lambda s=wrong: s.facts(namespace, person),
            lambda s=wrong: s.facts(namespace, "someone-else"),  # the namespace is unreadable
            lambda s=wrong: s.get_fact(fact.id),
            lambda s=wrong: s.update_fact(fact.id, "overwritten"),
        )
        for call in calls:
            with pytest.raises(EncryptionKeyInvalid) as info:
                call()
            assert info.value.code == "encryption_key_invalid"
            assert str(info.value) == str(document_error.value)
    assert raw_rows(storage, namespace) == before  # nothing was written
    assert [f.text for f in storage.facts(namespace, person)] == ["likes tea"]


# -- the migration that seals existing rows -----------------------------------------------


@pytest.fixture
def own_url(backend: str, tmp_path: Path, django_db_blocker: Any) -> Iterator[str]:
    """A database of this test's own (it migrates backwards and forwards)."""
    from tests.conftest import own_database_url

    with own_database_url(backend, tmp_path, "criogen_subject") as url, django_db_blocker.unblock():
        yield url


def sealing_migration() -> tuple[str, str]:
    """(the migration before it, the migration that seals subjects), found by name so
    that renumbering the migrations does not break the test."""
    from django.db.migrations.loader import MigrationLoader

    disk = MigrationLoader(None, ignore_no_migrations=True).disk_migrations
    name = next(n for app, n in disk if app == "criogen" and n.endswith("_memory_subject_digest"))
    before = next(n for app, n in disk[("criogen", name)].dependencies if app == "criogen")
    return before, name


def migrate(storage: Storage, target: str) -> None:
    from django.core.management import call_command

    alias = storage.alias  # type: ignore[attr-defined]
    call_command("migrate", "criogen", target, database=alias, verbosity=0, interactive=False)


def test_the_migration_seals_and_digests_existing_subjects(
    own_url: str, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from django.db import connections

    monkeypatch.delenv("CRIOGEN_ENCRYPTION_KEY", raising=False)
    settings.CRIOGEN_ENCRYPTION_KEY = None
    key = generate_key()
    before, sealing = sealing_migration()
    storage = Storage(own_url, encryption_key=key)
    migrate(storage, before)
    people = [f"person-{uuid.uuid4().hex[:8]}" for _ in range(3)]
    insert = (
        "INSERT INTO criogen_memory_fact (id, namespace, subject, text, created_at, "
        "updated_at) VALUES (%s, %s, %s, %s, %s, %s)"
    )
    with connections[storage.alias].cursor() as cur:  # type: ignore[attr-defined]
        for n, person in enumerate(people * 2):
            at = f"2025-01-01 00:00:0{n}"
            cur.execute(insert, [str(uuid.uuid4()), "user_id", person, f"fact {n}", at, at])
        # More facts than one page of the migration (it works through them by id).
        at = "2025-01-02 00:00:00"
        filler = [(str(uuid.uuid4()), "filler", f"f-{n}", "x", at, at) for n in range(1200)]
        cur.executemany(insert, filler)
    settings.CRIOGEN_ENCRYPTION_KEY = key
    migrate(storage, sealing)
    filled = raw_rows(storage, "filler")
    assert len(filled) == 1200 and all(r["subject"].startswith("gAAAAA") for r in filled)
    assert [f.subject for f in storage.facts("filler", "f-700")] == ["f-700"]
    rows = raw_rows(storage, "user_id")
    assert len(rows) == 6
    for row in rows:
        assert not any(p in str(v) for p in people for v in row.values()), row
        assert row["subject_digest"].startswith(key_id(key))
    for n, person in enumerate(people):
        assert [f.text for f in storage.facts("user_id", person)] == [f"fact {n}", f"fact {n + 3}"]
    # Reversed, the subjects are in clear again (the key is needed to open them)...
    migrate(storage, before)
    assert sorted(r["subject"] for r in raw_rows(storage, "user_id")) == sorted(people * 2)
    # ...and without a key the forward migration keeps them in clear, with the
    # no-key digest, found all the same.
    settings.CRIOGEN_ENCRYPTION_KEY = None
    migrate(storage, sealing)
    plain = Storage(own_url, encryption_key=False)
    assert {r["subject"] for r in raw_rows(plain, "user_id")} == set(people)
    assert [f.text for f in plain.facts("user_id", people[0])] == ["fact 0", "fact 3"]
    assert [f.text for f in storage.facts("user_id", people[0])] == ["fact 0", "fact 3"]
