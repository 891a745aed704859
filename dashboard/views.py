"""Dashboard pages: one function view per page."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from criogen.storage.models import Thread


def home(request: HttpRequest) -> HttpResponse:
    """Landing page: what is waiting, and where to go."""
    counts = {
        status: Thread.objects.filter(head_status=status).count()
        for status in ("suspended", "in_progress", "failed", "completed")
    }
    recent = Thread.objects.order_by("-updated_at")[:10]
    return render(request, "dashboard/home.html", {"counts": counts, "recent": recent})
