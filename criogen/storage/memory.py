"""Deprecated path of the in-memory store: it lives in
:mod:`criogen.engine.memory_store` (tests and notebooks only)."""

from __future__ import annotations

from criogen.engine.memory_store import *  # noqa: F403 - this module is an alias
from criogen.engine.memory_store import __all__ as __all__
