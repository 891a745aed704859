"""Database URLs -> Django database settings, and Django set-up for plain scripts.

A plain script that calls ``Storage("sqlite://ops.db")`` has no Django project: the
first such call configures Django with just the apps the storage needs, adds the
database under its own alias, and applies the migrations. Inside a Django project the
same call adds an alias next to the project's databases.
"""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from criogen.engine.errors import UnknownStorageUrl

__all__ = ["database_alias", "database_config", "redact"]

SQLITE_OPTIONS = {
    # Take the write lock when a transaction starts: two writers then queue on the
    # busy timeout instead of deadlocking when both try to upgrade a read lock.
    "transaction_mode": "IMMEDIATE",
    "timeout": 30,
    # WAL lets readers go on while one process writes; FULL makes each commit durable.
    "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL",
}

_lock = threading.RLock()
_ready: set[str] = set()


def database_config(url: str, *, base_dir: Path | None = None) -> dict[str, Any]:
    """Django ``DATABASES`` entry for ``sqlite://path`` or ``postgres://…`` URLs."""
    scheme, sep, rest = url.partition("://")
    scheme = scheme.lower()
    if scheme == "sqlite":
        path = unquote(rest.split("?", 1)[0])
        if not path or path in (":memory:", "/:memory:"):
            raise UnknownStorageUrl(
                "an in-memory SQLite database cannot be shared between threads; use "
                "Storage() for memory, or sqlite://path/to/file.db.",
                url=url,
            )
        file = Path(path)
        if not file.is_absolute() and base_dir is not None:
            file = base_dir / file
        return {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": str(file),
            "OPTIONS": dict(SQLITE_OPTIONS),
        }
    if scheme in ("postgres", "postgresql") and sep:
        parts = urlsplit(url)
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": unquote(parts.path.lstrip("/")) or "postgres",
            "USER": unquote(parts.username or ""),
            "PASSWORD": unquote(parts.password or ""),
            "HOST": parts.hostname or "",
            "PORT": str(parts.port or ""),
            "CONN_HEALTH_CHECKS": True,
            "OPTIONS": {},
        }
    raise UnknownStorageUrl(
        f"database URL {redact(url)!r} is not sqlite://path or postgres://user:pw@host/db.",
        url=redact(url),
    )


def redact(url: str) -> str:
    """The URL with its password replaced by ``***`` (for messages and repr)."""
    parts = urlsplit(url)
    if parts.password:
        netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
        return parts._replace(netloc=netloc).geturl()
    return url


def _configure_standalone() -> None:
    import django
    from django.conf import settings

    settings.configure(
        INSTALLED_APPS=[
            "django.contrib.contenttypes",
            "django.contrib.auth",
            "criogen.storage",
        ],
        DATABASES={},
        USE_TZ=True,
        TIME_ZONE="UTC",
        DEFAULT_AUTO_FIELD="django.db.models.BigAutoField",
    )
    django.setup()


def database_alias(url: str) -> str:
    """The Django database alias for a storage URL, set up and migrated.

    ``django://ALIAS`` names a database of the running project (not migrated here:
    the project runs ``migrate``). Any other URL gets its own alias, created once per
    process, and its migrations are applied.
    """
    from django.conf import settings

    with _lock:
        if not settings.configured:
            _configure_standalone()
        if url.startswith("django://"):
            alias = url.removeprefix("django://") or "default"
            from django.db import connections

            engine = (
                connections.settings[alias].get("ENGINE", "")
                if alias in connections.settings
                else ""
            )
            # Without a Django project, Django fills in a "dummy" default database that
            # fails on first use with a message about settings: say what to do instead.
            if not engine or engine.endswith(".dummy"):
                raise UnknownStorageUrl(
                    f"no database {alias!r} in DATABASES: Storage.default() needs a Django "
                    "project (DJANGO_SETTINGS_MODULE); in a plain script use "
                    "Storage('sqlite://path/to/file.db') or Storage('postgres://…').",
                    url=url,
                )
            return alias
        config = database_config(url)
        alias = "criogen_" + hashlib.sha256(url.encode()).hexdigest()[:12]
        if alias not in _ready:
            _add_alias(alias, config)
            _migrate(alias)
            _ready.add(alias)
        return alias


def _add_alias(alias: str, config: dict[str, Any]) -> None:
    from django.db import connections

    if config["ENGINE"].endswith("sqlite3"):
        Path(config["NAME"]).parent.mkdir(parents=True, exist_ok=True)
    filled = connections.configure_settings({"default": {}, alias: dict(config)})[alias]
    # A storage outside any request: keep one connection per thread open for good.
    filled["CONN_MAX_AGE"] = None
    connections.settings[alias] = filled


def _migrate(alias: str) -> None:
    from django.core.management import call_command

    call_command("migrate", database=alias, verbosity=0, interactive=False)
