"""The audit log: who did what to which thread, newest first, filterable."""

from __future__ import annotations

from urllib.parse import urlencode

from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from criogen.selectors import audit_events, viewer
from dashboard.views.common import HtmxHttpRequest, base_context

PAGE = 100


@require_GET
@login_required
def audit(request: HtmxHttpRequest) -> HttpResponse:
    """Audit events (contract 4's ``AuditEvent``), filtered by actor, action and thread."""
    context = base_context(request, "audit")
    f = {k: request.GET.get(k, "").strip() for k in ("actor", "action", "thread")}
    before = request.GET.get("before", "")
    events = audit_events(
        viewer(request.user),
        actor=f["actor"],
        action=f["action"],
        thread=f["thread"],
        before=int(before) if before.isdigit() else None,
        limit=PAGE + 1,
    )
    context.update(
        {
            "available": True,
            "f": f,
            "events": events[:PAGE],
            "older": events[PAGE - 1].pk if len(events) > PAGE else None,
            "query": urlencode({k: v for k, v in f.items() if v}),
        }
    )
    return render(request, "dashboard/audit.html", context)
