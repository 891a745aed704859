"""Dashboard pages: one function view per page (and one per action endpoint)."""

from __future__ import annotations

from dashboard.views.audit import audit
from dashboard.views.claims import thread_claim
from dashboard.views.inbox import inbox, inbox_bulk
from dashboard.views.notifications import notifications
from dashboard.views.site import favicon
from dashboard.views.threads import (
    checkpoint,
    home,
    rewind_confirm,
    thread,
    thread_act,
    threads,
)
from dashboard.views.tokens import tokens

__all__ = [
    "audit",
    "checkpoint",
    "favicon",
    "home",
    "inbox",
    "inbox_bulk",
    "notifications",
    "rewind_confirm",
    "thread",
    "thread_act",
    "thread_claim",
    "threads",
    "tokens",
]
