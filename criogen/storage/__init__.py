"""Storage backends: in memory, and the Django ORM (SQLite, PostgreSQL).

This package is also the Django app (label ``criogen``) whose models hold threads,
checkpoints and runs; importing it does not import Django.
"""

from __future__ import annotations

from criogen.engine.store import Storage

__all__ = ["Storage"]
