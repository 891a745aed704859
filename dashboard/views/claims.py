"""Claiming a waiting thread from the inbox or its page: claim, take over, release."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpResponse, QueryDict
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from criogen.engine.errors import CriogenError
from criogen.services.claims import claim_thread, release_claim
from dashboard.data import InboxFilters, get_thread_for_user
from dashboard.views.common import HtmxHttpRequest, render_parts, require_operator

BUTTONS = ("claim", "take_over", "release")


@require_POST
@login_required
def thread_claim(request: HtmxHttpRequest, thread_id: str) -> HttpResponse:
    """``claim`` / ``take_over`` / ``release`` (the button pressed) the thread's current
    suspension. With htmx the inbox list (``from=inbox``) or the thread's claim strip
    comes back; without it, a redirect with the outcome as a message. A thread held by
    someone else answers 409 naming the holder (only ``take_over`` takes it)."""
    require_operator(request)
    thread = get_thread_for_user(request.user, thread_id)
    button = next((name for name in BUTTONS if name in request.POST), "")
    if not button:
        return HttpResponse("Say what to do: claim, take_over or release.", status=422)
    error = ""
    try:
        if button == "release":
            release_claim(thread.pk, by=request.user, door="ui")
        else:
            claim_thread(thread.pk, by=request.user, door="ui", take_over=button == "take_over")
    except CriogenError as exc:
        error = exc.message
    where = "inbox" if request.POST.get("from") == "inbox" else "thread"
    if not request.htmx:
        if error:
            messages.warning(request, error)
        if where == "inbox":
            return redirect("dashboard:inbox")
        return redirect("dashboard:thread", thread_id=thread.pk)
    if error:
        return HttpResponse(error, status=409, content_type="text/plain")
    if where == "inbox":
        from dashboard.views.inbox import inbox_context

        current = request.htmx.current_url_abs_path or ""
        filters = InboxFilters.from_query(QueryDict(current.partition("?")[2]))
        context = inbox_context(request.user, filters, can_act=True)
        return render_parts(request, [("dashboard/inbox.html#inbox-list", context)])
    thread.refresh_from_db()
    return render_parts(
        request, [("dashboard/thread.html#claim", claim_context(request.user, thread))]
    )


def claim_context(user: object, thread: object) -> dict[str, object]:
    """What the thread page's claim partial needs (shared with the live consumer)."""
    from criogen.selectors import claim_of

    waiting = getattr(thread, "head_status", "") == "suspended"
    return {
        "thread": thread,
        "waiting_claim": waiting,
        "claim": claim_of(thread) if waiting else None,
        "user": user,
    }
