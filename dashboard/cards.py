"""Inbox cards, rendered once per head checkpoint and kept.

A card shows what its thread waits for: the head checkpoint's interrupts, the thread's
id, owner and assistant, and the moment it started waiting. None of that changes until
the head does, yet an inbox of 50 cards re-rendered them on every load and every live
update: three quarters of the page's CPU. The rendered card is kept in a small
per-process LRU keyed by everything it shows; the two parts that do change between two
renders of the same card, how long it has waited and the viewer's CSRF token, are
marks in the kept HTML, filled in on every render.

The marks are raw ``<criogen-…>`` tags: everything a user wrote is escaped in a card,
so a mark can only be one the template put there.
"""

from __future__ import annotations

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

__all__ = ["CARDS_KEPT", "CARDS_KEPT_CHARS", "forget_cards", "inbox_card"]

CARDS_KEPT = 2000
"""How many rendered cards a process keeps (~2 kB each), least recently shown first out."""
CARDS_KEPT_CHARS = 4_000_000
"""And how much HTML in all: a card whose arguments are large (up to ~80 kB once the
highlighted JSON is cut) must not let 2,000 of them take hundreds of megabytes."""

_AGE = "<criogen-age>"
_CSRF = "<criogen-csrf>"
_CLAIM = "<criogen-claim>"

_kept: OrderedDict[Hashable, str] = OrderedDict()
_kept_chars = 0
_lock = threading.Lock()


def inbox_card(item: InboxItem, *, can_act: bool, csrf_token: Any, user: Any = None) -> SafeString:
    """The card of ``item`` as ``dashboard/inbox.html#inbox-card`` renders it, for a
    viewer who may act (``can_act``) with ``csrf_token`` (as the ``{% csrf_token %}``
    tag would print it: nothing when absent). Its claim strip (who holds the thread,
    see :mod:`dashboard.claims`) is filled in on every render, as ``user`` sees it."""
    from dashboard.claims import claim_strip
    from dashboard.templatetags.criogen_ui import waiting_age

    owner = item.thread.owner.get_username() if item.thread.owner_id else ""
    key = (
        item.thread.pk,
        item.checkpoint_id,
        item.version,
        item.waiting_since,
        item.assistant,
        owner,
        can_act,
        get_script_prefix(),
        timezone.get_current_timezone_name(),  # the time in the card's title
    )
    with _lock:
        html = _kept.get(key)
        if html is not None:
            _kept.move_to_end(key)
    if html is None:
        context = {
            "item": item,
            "can_act": can_act,
            "age_mark": _AGE,
            "csrf_mark": _CSRF,
            "claim_mark": _CLAIM,
        }
        html = render_to_string("dashboard/inbox.html#inbox-card", context)
        _keep(key, html)
    # As the {% csrf_token %} tag prints it: nothing without a token or for the
    # sentinel Django's csrf_exempt views put in the context.
    token = str(csrf_token) if csrf_token else ""
    field = ""
    if token and token != "NOTPROVIDED":  # noqa: S105 - Django's sentinel, not a secret
        field = format_html('<input type="hidden" name="csrfmiddlewaretoken" value="{}">', token)
    strip = claim_strip(
        item.thread.pk, item.claim, user=user, can_act=can_act, csrf_field="", where="inbox"
    )
    html = html.replace(_AGE, waiting_age(item)).replace(_CSRF, field).replace(_CLAIM, strip)
    return mark_safe(html)  # noqa: S308 - rendered by the template; the fills are escaped


def _keep(key: Hashable, html: str) -> None:
    global _kept_chars
    with _lock:
        if key in _kept:  # another thread rendered it meanwhile
            return
        _kept[key] = html
        _kept_chars += len(html)
        while _kept and (len(_kept) > CARDS_KEPT or _kept_chars > CARDS_KEPT_CHARS):
            _, dropped = _kept.popitem(last=False)
            _kept_chars -= len(dropped)


def forget_cards() -> None:
    """Drop every kept card (tests; a process never needs to)."""
    global _kept_chars
    with _lock:
        _kept.clear()
        _kept_chars = 0
