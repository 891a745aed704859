"""Former home of the token service, now :mod:`criogen.services.tokens` (these names
stay importable from here)."""

from __future__ import annotations

from criogen.services.tokens import issue_token, revoke_token, tokens_of

__all__ = ["issue_token", "revoke_token", "tokens_of"]
