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

__all__ = ["HtmxLoginRedirectMiddleware"]


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
