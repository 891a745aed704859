"""Collections: documents an agent searches (PostgreSQL full-text search, SQLite FTS5,
or ranking in Python when the text is encrypted).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from criogen.engine.store import (
    DocumentRecord,
)
from criogen.storage.orm.base import OrmBase

__all__ = ["OrmDocuments"]


class OrmDocuments(OrmBase):
    """Documents of collections, and searching them."""

    def _document(self, d: Any, score: float | None = None) -> DocumentRecord:
        return DocumentRecord(
            d.collection,
            d.doc_id,
            self._open(d.text),
            self._json_out(d.metadata) or {},
            d.created_at,
            score,
        )

    def put_document(
        self, collection: str, doc_id: str, text: str, metadata: Mapping[str, Any]
    ) -> DocumentRecord:
        from criogen.storage.models import Document

        row, _ = Document.objects.using(self.alias).update_or_create(
            collection=collection,
            doc_id=doc_id,
            defaults={"text": self._seal(text), "metadata": self._json_in(dict(metadata))},
        )
        return DocumentRecord(collection, doc_id, text, dict(metadata), row.created_at)

    def get_document(self, collection: str, doc_id: str) -> DocumentRecord | None:
        from criogen.storage.models import Document

        found = Document.objects.using(self.alias).filter(collection=collection, doc_id=doc_id)
        row = found.first()
        return self._document(row) if row else None

    def delete_document(self, collection: str, doc_id: str) -> bool:
        from criogen.storage.models import Document

        qs = Document.objects.using(self.alias).filter(collection=collection, doc_id=doc_id)
        deleted, _ = qs.delete()
        return deleted > 0

    def documents(
        self, collection: str, *, limit: int = 100, offset: int = 0
    ) -> list[DocumentRecord]:
        from criogen.storage.models import Document

        qs = Document.objects.using(self.alias).filter(collection=collection)
        return [self._document(d) for d in qs.order_by("created_at", "id")[offset : offset + limit]]

    def search_documents(
        self, collection: str, query: str, *, limit: int = 5
    ) -> list[DocumentRecord]:
        from criogen.engine.memory_store import rank_by_words

        if self.cipher is not None:
            # The database cannot index ciphertext: decrypt and rank here.
            return rank_by_words(self.documents(collection, limit=1_000_000), query, limit)
        words = re.findall(r"\w+", query)
        if not words:
            return []
        if self.vendor == "sqlite":
            # Each word quoted: FTS5 query syntax (AND, NEAR, *, ^) in user input is text.
            match = " ".join('"' + w.replace('"', "") + '"' for w in words)
            sql = (
                "SELECT d.collection, d.doc_id, d.text, d.metadata, d.created_at,"
                " bm25(criogen_document_fts) FROM criogen_document_fts"
                " JOIN criogen_document d ON d.id = criogen_document_fts.rowid"
                " WHERE criogen_document_fts MATCH %s AND d.collection = %s"
                " ORDER BY bm25(criogen_document_fts), d.id LIMIT %s"
            )
            params: list[Any] = [match, collection, limit]
        else:
            sql = (
                "SELECT collection, doc_id, text, metadata, created_at,"
                " ts_rank(to_tsvector('english', text), q)"
                " FROM criogen_document, websearch_to_tsquery('english', %s) q"
                " WHERE collection = %s AND to_tsvector('english', text) @@ q"
                " ORDER BY 6 DESC, id LIMIT %s"
            )
            params = [" ".join(words), collection, limit]
        with self._cursor() as cur:
            cur.execute(sql, params)
            rows = cur.fetchall()
        return [
            DocumentRecord(
                c,
                doc_id,
                self._open(text),
                self._json_out(meta) or {},
                self._time(created),
                # bm25 is lower-is-better and negative; flip it so higher is better.
                -float(rank) if self.vendor == "sqlite" else float(rank),
            )
            for c, doc_id, text, meta, created, rank in rows
        ]
