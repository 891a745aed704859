"""Encryption at rest: Fernet tokens (AES-128-CBC + HMAC-SHA256) from ``cryptography``.

``Storage(url, encryption_key=...)`` or the ``CRIOGEN_ENCRYPTION_KEY`` environment
variable turns it on. The key is a Fernet key (``Fernet.generate_key()``: 32 bytes,
URL-safe base64), or several separated by commas to rotate keys: the first encrypts,
every one of them decrypts (``MultiFernet``). State values, checkpoint bodies, memory
facts, documents, decisions, effects and audit details are sealed; thread ids,
statuses, versions and times stay in clear.

Sealed values cannot be looked up by equality in the database, so a value that is
both sealed and looked up (a memory fact's subject) also gets a *lookup digest*:
HMAC-SHA256 under a key derived (HKDF) from each encryption key with a label naming
the purpose, so it reveals nothing without the key and is not the Fernet key's own
MAC. A digest starts with its key's id (8 hex), so rows sealed under a key that is not
configured can be told apart. Without an encryption key the digest uses a fixed,
public key (:func:`lookup_keys`): lookups take the same path, the value stays in clear.

Plain JSON text never starts with ``gAAAAA`` (a Fernet token's version byte and
timestamp), so a database may hold both: rows written before encryption was turned on
are still read, and encrypted rows read without the right key fail with
:class:`EncryptionKeyInvalid` instead of returning garbage.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from collections.abc import Sequence
from functools import lru_cache
from typing import Literal

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from criogen.engine.errors import EncryptionKeyInvalid

__all__ = [
    "ENV_VAR",
    "Cipher",
    "EncryptionKeyInvalid",
    "LookupKey",
    "generate_key",
    "lookup_keys",
]

ENV_VAR = "CRIOGEN_ENCRYPTION_KEY"
_TOKEN_PREFIX = "gAAAAA"  # noqa: S105 - the Fernet token prefix, not a secret
_LOOKUP_LABEL = b"criogen lookup digest v1: "
_NO_KEY_MATERIAL = b"criogen: no encryption key"


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
        # Fernet accepted each key, so each is 32 bytes of URL-safe base64.
        self._materials = tuple(base64.urlsafe_b64decode(k) for k in keys)
        self._lookup: dict[str, tuple[LookupKey, ...]] = {}

    @classmethod
    def from_option(cls, key: str | bytes | Sequence[str] | Literal[False] | None) -> Cipher | None:
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

    def lookup_keys(self, purpose: str) -> tuple[LookupKey, ...]:
        """One :class:`LookupKey` per encryption key, in the same order (the first one
        digests new values), derived for ``purpose``."""
        found = self._lookup.get(purpose)
        if found is None:
            found = self._lookup[purpose] = tuple(LookupKey(m, purpose) for m in self._materials)
        return found

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


class LookupKey:
    """An HMAC-SHA256 key for equality lookups on a sealed value.

    Derived with HKDF-SHA256 from an encryption key's 32 bytes and a label naming the
    ``purpose`` (so digests for different purposes, or under different keys, never
    match). :meth:`digest` is this key's :attr:`id` (8 hex) followed by the HMAC of the
    text (64 hex): 72 characters of ``[0-9a-f]``.
    """

    def __init__(self, material: bytes, purpose: str) -> None:
        self._key = HKDF(
            algorithm=hashes.SHA256(),
            length=32,
            salt=None,
            info=_LOOKUP_LABEL + purpose.encode(),
        ).derive(material)
        self.id = hmac.new(self._key, b"key id", hashlib.sha256).hexdigest()[:8]
        """Tells the rows digested under this key apart (not secret)."""

    def digest(self, text: str) -> str:
        """The lookup digest of ``text`` under this key."""
        return self.id + hmac.new(self._key, text.encode(), hashlib.sha256).hexdigest()


@lru_cache(maxsize=16)
def _no_key(purpose: str) -> LookupKey:
    return LookupKey(_NO_KEY_MATERIAL, purpose)


def lookup_keys(cipher: Cipher | None, purpose: str) -> tuple[LookupKey, ...]:
    """The keys to digest and look up ``purpose`` values with: the cipher's keys (the
    first digests new values), then the fixed public key used when no encryption key
    is set (which alone digests new values when ``cipher`` is None). Looking up by all of
    them finds rows written under an older key of a rotation and rows written before
    encryption was turned on."""
    plain = _no_key(purpose)
    return (plain,) if cipher is None else (*cipher.lookup_keys(purpose), plain)
