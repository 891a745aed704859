"""Site-wide odds and ends the browser asks for: the favicon."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.templatetags.static import static
from django.utils.cache import patch_cache_control
from django.views.decorators.http import require_GET


@require_GET
def favicon(request: HttpRequest) -> HttpResponse:
    """``/favicon.ico``: browsers ask for it on every site; redirect to the SVG icon.

    A temporary redirect (cached for a day): the static file's URL may change with the
    static files storage (hashed names), and a permanent redirect would outlive it.
    """
    response = HttpResponseRedirect(static("dashboard/favicon.svg"))
    patch_cache_control(response, max_age=86400, public=True)
    return response
