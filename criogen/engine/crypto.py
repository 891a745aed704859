"""Encryption at rest: Fernet tokens (AES-128-CBC + HMAC-SHA256) from ``cryptography``.

``Storage(url, encryption_key=...)`` or the ``CRIOGEN_ENCRYPTION_KEY`` environment
variable turns it on. The key is a Fernet key (``Fernet.generate_key()``: 32 bytes,
URL-safe base64), or several separated by commas to rotate keys: the first encrypts,
every one of them decrypts (``MultiFernet``). State values, checkpoint bodies, memory
facts, documents, decisions, effects and audit details are sealed; thread ids,
statuses, versions and times stay in clear.

Plain JSON text never starts with ``gAAAAA`` (a Fernet token's version byte and
timestamp), so a database may hold both: rows written before encryption was turned on
are still read, and encrypted rows read without the right key fail with
:class:`EncryptionKeyInvalid` instead of returning garbage.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from cryptography.fernet import Fernet, InvalidToken, MultiFernet

from criogen.engine.errors import CriogenError

__all__ = ["ENV_VAR", "Cipher", "EncryptionKeyInvalid", "generate_key"]

ENV_VAR = "CRIOGEN_ENCRYPTION_KEY"
_TOKEN_PREFIX = "gAAAAA"  # noqa: S105 - the Fernet token prefix, not a secret


class EncryptionKeyInvalid(CriogenError):
    """The encryption key is malformed, missing, or not the one the data was sealed with.

    Nothing is written when this is raised: reads fail before the run changes anything.
    """

    code = "encryption_key_invalid"


def generate_key() -> str:
    """A new random Fernet key, as text for ``CRIOGEN_ENCRYPTION_KEY``."""
    return Fernet.generate_key().decode()


class Cipher:
    """Seals and opens text with one or more Fernet keys (the first one encrypts)."""

    def __init__(self, keys: str | bytes | Sequence[str | bytes]) -> None:
        """Raises EncryptionKeyInvalid naming the key that is not a Fernet key."""
        if isinstance(keys, str | bytes):
            raw = keys.decode() if isinstance(keys, bytes) else keys
            keys = [k.strip() for k in raw.split(",") if k.strip()]
        fernets: list[Fernet] = []
        for index, key in enumerate(keys):
            try:
                fernets.append(Fernet(key))
            except (ValueError, TypeError) as exc:
                raise EncryptionKeyInvalid(
                    f"encryption key #{index + 1} is not a Fernet key (32 bytes, URL-safe "
                    "base64); make one with criogen.engine.crypto.generate_key().",
                    field="encryption_key",
                ) from exc
        if not fernets:
            raise EncryptionKeyInvalid("the encryption key is empty.", field="encryption_key")
        self._fernet = MultiFernet(fernets)

    @classmethod
    def from_option(cls, key: str | bytes | Sequence[str] | None) -> Cipher | None:
        """The cipher for ``encryption_key=`` (or, when None, ``$CRIOGEN_ENCRYPTION_KEY``);
        None when neither is set. ``encryption_key=False`` turns it off explicitly."""
        if key is False:
            return None
        if key is None:
            key = os.environ.get(ENV_VAR) or None
        if key is None or key == "":
            return None
        return cls(key)

    def seal(self, text: str) -> str:
        """Encrypt ``text`` (a Fernet token, ASCII)."""
        return self._fernet.encrypt(text.encode()).decode("ascii")

    def open(self, text: str) -> str:
        """Decrypt a token made by :meth:`seal`; plain (never sealed) text is returned
        as it is. Raises EncryptionKeyInvalid when no key opens the token."""
        if not is_sealed(text):
            return text
        try:
            return self._fernet.decrypt(text.encode("ascii")).decode()
        except (InvalidToken, UnicodeError) as exc:
            raise EncryptionKeyInvalid(
                "stored data cannot be decrypted with this encryption key: it was sealed "
                f"with another key. Set {ENV_VAR} (or encryption_key=) to the key it was "
                "written with; add the new key first, comma-separated, to rotate.",
                field="encryption_key",
            ) from exc

    def rotate(self, text: str) -> str:
        """Re-encrypt a token with the first key (after adding a new key in front)."""
        if not is_sealed(text):
            return self.seal(text)
        return self._fernet.rotate(text.encode("ascii")).decode("ascii")


def is_sealed(text: str) -> bool:
    """True when ``text`` is a Fernet token (and not plain JSON or text)."""
    return text.startswith(_TOKEN_PREFIX)


def open_without_key(text: str) -> str:
    """Read stored text when no key is configured: sealed text is an error."""
    if is_sealed(text):
        raise EncryptionKeyInvalid(
            f"stored data is encrypted and no encryption key is set: set {ENV_VAR} or pass "
            "Storage(..., encryption_key=...).",
            field="encryption_key",
        )
    return text
