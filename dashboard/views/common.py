"""What every dashboard view shares: the typed request, the operator check, rendering."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.template.loader import render_to_string
from django_htmx.middleware import HtmxDetails

from dashboard.data import can_operate


class HtmxHttpRequest(HttpRequest):
    """A request that went through ``HtmxMiddleware`` (``request.htmx`` is set)."""

    htmx: HtmxDetails


def require_operator(request: HttpRequest) -> None:
    """Raise PermissionDenied (403) unless the user may act (staff or ``criogen.operate``).

    The one place the dashboard checks the right to act; every POST view calls it first.
    """
    if not can_operate(request.user):
        raise PermissionDenied("Only operators can act on threads.")


def base_context(request: HttpRequest, nav: str) -> dict[str, Any]:
    """Context every page needs: which nav item is current, and whether the user may act."""
    return {"nav": nav, "can_act": can_operate(request.user)}


def render_parts(request: HttpRequest, parts: list[tuple[str, dict[str, Any]]]) -> HttpResponse:
    """Several partials in one htmx response: the first is the target, the others carry
    ``hx-swap-oob`` (added here) so htmx swaps each into the element with its id."""
    html = []
    for i, (name, context) in enumerate(parts):
        text = render_to_string(name, context, request=request)
        if i > 0:
            text = oob(text)
        html.append(text)
    return HttpResponse("".join(html))


def oob(html: str) -> str:
    """Mark the first element of ``html`` as an out-of-band swap (``hx-swap-oob="true"``)."""
    text = html.lstrip()
    if not text.startswith("<"):
        return html
    end = text.find(">")
    if end == -1:
        return html
    tag_end = end - 1 if text[end - 1] == "/" else end
    return text[:tag_end] + ' hx-swap-oob="true"' + text[tag_end:]
