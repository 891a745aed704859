"""Inbox cards, rendered once per head checkpoint and kept.

A card shows what its thread waits for: the head checkpoint's interrupts, the thread's
id, owner and assistant, and the moment it started waiting. None of that changes until
the head does, yet an inbox of 50 cards re-rendered them on every load and every live
update: three quarters of the page's CPU. The rendered card is kept in a small
per-process LRU keyed by everything it shows; the parts that do change between two
renders of the same card, how long it has waited, the viewer's CSRF token and who holds
the thread (:mod:`dashboard.claims`), are marks in the kept HTML, filled in on every
render. What the fills need that follows from the key (the moment the wait becomes
late, the strip of a thread nobody holds) is kept with the card: with the fills written
through ``format_html`` card by card, they cost as much as the rest of the page.

The marks are raw ``<criogen-…>`` tags: everything a user wrote is escaped in a card,
so a mark can only be one the template put there.
"""

from __future__ import annotations

import functools
import threading
from collections import OrderedDict
from collections.abc import Hashable
from typing import Any

from django.template.loader import render_to_string
from django.urls import get_script_prefix
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe

from dashboard.data import InboxItem

__all__ = ["CARDS_KEPT", "CARDS_KEPT_CHARS", "forget_cards", "inbox_card", "where_shown"]

CARDS_KEPT = 2000
"""How many rendered cards a process keeps (~2 kB each), least recently shown first out."""
CARDS_KEPT_CHARS = 4_000_000
"""And how much HTML in all: a card whose arguments are large (up to ~80 kB once the
highlighted JSON is cut) must not let 2,000 of them take hundreds of megabytes."""

_AGE = "<criogen-age>"
_CSRF = "<criogen-csrf>"
_CLAIM = "<criogen-claim>"

_Card = tuple[str, str, int]
"""A kept card: its HTML with the marks, its unclaimed claim strip, when it is late."""

_kept: OrderedDict[Hashable, _Card] = OrderedDict()
_kept_chars = 0
_lock = threading.Lock()


def inbox_card(
    item: InboxItem,
    *,
    can_act: bool,
    csrf_token: Any,
    user: Any = None,
    where: tuple[str, str] | None = None,
) -> SafeString:
    """The card of ``item`` as ``dashboard/inbox.html#inbox-card`` renders it, for a
    viewer who may act (``can_act``) with ``csrf_token`` (as the ``{% csrf_token %}``
    tag would print it: nothing when absent). Its claim strip (who holds the thread,
    see :mod:`dashboard.claims`) is filled in on every render, as ``user`` sees it.
    ``where`` is :func:`where_shown` when the caller has it (once per page)."""
    from dashboard.claims import claim_strip
    from dashboard.templatetags.criogen_ui import timed_age

    owner = item.thread.owner.get_username() if item.thread.owner_id else ""
    key = (
        item.thread.pk,
        item.checkpoint_id,
        item.version,
        item.waiting_since,
        item.assistant,
        owner,
        can_act,
        *(where or where_shown()),
    )
    with _lock:
        kept = _kept.get(key)
        if kept is not None:
            _kept.move_to_end(key)
    if kept is None:
        kept = _render(item, can_act)
        _keep(key, kept)
    html, unclaimed, late_after = kept
    if item.claim is None:
        strip = unclaimed
    else:
        strip = claim_strip(
            item.thread.pk, item.claim, user=user, can_act=can_act, csrf_field="", where="inbox"
        )
    html = (
        html.replace(_AGE, timed_age(item.waiting_since, late_after))
        .replace(_CSRF, _csrf_field(str(csrf_token) if csrf_token else ""))
        .replace(_CLAIM, strip)
    )
    return mark_safe(html)  # noqa: S308 - rendered by the template; the fills are escaped


def where_shown() -> tuple[str, str]:
    """What a card's HTML depends on besides its thread: the script prefix of its links
    and the time zone of the time in its title (two context-local reads, the same for
    every card of a page)."""
    return get_script_prefix(), timezone.get_current_timezone_name()


def _render(item: InboxItem, can_act: bool) -> _Card:
    """What is kept of ``item``'s card: its HTML with the marks, its claim strip while
    nobody holds the thread (the same for every viewer), and the age from which its
    wait is late (both follow from the card's key alone)."""
    from dashboard.claims import claim_strip
    from dashboard.templatetags.criogen_ui import late_at

    context = {
        "item": item,
        "can_act": can_act,
        "age_mark": _AGE,
        "csrf_mark": _CSRF,
        "claim_mark": _CLAIM,
    }
    html = render_to_string("dashboard/inbox.html#inbox-card", context)
    unclaimed = claim_strip(
        item.thread.pk, None, user=None, can_act=can_act, csrf_field="", where="inbox"
    )
    since = item.waiting_since
    late_after = max(0, int((late_at(item) - since).total_seconds()))
    return html, str(unclaimed), late_after


@functools.lru_cache(maxsize=256)
def _csrf_field(token: str) -> str:
    """The hidden field as the ``{% csrf_token %}`` tag prints it: nothing without a
    token or for the sentinel Django's csrf_exempt views put in the context. The same
    for every card of a page."""
    if not token or token == "NOTPROVIDED":  # noqa: S105 - Django's sentinel, not a secret
        return ""
    return format_html('<input type="hidden" name="csrfmiddlewaretoken" value="{}">', token)


def _keep(key: Hashable, card: _Card) -> None:
    global _kept_chars
    with _lock:
        if key in _kept:  # another thread rendered it meanwhile
            return
        _kept[key] = card
        _kept_chars += len(card[0]) + len(card[1])
        while _kept and (len(_kept) > CARDS_KEPT or _kept_chars > CARDS_KEPT_CHARS):
            _, (dropped, strip, _late) = _kept.popitem(last=False)
            _kept_chars -= len(dropped) + len(strip)


def forget_cards() -> None:
    """Drop every kept card (tests; a process never needs to)."""
    global _kept_chars
    with _lock:
        _kept.clear()
        _kept_chars = 0
