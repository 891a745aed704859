"""Read-side queries for the API and the dashboard: who may see which thread, runs,
and derived thread status.

Nothing here writes. One module per concern; every name is importable from
``criogen.selectors`` as well:

- :mod:`~criogen.selectors.visibility`: who may see or act on a thread (operators
  every thread, anyone else their own; another user's thread is not found, exactly as
  if it did not exist): :func:`thread_for`, :func:`visible_threads`, :func:`viewer`.
- :mod:`~criogen.selectors.status`: a thread's REST status (idle / busy / interrupted
  / error), derived in SQL, and the heads of a page of threads.
- :mod:`~criogen.selectors.search`: the REST thread search and count.
- :mod:`~criogen.selectors.runs`: runs by id, of a thread, the active ones.
- :mod:`~criogen.selectors.checkpoints`: checkpoint rows, their decoded bodies, a
  thread's timeline; :mod:`~criogen.selectors.timeline`: the console's timeline page
  (what wrote each checkpoint, step durations, people's decisions, edited calls).
- :mod:`~criogen.selectors.assistants`, :mod:`~criogen.selectors.store`,
  :mod:`~criogen.selectors.crons`: the REST resources of those names.
- :mod:`~criogen.selectors.inbox`, :mod:`~criogen.selectors.thread_list`,
  :mod:`~criogen.selectors.audit`: the operator console's inbox, threads list and
  audit log; :mod:`~criogen.selectors.claims`: who holds which suspended thread.
"""

from __future__ import annotations

from criogen.selectors.assistants import count_assistants, search_assistants
from criogen.selectors.audit import audit_events, who_decided
from criogen.selectors.checkpoints import (
    TimelineEntry,
    checkpoint_body,
    checkpoint_row,
    checkpoint_version,
    first_run_version,
    open_json,
    run_checkpoint_ids,
    timeline,
)
from criogen.selectors.claims import CLAIM_FILTERS, claim_of, claims_of, filter_claimed
from criogen.selectors.crons import count_crons, cron_for, search_crons
from criogen.selectors.inbox import (
    content_search_available,
    inbox_assistants,
    inbox_page,
    suspended_threads,
)
from criogen.selectors.runs import (
    RunNotFound,
    active_runs,
    active_runs_for,
    find_run,
    get_run,
    refresh_run,
    run_status,
    run_stream_mode,
    runs_for_thread,
    streams_from_langgraph,
    thread_graph_id,
)
from criogen.selectors.search import (
    SORT_FIELDS,
    count_threads,
    filter_metadata,
    search_limit,
    search_page,
    search_threads,
)
from criogen.selectors.status import (
    THREAD_STATUSES,
    ThreadStatus,
    filter_status,
    thread_heads,
    thread_status,
    thread_statuses,
    with_status,
)
from criogen.selectors.store import store_collection, store_item, store_items, store_namespaces
from criogen.selectors.thread_list import HEAD_STATUSES, status_counts, threads_page
from criogen.selectors.visibility import (
    EVERY_OWNER,
    Viewer,
    Who,
    can_operate,
    check_thread_for,
    expired_threads,
    owner_seen_by,
    thread_exists_for,
    thread_for,
    viewer,
    visible_history,
    visible_runs,
    visible_threads,
)

__all__ = [
    "CLAIM_FILTERS",
    "EVERY_OWNER",
    "claim_of",
    "claims_of",
    "filter_claimed",
    "HEAD_STATUSES",
    "RunNotFound",
    "SORT_FIELDS",
    "THREAD_STATUSES",
    "ThreadStatus",
    "TimelineEntry",
    "Viewer",
    "Who",
    "active_runs",
    "active_runs_for",
    "audit_events",
    "can_operate",
    "check_thread_for",
    "checkpoint_body",
    "checkpoint_row",
    "checkpoint_version",
    "count_assistants",
    "count_crons",
    "count_threads",
    "cron_for",
    "expired_threads",
    "filter_metadata",
    "filter_status",
    "find_run",
    "first_run_version",
    "get_run",
    "refresh_run",
    "content_search_available",
    "inbox_assistants",
    "inbox_page",
    "open_json",
    "owner_seen_by",
    "run_checkpoint_ids",
    "run_status",
    "run_stream_mode",
    "streams_from_langgraph",
    "runs_for_thread",
    "thread_graph_id",
    "search_assistants",
    "search_crons",
    "search_limit",
    "search_page",
    "search_threads",
    "status_counts",
    "store_collection",
    "store_item",
    "store_items",
    "store_namespaces",
    "suspended_threads",
    "thread_exists_for",
    "thread_for",
    "thread_heads",
    "thread_status",
    "thread_statuses",
    "threads_page",
    "timeline",
    "viewer",
    "visible_history",
    "visible_runs",
    "visible_threads",
    "who_decided",
    "with_status",
]
