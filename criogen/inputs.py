"""Input every door refuses the same way: NUL characters.

PostgreSQL stores no NUL (U+0000) in text or jsonb, so a NUL that reaches a query fails
there, as a 500. One check finds it in everything a request carries outside its JSON
body (the path, the query string, form fields); the API answers ``422`` naming the
parameter (``api.middleware``), the dashboard a ``400`` page (``dashboard.middleware``),
and ``api.parser`` refuses it in JSON bodies.
"""

from __future__ import annotations

from django.http import HttpRequest

__all__ = ["BROWSER_PREFIXES", "NUL", "nul_field"]

NUL = "\x00"
BROWSER_PREFIXES = ("/ui/", "/accounts/", "/admin/")
"""Paths of pages for people (their bad input is answered with a page, not JSON)."""


def nul_field(request: HttpRequest) -> tuple[str, str] | None:
    """``(field, where)`` of the first NUL the request's path, query or form carries;
    ``where`` is ``path``, ``query`` or ``form``."""
    path = request.path_info
    if NUL in path:
        return _path_parameter(path), "path"
    for key, values in request.GET.lists():
        if NUL in key or any(NUL in v for v in values):
            return key.replace(NUL, "\\0"), "query"
    if request.method == "POST" and request.content_type in (
        "application/x-www-form-urlencoded",
        "multipart/form-data",
    ):
        for key, values in request.POST.lists():
            if NUL in key or any(NUL in v for v in values):
                return key.replace(NUL, "\\0"), "form"
    return None


def _path_parameter(path: str) -> str:
    """The name of the path parameter holding the NUL (``thread_id``), else ``path``."""
    from django.urls import Resolver404, resolve

    try:
        match = resolve(path)
    except Resolver404:
        return "path"
    for name, value in match.kwargs.items():
        if NUL in str(value):
            return str(name)
    return "path"
