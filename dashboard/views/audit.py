"""The audit log: who did what to which thread, newest first, filterable."""

from __future__ import annotations

import importlib
from typing import Any
from urllib.parse import urlencode

from django.contrib.auth.decorators import login_required
from django.db.models import Exists, OuterRef
from django.http import HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from dashboard.data import open_json, visible_threads
from dashboard.views.common import HtmxHttpRequest, base_context

PAGE = 100


def _audit_model() -> Any:
    models = importlib.import_module("criogen.storage.models")
    return getattr(models, "AuditEvent", None)


@require_GET
@login_required
def audit(request: HtmxHttpRequest) -> HttpResponse:
    """Audit events (contract 4's ``AuditEvent``), filtered by actor, action and thread."""
    context = base_context(request, "audit")
    model = _audit_model()
    f = {k: request.GET.get(k, "").strip() for k in ("actor", "action", "thread")}
    context.update({"available": model is not None, "f": f, "events": [], "older": None})
    if model is not None:
        qs = model.objects.all()
        if not context["can_act"]:
            # A thread is its id *and* its life: events written before the visible
            # thread was created belong to an earlier thread of the same id (deleted,
            # perhaps another user's) and are never shown to the id's next owner.
            current = visible_threads(request.user).filter(
                pk=OuterRef("thread_id"), created_at__lte=OuterRef("created_at")
            )
            qs = qs.filter(Exists(current))
        if f["actor"]:
            qs = qs.filter(actor__icontains=f["actor"])
        if f["action"]:
            qs = qs.filter(action__icontains=f["action"])
        if f["thread"]:
            qs = qs.filter(thread_id__icontains=f["thread"])
        before = request.GET.get("before", "")
        if before.isdigit():
            qs = qs.filter(pk__lt=int(before))
        events = list(qs.order_by("-pk")[: PAGE + 1])
        for event in events:
            # Details are JSON text, encrypted at rest when a key is set.
            event.details_json = open_json(event.details)
        context["events"] = events[:PAGE]
        context["older"] = events[PAGE - 1].pk if len(events) > PAGE else None
        context["query"] = urlencode({k: v for k, v in f.items() if v})
    return render(request, "dashboard/audit.html", context)
