"""What every page needs: the thread a user may see, links to threads, a thread's
assistant."""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.http import Http404

from criogen import selectors
from criogen.engine.errors import ThreadNotFound
from criogen.selectors import viewer

if TYPE_CHECKING:
    from criogen.storage.models import Thread

__all__ = ["User", "assistant_of", "get_thread_for_user", "thread_url"]

User = AbstractBaseUser | AnonymousUser


def get_thread_for_user(user: User, thread_id: str) -> Thread:
    """The thread with its owner, or Http404 when it does not exist or ``user`` may not
    see it (:func:`criogen.selectors.thread_for`)."""
    try:
        return selectors.thread_for(viewer(user), thread_id, owner=True)
    except ThreadNotFound:
        raise Http404(f"No thread {thread_id!r}.") from None


def thread_url(thread_id: str, suffix: str = "") -> str:
    """``/ui/threads/<id>/<suffix>`` without a ``reverse()`` per row (lists render many)."""
    from urllib.parse import quote

    from django.urls import get_script_prefix

    from dashboard.converters import encode_thread_id

    segment = quote(encode_thread_id(thread_id), safe="~")
    return f"{_threads_root(get_script_prefix())}{segment}/{suffix}"


@lru_cache(maxsize=16)
def _threads_root(prefix: str) -> str:
    """``reverse('dashboard:threads')`` under the script ``prefix`` (the cache key: the
    URL only changes with it). An inbox page links each card several times, and each
    ``reverse()`` cost more than the rest of the card's row."""
    from django.urls import reverse

    return reverse("dashboard:threads")


def assistant_of(thread: Thread) -> str:
    """The assistant (or graph) a thread runs, from its metadata; '' when unknown."""
    meta = thread.metadata if isinstance(thread.metadata, dict) else {}
    return str(meta.get("graph_id") or meta.get("assistant_id") or "")
