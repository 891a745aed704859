"""Former home of the API token and cron models, now in the core
(:mod:`criogen.storage.models`: ``ApiToken``, ``Cron``; tables unchanged).

Deprecated: ``from api.models import ApiToken`` (and the other names below) keeps
working, with a DeprecationWarning, until the next release removes this module; import
them from ``criogen.storage.models.tokens`` and ``criogen.storage.models.crons``. The
``api`` app keeps no models (its migrations move them to the ``criogen`` app's state).

The names are looked up when first used, not imported with this module: Django imports
every app's ``models`` module at start-up, and a door holds no models
(``make check``, "The doors write no models").
"""

from __future__ import annotations

import importlib
import warnings
from typing import TYPE_CHECKING, Any

from django.utils import timezone

if TYPE_CHECKING:  # for type checkers; at run time __getattr__ finds them, with a warning
    from criogen.storage.models.crons import Cron
    from criogen.storage.models.tokens import (
        DEFAULT_EXPIRY,
        TOKEN_PREFIX,
        ApiToken,
        default_expiry,
        hash_token,
        new_token,
    )

__all__ = [
    "DEFAULT_EXPIRY",
    "TOKEN_PREFIX",
    "ApiToken",
    "Cron",
    "_now",
    "default_expiry",
    "hash_token",
    "new_token",
]

_MOVED = {
    "DEFAULT_EXPIRY": "criogen.storage.models.tokens",
    "TOKEN_PREFIX": "criogen.storage.models.tokens",
    "ApiToken": "criogen.storage.models.tokens",
    "default_expiry": "criogen.storage.models.tokens",
    "hash_token": "criogen.storage.models.tokens",
    "new_token": "criogen.storage.models.tokens",
    "Cron": "criogen.storage.models.crons",
}


def _now() -> Any:
    """The default of the cron timestamps in ``api`` migration 0002 (which names it
    here); the model's own default is ``criogen.storage.models.crons._now``."""
    return timezone.now()


def __getattr__(name: str) -> Any:
    home = _MOVED.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(
        f"api.models.{name} is deprecated and will be removed in the next release: "
        f"import it from {home}.",
        DeprecationWarning,
        stacklevel=2,
    )
    return getattr(importlib.import_module(home), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *_MOVED])
