"""Dashboard pages, all under ``/ui/`` (the REST API owns the other root paths)."""

from __future__ import annotations

from django.urls import path

from dashboard import views
from dashboard.converters import THREAD  # noqa: F401 - registers <thread:…>

app_name = "dashboard"
urlpatterns = [
    path("favicon.ico", views.favicon, name="favicon"),
    path("ui/", views.home, name="home"),
    path("ui/inbox/", views.inbox, name="inbox"),
    path("ui/inbox/bulk/", views.inbox_bulk, name="inbox_bulk"),
    path("ui/threads/", views.threads, name="threads"),
    path("ui/threads/<thread:thread_id>/", views.thread, name="thread"),
    path("ui/threads/<thread:thread_id>/act/", views.thread_act, name="thread_act"),
    path("ui/threads/<thread:thread_id>/claim/", views.thread_claim, name="thread_claim"),
    path(
        "ui/threads/<thread:thread_id>/checkpoints/<str:checkpoint_id>/",
        views.checkpoint,
        name="checkpoint",
    ),
    path(
        "ui/threads/<thread:thread_id>/rewind/<str:checkpoint_id>/",
        views.rewind_confirm,
        name="rewind_confirm",
    ),
    path("ui/audit/", views.audit, name="audit"),
    path("ui/tokens/", views.tokens, name="tokens"),
    path("ui/notifications/", views.notifications, name="notifications"),
]
