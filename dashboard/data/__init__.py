"""Read-side helpers of the dashboard: what each page shows, in a constant number of queries.

Pages and consumers both call these, so an HTTP response and a live push render the same
rows. The queries are :mod:`criogen.selectors`'; this module turns the signed-in
``user`` into who is asking (:func:`criogen.selectors.viewer`: operators see every
thread, other users only their own, contract 5) and the selectors' rows into what the
templates show. Nothing here writes.

One module per page, every name importable from ``dashboard.data`` as well:
:mod:`~dashboard.data.inbox`, :mod:`~dashboard.data.thread_list`,
:mod:`~dashboard.data.timeline` (a thread's page), and :mod:`~dashboard.data.common`
(the thread a user may see, links to threads).
"""

from __future__ import annotations

from criogen.selectors import can_operate, open_json
from criogen.selectors import checkpoint_body as body_of
from dashboard.data.common import User, assistant_of, get_thread_for_user, thread_url
from dashboard.data.inbox import (
    INBOX_LIMIT,
    InboxFilters,
    InboxItem,
    WaitingCall,
    describe_interrupts,
    inbox_assistants,
    inbox_count,
    inbox_items,
    inbox_listing,
)
from dashboard.data.thread_list import (
    STATUSES,
    THREADS_PAGE,
    BadFilter,
    ThreadFilters,
    status_counts,
    threads_page,
)
from dashboard.data.timeline import (
    TIMELINE_PAGE,
    TimelineEntry,
    state_diff,
    timeline,
    transcript,
)

__all__ = [
    "INBOX_LIMIT",
    "STATUSES",
    "THREADS_PAGE",
    "TIMELINE_PAGE",
    "BadFilter",
    "InboxFilters",
    "InboxItem",
    "ThreadFilters",
    "TimelineEntry",
    "User",
    "WaitingCall",
    "assistant_of",
    "body_of",
    "can_operate",
    "describe_interrupts",
    "get_thread_for_user",
    "inbox_assistants",
    "inbox_count",
    "inbox_items",
    "inbox_listing",
    "open_json",
    "state_diff",
    "status_counts",
    "thread_url",
    "threads_page",
    "timeline",
    "transcript",
]
