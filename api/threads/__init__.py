"""Threads for the REST API: reads (status, search, state, history) and the writes that
are not runs (create, update, delete, copy, prune, update_state).

This is the HTTP <-> engine translation for threads: it turns engine checkpoints into
the JSON shapes ``langgraph_sdk`` expects (``Thread``, ``ThreadState``) and applies the
rules of the threads page (``spec/threads-rest-api.txt``). Every function takes the
caller's :class:`~api.auth.Principal`; a thread the caller may not see raises
:class:`~criogen.engine.errors.ThreadNotFound`, exactly like one that does not exist
(:func:`criogen.selectors.thread_for`). Reads go through :mod:`criogen.selectors`,
changes through :mod:`criogen.services.threads`.

REST status, derived from the head and the runs (one SQL expression, so that search can
filter and count by it):

- ``busy``: a run is pending or running on the thread, or a live lease holds it;
- ``interrupted``: the head is ``suspended`` (waiting for a person);
- ``error``: the head is ``failed``;
- ``idle``: anything else (no checkpoint yet, completed, or in progress with no run).

One module per concern, every name importable from ``api.threads`` as well:
:mod:`~api.threads.shapes` (the SDK's JSON shapes), :mod:`~api.threads.reads` (load,
state, history) and :mod:`~api.threads.writes` (create, update, delete, copy, prune,
update_state).
"""

from __future__ import annotations

from api.threads.reads import (
    check_checkpoint_id,
    check_visible,
    get_state,
    history,
    load_thread,
    state_at,
)
from api.threads.shapes import (
    interrupt_out,
    state_out,
    storage,
    task_id,
    thread_interrupts,
    thread_out,
)
from api.threads.writes import (
    check_thread_id,
    copy_thread,
    create_thread,
    delete_thread,
    prune_expired,
    prune_threads,
    update_state,
    update_thread,
)

__all__ = [
    "check_checkpoint_id",
    "check_thread_id",
    "check_visible",
    "copy_thread",
    "create_thread",
    "delete_thread",
    "get_state",
    "history",
    "interrupt_out",
    "load_thread",
    "prune_expired",
    "prune_threads",
    "state_at",
    "state_out",
    "storage",
    "task_id",
    "thread_interrupts",
    "thread_out",
    "update_state",
    "update_thread",
]
