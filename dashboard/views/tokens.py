"""API tokens: each signed-in user lists, creates and revokes their own."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_http_methods

from criogen.services.tokens import DEFAULT_EXPIRY, issue_token, revoke_token, tokens_of
from dashboard.forms import FormError
from dashboard.views.common import HtmxHttpRequest, base_context

MAX_NAME = 100
MAX_DAYS = 3650
NEW_TOKEN = "criogen_new_token"  # noqa: S105 - a session key, not a secret
"""Session key holding a token just created until the page has shown it once."""


def _expiry(text: str) -> Any:
    """The expiry typed in days: blank is the default (``CRIOGEN_TOKEN_TTL_DAYS``),
    0 is never."""
    text = (text or "").strip()
    if not text:
        return DEFAULT_EXPIRY
    if not text.isdigit() or int(text) > MAX_DAYS:
        raise FormError("expires_in_days", f"Expires in: a whole number of days, 0 to {MAX_DAYS}.")
    days = int(text)
    return timezone.now() + timedelta(days=days) if days else None


@require_http_methods(["GET", "POST"])
@login_required
def tokens(request: HtmxHttpRequest) -> HttpResponse:
    """The user's tokens; ``create`` issues one (shown once, on the page it redirects
    to), ``revoke`` deletes one."""
    context = base_context(request, "tokens")
    context.update({"new_token": None, "error": None, "name": ""})
    status = 200
    if request.method == "POST" and "revoke" in request.POST:
        token_id = request.POST.get("token", "")
        row = (
            revoke_token(user=request.user, token_id=int(token_id)) if token_id.isdigit() else None
        )
        if row is None:
            messages.error(request, "No such token (it may be revoked already).")
        else:
            messages.success(request, f"Revoked {row.name or 'the token'} ({row.prefix}…).")
        return redirect("dashboard:tokens")
    if request.method == "POST" and "create" in request.POST:
        name = request.POST.get("name", "").strip()
        try:
            if len(name) > MAX_NAME:
                raise FormError("name", f"The name is too long (at most {MAX_NAME} characters).")
            expires_at = _expiry(request.POST.get("expires_in_days", ""))
        except FormError as exc:
            context.update({"error": exc, "name": name})
            status = 422
        else:
            row, secret = issue_token(user=request.user, name=name, expires_at=expires_at)
            # Post/redirect/get, so a reload cannot create a second token: the secret
            # waits in the session for the one GET that shows it, which removes it.
            request.session[NEW_TOKEN] = {"id": row.pk, "secret": secret}
            return redirect("dashboard:tokens")
    fresh = request.session.pop(NEW_TOKEN, None) if request.method == "GET" else None
    now = timezone.now()
    context["tokens"] = [
        {"row": row, "expired": row.expired(now)} for row in tokens_of(request.user)
    ]
    if fresh is not None:
        shown = [t["row"] for t in context["tokens"] if t["row"].pk == fresh["id"]]
        if shown:
            context["new_token"] = {"row": shown[0], "secret": fresh["secret"]}
    context["default_days"] = getattr(settings, "CRIOGEN_TOKEN_TTL_DAYS", None)
    response = render(request, "dashboard/tokens.html", context, status=status)
    if context["new_token"] is not None:
        # The token is on this page only: keep it out of every cache.
        response["Cache-Control"] = "no-store"
    return response
