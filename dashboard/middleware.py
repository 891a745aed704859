"""What htmx requests need from the request/response cycle beyond ``HtmxMiddleware``.

An htmx request is an ``XMLHttpRequest``: it follows a redirect by itself and hands the
final page to htmx, which swaps it into the element the request targets. When the
session has expired, ``login_required`` answers an htmx request with a redirect to the
sign-in page, so the whole sign-in page landed inside the decision panel or the inbox
list, and its form posted to the wrong URL. :class:`HtmxLoginRedirectMiddleware` turns
that redirect into ``HX-Redirect``: htmx then loads the sign-in page as a whole page,
with ``next`` set to the page the operator was on (``HX-Current-URL``), not to the
partial or action URL the request went to.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from django.conf import settings
from django.contrib.auth.views import redirect_to_login
from django.http import HttpRequest, HttpResponse
from django.shortcuts import resolve_url
from django.utils.deprecation import MiddlewareMixin
from django_htmx.http import HttpResponseClientRedirect

from criogen.inputs import BROWSER_PREFIXES, nul_field

__all__ = ["HtmxLoginRedirectMiddleware", "NulCharacterPageMiddleware"]


class HtmxLoginRedirectMiddleware(MiddlewareMixin):
    """Answer an htmx request that would be redirected to sign in with ``HX-Redirect``.

    Must come after ``HtmxMiddleware`` (it reads ``request.htmx``). Other redirects,
    and every request that is not htmx's, pass unchanged.
    """

    def process_response(self, request: HttpRequest, response: HttpResponse) -> HttpResponse:
        htmx = getattr(request, "htmx", None)
        if not htmx or response.status_code != 302 or not response.has_header("Location"):
            return response
        login_path = urlsplit(resolve_url(settings.LOGIN_URL)).path
        if urlsplit(response["Location"]).path != login_path:
            return response
        # Back to the page, not to the partial or the POST-only action URL. A page on
        # another origin (current_url_abs_path is None then) is not ours to return to.
        page = htmx.current_url_abs_path or resolve_url("dashboard:inbox")
        return HttpResponseClientRedirect(redirect_to_login(page)["Location"])


class NulCharacterPageMiddleware(MiddlewareMixin):
    """Answer a page request whose path, query or form holds a NUL character with a
    ``400`` page naming the filter or field (never a 500: PostgreSQL stores no NUL).
    The API's requests are refused by ``api.middleware.NulCharacterMiddleware``."""

    def process_request(self, request: HttpRequest) -> HttpResponse | None:
        if not request.path_info.startswith(BROWSER_PREFIXES):
            return None
        found = nul_field(request)
        if found is None:
            return None
        from django.shortcuts import render

        from dashboard.views.common import base_context

        field, where = found
        what = {"path": "The address", "query": f"The filter {field!r}", "form": f"{field!r}"}
        user = getattr(request, "user", None)
        signed_in = user is not None and user.is_authenticated
        context = base_context(request, "") if signed_in else {"nav": None, "can_act": False}
        context["message"] = (
            f"{what[where]} contains a NUL character (\\0), which Criogen cannot search or "
            "store. Remove it and try again."
        )
        context["field"] = field
        return render(request, "dashboard/bad_input.html", context, status=400)
