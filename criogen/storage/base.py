"""Deprecated path of the storage protocol: it lives in :mod:`criogen.engine.store`
(the engine's own layer, so the engine never imports ``criogen.storage``)."""

from __future__ import annotations

from criogen.engine.store import *  # noqa: F403 - this module is an alias
from criogen.engine.store import __all__ as __all__
