"""A memory fact's subject (a person's id, e.g. a ``user_id`` value) is sealed at rest
like its text, and found through ``subject_digest``: a keyed HMAC of the subject
(:func:`criogen.engine.crypto.lookup_keys`). The index on the subject moves to the
digest.

Existing rows are migrated here: with ``CRIOGEN_ENCRYPTION_KEY`` set (the setting, else
the environment) their subject is sealed with the first key and digested under it;
without a key the subject stays in clear and gets the no-key digest. (A database that
a plain script opened with ``Storage(url, encryption_key=...)`` but whose migration
ran without the key keeps its subjects in clear: they are still found, and a fact
sealed on its next edit.) Reversing opens the subjects again (it needs the key they
were sealed with) and drops the digest.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from django.conf import settings
from django.db import migrations, models

from criogen.engine.crypto import ENV_VAR, Cipher, is_sealed, lookup_keys, open_without_key

# The digest purpose as of this migration (criogen.storage.models.agents uses the same).
PURPOSE = "memory subject"


def _cipher() -> Cipher | None:
    key = getattr(settings, "CRIOGEN_ENCRYPTION_KEY", None) or os.environ.get(ENV_VAR) or None
    return Cipher(key) if key else None


def _pages(model: Any, alias: str) -> Iterator[list[Any]]:
    """The facts in pages of 500 by id (keyset: safe to update the page just read)."""
    last = ""
    while True:
        page = list(
            model.objects.using(alias)
            .only("id", "subject")
            .filter(id__gt=last)
            .order_by("id")[:500]
        )
        if not page:
            return
        yield page
        last = page[-1].id


def seal_subjects(apps: Any, schema_editor: Any) -> None:
    MemoryFact = apps.get_model("criogen", "MemoryFact")
    alias = schema_editor.connection.alias
    cipher = _cipher()
    digest_key = lookup_keys(cipher, PURPOSE)[0]
    for page in _pages(MemoryFact, alias):
        for fact in page:
            subject = fact.subject
            if is_sealed(subject):  # not expected before this migration, but be safe
                subject = cipher.open(subject) if cipher is not None else open_without_key(subject)
            fact.subject = cipher.seal(subject) if cipher is not None else subject
            fact.subject_digest = digest_key.digest(subject)
        MemoryFact.objects.using(alias).bulk_update(page, ["subject", "subject_digest"])


def open_subjects(apps: Any, schema_editor: Any) -> None:
    MemoryFact = apps.get_model("criogen", "MemoryFact")
    alias = schema_editor.connection.alias
    cipher = _cipher()
    for page in _pages(MemoryFact, alias):
        sealed = [fact for fact in page if is_sealed(fact.subject)]
        for fact in sealed:
            # Raises EncryptionKeyInvalid (and rolls the reversal back) without the key.
            fact.subject = (
                cipher.open(fact.subject) if cipher is not None else open_without_key(fact.subject)
            )
        MemoryFact.objects.using(alias).bulk_update(sealed, ["subject"])


class Migration(migrations.Migration):
    dependencies = [
        ("criogen", "0008_inbox_assistant_indexes"),
    ]

    operations = [
        migrations.RemoveIndex(model_name="memoryfact", name="criogen_fact_idx"),
        migrations.AddField(
            model_name="memoryfact",
            name="subject_digest",
            field=models.CharField(
                default="",
                help_text="key id + HMAC-SHA256 of the subject: what lookups match",
                max_length=72,
            ),
            preserve_default=False,
        ),
        migrations.AlterField(
            model_name="memoryfact",
            name="subject",
            field=models.TextField(help_text="its value: whose fact it is (sealed with a key)"),
        ),
        migrations.RunPython(seal_subjects, open_subjects, elidable=False),
        migrations.AddIndex(
            model_name="memoryfact",
            index=models.Index(
                fields=["namespace", "subject_digest", "created_at"],
                name="criogen_fact_subject_idx",
            ),
        ),
    ]
