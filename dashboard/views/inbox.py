"""The inbox: suspended threads, oldest waiting first, and bulk decisions on them."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from criogen.selectors import (
    CLAIM_FILTERS,
    checkpoint_row,
    content_search_available,
    viewer,
    visible_threads,
)
from dashboard import actions
from dashboard.data import (
    InboxFilters,
    User,
    body_of,
    describe_interrupts,
    inbox_assistants,
    inbox_listing,
    thread_url,
)
from dashboard.forms import FormError, decisions_from
from dashboard.views.common import HtmxHttpRequest, base_context, require_operator

AGES = [(5, "5 minutes"), (60, "1 hour"), (240, "4 hours"), (1440, "1 day"), (10080, "1 week")]


def inbox_context(user: User, filters: InboxFilters, *, can_act: bool) -> dict[str, Any]:
    """What the inbox list partial needs (shared with the live consumer)."""
    page = inbox_listing(user, filters)
    return {
        "items": page.items,
        "inbox_total": page.total,
        "next_cursor": page.next_cursor,
        "filter_error": page.error,
        "content_search": content_search_available(),
        "filters": filters,
        "can_act": can_act,
        "user": user,
    }


@require_GET
@login_required
def inbox(request: HtmxHttpRequest) -> HttpResponse:
    """Every suspended thread the user may see, oldest waiting first, with filters."""
    filters = InboxFilters.from_query(request.GET)
    context = base_context(request, "inbox")
    context.update(inbox_context(request.user, filters, can_act=context["can_act"]))
    if request.htmx:
        # The list alone: the filter form, with its choices, stays on the page.
        return render(request, "dashboard/inbox.html#inbox-list", context)
    context["assistants"] = inbox_assistants(request.user)
    context["ages"] = AGES
    context["claim_choices"] = CLAIM_FILTERS
    status = 422 if context["filter_error"] else 200
    return render(request, "dashboard/inbox.html", context, status=status)


@require_POST
@login_required
def inbox_bulk(request: HtmxHttpRequest) -> HttpResponse:
    """Approve or reject many waiting threads at once; each is checked and applied alone.

    Each selected item is ``thread_id|checkpoint_id`` (the suspension the operator saw);
    an item whose thread moved on since is reported "already decided", the others are
    applied. The result table lists every item.
    """
    require_operator(request)
    button = (
        "approve" if "approve" in request.POST else "reject" if "reject" in request.POST else ""
    )
    selected = request.POST.getlist("item")
    # A refusal of the whole request (nothing ticked, no button) is one message, not a
    # row of the per-item table: that table links each row to its thread.
    error = code = ""
    results: list[dict[str, Any]] = []
    if not button:
        error, code = "Press Approve selected or Reject selected.", "no_button"
    elif not selected:
        code = "nothing_selected"
        error = f"Nothing is selected: tick the cards to {button} first, then press the button."
    else:
        ids = {s.partition("|")[0]: s.partition("|")[2] for s in selected[:200]}
        mine = visible_threads(viewer(request.user))
        threads = {t.pk: t for t in mine.filter(pk__in=list(ids))}
        for thread_id, expected in ids.items():
            thread = threads.get(thread_id)
            if thread is None:
                # Only a thread that exists (and is visible) gets a link.
                outcome = actions.Outcome(False, "No such thread.", "error", "thread_not_found")
                url = ""
            else:
                outcome = _decide_one(thread, expected, button, request)
                url = thread_url(thread.pk)
            results.append({"thread_id": thread_id, "url": url, "outcome": outcome})
    context = {
        "results": results,
        "bulk_error": error,
        "bulk_code": code,
        "bulk_action": button or "decision",
    }
    if request.htmx:
        return render(
            request, "dashboard/inbox.html#bulk-results", context, status=422 if error else 200
        )
    if error:
        messages.error(request, error)
    for r in results:
        level = messages.SUCCESS if r["outcome"].ok else messages.WARNING
        messages.add_message(request, level, f"{r['thread_id']}: {r['outcome'].message}")
    return redirect("dashboard:inbox")


def _decide_one(thread: Any, expected: str, button: str, request: HttpRequest) -> actions.Outcome:
    row = checkpoint_row(thread_id=thread.pk, checkpoint_id=expected)
    interrupts = list(body_of(row).get("interrupts") or [])
    kind, _, _, calls = describe_interrupts(interrupts)
    if kind != "approval":
        if thread.head_id != expected or thread.head_status != "suspended":
            return actions.decide(thread=thread, expected=expected, decisions=[], user=request.user)
        return actions.Outcome(
            False, "A workflow waits for a value: open it to resume.", "warning", "needs_value"
        )
    try:
        decisions = decisions_from(request.POST, calls, button)
    except FormError as exc:
        return actions.Outcome(False, exc.message, "error", "invalid")
    return actions.decide(thread=thread, expected=expected, decisions=decisions, user=request.user)
