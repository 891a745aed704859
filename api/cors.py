"""CORS settings of the REST API, from ``CRIOGEN_CORS_ALLOW_ORIGINS`` and ``CRIOGEN_CORS``.

Browser apps on another origin (a chat front end on ``http://localhost:3000``) call the
API with ``fetch``; the browser first asks with a preflight (``OPTIONS`` with
``Origin`` and ``Access-Control-Request-*``). django-cors-headers answers them, and
:class:`api.middleware.CorsMiddleware` limits it to the API's paths and refuses what
the configuration does not allow with ``400``. The defaults are those of LangGraph's
own server: every origin (``*``), every method, the requested headers, preflights
cached for 600 s, no credentials, and ``x-pagination-total``, ``x-pagination-next``
and ``content-location`` readable by scripts.

:func:`cors_settings` turns the two environment variables into django-cors-headers'
``CORS_*`` settings, and refuses a configuration it cannot honour with
:class:`~django.core.exceptions.ImproperlyConfigured` at start-up. Only that exception
comes from Django: ``criogen/settings.py`` imports this module while Django loads.
"""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import urlsplit

from django.core.exceptions import ImproperlyConfigured

__all__ = [
    "ALL_METHODS",
    "CONFIG_KEYS",
    "DEFAULT_EXPOSE_HEADERS",
    "DEFAULT_MAX_AGE",
    "SAFELISTED_HEADERS",
    "cors_settings",
]

ALL_METHODS = ("DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT")
"""What ``allow_methods: ["*"]`` allows (as Starlette's CORSMiddleware, which LangGraph
uses)."""

SAFELISTED_HEADERS = ("accept", "accept-language", "content-language", "content-type")
"""Headers always allowed next to a list of ``allow_headers`` (as Starlette does)."""

DEFAULT_EXPOSE_HEADERS = (
    "x-pagination-total",
    "x-pagination-next",
    "content-location",
    # Beyond LangGraph's server: the JS SDK reconnects a dropped resumable stream
    # to the Location it read from the first response, which a browser hides unless
    # it is exposed.
    "location",
)
DEFAULT_MAX_AGE = 600

CONFIG_KEYS = (
    "allow_origins",
    "allow_methods",
    "allow_headers",
    "allow_credentials",
    "allow_origin_regex",
    "expose_headers",
    "max_age",
)
"""The keys of ``CRIOGEN_CORS`` (LangGraph's ``http.cors`` configuration)."""

_TOKEN = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
"""An HTTP token (RFC 9110): what a method or header name is made of."""


def _strings(value: Any, where: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ImproperlyConfigured(f"{where} must be a list of strings, not {value!r}.")
    return [v.strip() for v in value if v.strip()]


def _tokens(values: list[str], where: str) -> list[str]:
    for value in values:
        if value != "*" and not _TOKEN.match(value):
            raise ImproperlyConfigured(f"{where}: {value!r} is not a method or header name.")
    return values


def _origin(value: str, where: str) -> str:
    """``scheme://host[:port]`` (lower case), the form a browser sends in ``Origin``."""
    if value == "null":
        return value
    try:
        url = urlsplit(value)
        url.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError:
        url = None
    if url is None or not url.scheme or not url.netloc:
        raise ImproperlyConfigured(
            f"{where}: {value!r} is not an origin; write scheme://host[:port], "
            "e.g. https://chat.example.com."
        )
    if url.path or url.query or url.fragment or "@" in url.netloc:
        raise ImproperlyConfigured(
            f"{where}: {value!r} is not an origin (an origin has no path, not even a "
            f"trailing slash); write {url.scheme}://{url.netloc}."
        )
    return f"{url.scheme}://{url.netloc}".lower()


def _origins(values: list[str], where: str) -> tuple[bool, list[str]]:
    """(every origin allowed, the allowed origins)."""
    if "*" in values:
        if len(values) > 1:
            raise ImproperlyConfigured(
                f"{where}: '*' allows every origin; list it alone or list origins only."
            )
        return True, []
    return False, [_origin(v, where) for v in values]


def cors_settings(allow_origins: str = "", config: str = "") -> dict[str, Any]:
    """django-cors-headers' ``CORS_*`` settings for the REST API.

    Args:
        allow_origins: ``CRIOGEN_CORS_ALLOW_ORIGINS``: a comma-separated list of origins
            (``https://chat.example.com,http://localhost:3000``), or ``*``; empty means
            ``*``.
        config: ``CRIOGEN_CORS``: a JSON object with any of :data:`CONFIG_KEYS`; keys
            left out take the defaults (``allow_origins``: ``["*"]``, or ``[]`` when
            ``allow_origin_regex`` is given). Empty: not set.

    Returns:
        ``CORS_ALLOW_ALL_ORIGINS``, ``CORS_ALLOWED_ORIGINS``,
        ``CORS_ALLOWED_ORIGIN_REGEXES``, ``CORS_ALLOW_METHODS``, ``CORS_ALLOW_HEADERS``
        (``["*"]``: the requested headers are allowed), ``CORS_ALLOW_CREDENTIALS``,
        ``CORS_EXPOSE_HEADERS`` and ``CORS_PREFLIGHT_MAX_AGE``.

    Raises:
        ImproperlyConfigured: invalid JSON, an unknown key, a value of the wrong type, a
            string that is not an origin, a regular expression that does not compile,
            credentials with every origin allowed, or both variables setting origins.
    """
    options: dict[str, Any] = {}
    if config.strip():
        try:
            options = json.loads(config)
        except ValueError as exc:
            raise ImproperlyConfigured(f"CRIOGEN_CORS is not valid JSON: {exc}.") from None
        if not isinstance(options, dict):
            raise ImproperlyConfigured(
                f"CRIOGEN_CORS must be a JSON object with the keys {', '.join(CONFIG_KEYS)}."
            )
        unknown = sorted(set(options) - set(CONFIG_KEYS))
        if unknown:
            raise ImproperlyConfigured(
                f"CRIOGEN_CORS has unknown key(s) {', '.join(unknown)}; "
                f"use {', '.join(CONFIG_KEYS)}."
            )
        if allow_origins.strip():
            raise ImproperlyConfigured(
                "set CRIOGEN_CORS_ALLOW_ORIGINS or CRIOGEN_CORS, not both "
                "(CRIOGEN_CORS's allow_origins lists the origins)."
            )

    regex = options.get("allow_origin_regex")
    if regex is not None:
        if not isinstance(regex, str) or not regex:
            raise ImproperlyConfigured(
                f"CRIOGEN_CORS allow_origin_regex must be a regular expression, not {regex!r}."
            )
        try:
            re.compile(regex)
        except re.error as exc:
            raise ImproperlyConfigured(
                f"CRIOGEN_CORS allow_origin_regex {regex!r} is not a regular expression: {exc}."
            ) from None

    if "allow_origins" in options:
        where = "CRIOGEN_CORS allow_origins"
        every, origins = _origins(_strings(options["allow_origins"], where), where)
    elif options:
        every, origins = regex is None, []
    else:
        where = "CRIOGEN_CORS_ALLOW_ORIGINS"
        every, origins = _origins(
            [o.strip() for o in (allow_origins or "*").split(",") if o.strip()], where
        )
    if every and regex is not None:
        raise ImproperlyConfigured(
            "CRIOGEN_CORS allow_origin_regex has no effect when allow_origins is ['*']; "
            "list the other origins in allow_origins instead."
        )

    methods = _tokens(
        _strings(options.get("allow_methods", ["*"]), "CRIOGEN_CORS allow_methods"),
        "CRIOGEN_CORS allow_methods",
    )
    headers = _tokens(
        _strings(options.get("allow_headers", ["*"]), "CRIOGEN_CORS allow_headers"),
        "CRIOGEN_CORS allow_headers",
    )
    expose = _tokens(
        _strings(
            options.get("expose_headers", list(DEFAULT_EXPOSE_HEADERS)),
            "CRIOGEN_CORS expose_headers",
        ),
        "CRIOGEN_CORS expose_headers",
    )
    credentials = options.get("allow_credentials", False)
    if not isinstance(credentials, bool):
        raise ImproperlyConfigured(
            f"CRIOGEN_CORS allow_credentials must be true or false, not {credentials!r}."
        )
    if credentials and every:
        raise ImproperlyConfigured(
            "CRIOGEN_CORS allow_credentials cannot be true when every origin is allowed "
            "('*'): list the origins that may send credentials in allow_origins."
        )
    max_age = options.get("max_age", DEFAULT_MAX_AGE)
    if isinstance(max_age, bool) or not isinstance(max_age, int) or max_age < 0:
        raise ImproperlyConfigured(
            f"CRIOGEN_CORS max_age must be a number of seconds (0 or more), not {max_age!r}."
        )

    return {
        "CORS_ALLOW_ALL_ORIGINS": every,
        "CORS_ALLOWED_ORIGINS": origins,
        # django-cors-headers matches from the start only; LangGraph's server (Starlette)
        # matches the whole origin. Anchor the end too, so "https://.*\.example\.com"
        # does not allow https://x.example.com.evil.test.
        "CORS_ALLOWED_ORIGIN_REGEXES": [rf"(?:{regex})\Z"] if regex is not None else [],
        "CORS_ALLOW_METHODS": list(ALL_METHODS) if "*" in methods else _upper(methods),
        "CORS_ALLOW_HEADERS": ["*"] if "*" in headers else _with_safelisted(headers),
        "CORS_ALLOW_CREDENTIALS": credentials,
        "CORS_EXPOSE_HEADERS": ["*"] if "*" in expose else [h.lower() for h in expose],
        "CORS_PREFLIGHT_MAX_AGE": max_age,
    }


def _upper(methods: list[str]) -> list[str]:
    return list(dict.fromkeys(m.upper() for m in methods))


def _with_safelisted(headers: list[str]) -> list[str]:
    return sorted({h.lower() for h in headers} | set(SAFELISTED_HEADERS))
