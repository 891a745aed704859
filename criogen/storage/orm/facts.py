"""Memory: long-term facts about a person (``MemoryFact``), sealed at rest."""

from __future__ import annotations

import uuid
from typing import Any

from django.db import transaction

from criogen.engine.store import (
    FactRecord,
)
from criogen.storage.orm.base import OrmBase

__all__ = ["OrmFacts"]


class OrmFacts(OrmBase):
    """Long-term facts about people."""

    # A fact's subject (a person's id) is sealed like its text and looked up through
    # subject_digest, an HMAC under keys derived from the encryption keys; see
    # MemoryFact and criogen.engine.crypto.lookup_keys.

    def _fact(self, f: Any) -> FactRecord:
        return FactRecord(
            f.id,
            f.namespace,
            self._open(f.subject),
            self._open(f.text),
            f.created_at,
            f.updated_at,
        )

    def _subject_keys(self) -> tuple[Any, ...]:
        from criogen.engine.crypto import lookup_keys
        from criogen.storage.models.agents import SUBJECT_DIGEST_PURPOSE

        return lookup_keys(self.cipher, SUBJECT_DIGEST_PURPOSE)

    def add_fact(self, namespace: str, subject: str, text: str) -> FactRecord:
        from criogen.storage.models import MemoryFact

        row = MemoryFact.objects.using(self.alias).create(
            id=str(uuid.uuid4()),
            namespace=namespace,
            subject=self._seal(subject),
            subject_digest=self._subject_keys()[0].digest(subject),
            text=self._seal(text),
        )
        return FactRecord(row.id, namespace, subject, text, row.created_at, row.updated_at)

    def facts(self, namespace: str, subject: str) -> list[FactRecord]:
        from criogen.storage.models import MemoryFact

        # Digests under every configured key (and the no-key one) find rows written
        # before a rotation or before encryption was on; rows under a key we lack come
        # back too and fail to open (EncryptionKeyInvalid) instead of going missing.
        qs = MemoryFact.objects.using(self.alias).filter(
            MemoryFact.about(namespace, subject, self._subject_keys())
        )
        return [self._fact(f) for f in qs.order_by("created_at", "id")]

    def get_fact(self, fact_id: str) -> FactRecord | None:
        from criogen.storage.models import MemoryFact

        found = MemoryFact.objects.using(self.alias).filter(id=fact_id).first()
        return self._fact(found) if found else None

    def update_fact(self, fact_id: str, text: str) -> FactRecord | None:
        from django.utils import timezone

        from criogen.storage.models import MemoryFact

        with transaction.atomic(using=self.alias):
            row = (
                MemoryFact.objects.using(self.alias).select_for_update().filter(id=fact_id).first()
            )
            if row is None:
                return None
            # Opened first: a wrong key raises before anything is written. The subject
            # is sealed and digested again under the first key, so an edited fact no
            # longer needs the old key of a rotation.
            subject = self._open(row.subject)
            row.subject = self._seal(subject)
            row.subject_digest = self._subject_keys()[0].digest(subject)
            row.text = self._seal(text)
            row.updated_at = timezone.now()
            row.save(update_fields=["subject", "subject_digest", "text", "updated_at"])
        return FactRecord(row.id, row.namespace, subject, text, row.created_at, row.updated_at)

    def delete_fact(self, fact_id: str) -> bool:
        from criogen.storage.models import MemoryFact

        deleted, _ = MemoryFact.objects.using(self.alias).filter(id=fact_id).delete()
        return deleted > 0
