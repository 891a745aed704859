"""Former home of the API token and cron models, now in the core
(:mod:`criogen.storage.models`: ``ApiToken``, ``Cron``; tables unchanged).

The names stay importable from here; import them from
``criogen.storage.models.tokens`` and ``criogen.storage.models.crons`` instead. The
``api`` app keeps no models (its migrations move them to the ``criogen`` app's state).
"""

from __future__ import annotations

from criogen.storage.models.crons import Cron, _now
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
