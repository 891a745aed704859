"""Model fields of the storage's tables."""

from __future__ import annotations

from typing import Any

from django.db import models

__all__ = ["RowIdField"]


class RowIdField(models.BigAutoField):
    """Django's ``BigAutoField`` without ``AUTOINCREMENT`` on SQLite: the column is the
    table's rowid, the next id one more than the largest, and no insert updates
    ``sqlite_sequence`` (one page shared by every such table, written at each commit
    that inserts). An id freed by deleting the newest row may be given again: only for
    tables whose ids nothing refers to. Elsewhere the same as ``BigAutoField``."""

    def db_type_suffix(self, connection: Any) -> str | None:
        if connection.vendor == "sqlite":
            return None
        # What Field.db_type_suffix answers (django-stubs does not declare it).
        suffix: str | None = connection.data_types_suffix.get(self.get_internal_type())
        return suffix
