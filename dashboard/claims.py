"""The claim strip: who holds a waiting thread and since when, with the one button the
viewer may press (Claim, Release or Take over). Shown on every inbox card and on the
thread page; rendered in Python because it is filled into kept cards (dashboard/cards.py)
on every render, up to 50 times a page.
"""

from __future__ import annotations

from typing import Any

from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe

from dashboard.data import thread_url

__all__ = ["claim_strip"]


def claim_strip(
    thread_id: str,
    claim: Any,
    *,
    user: Any,
    can_act: bool,
    csrf_field: str,
    where: str,
) -> SafeString:
    """``<div class="claim">`` for ``thread_id`` held by ``claim`` (None: nobody), as
    ``user`` sees it, with a button posting to the thread's ``claim/`` endpoint: on the
    inbox (``where="inbox"``) through the page's ``#claim-form``, on the thread page
    through a form of its own carrying ``csrf_field``."""
    mine = claim is not None and user is not None and claim.user_id == user.pk
    if claim is None:
        text = mark_safe('<span class="muted" data-claim-holder="">unclaimed</span>')
        button, label = "claim", "Claim"
    else:
        since = timezone.localtime(claim.since)
        text = format_html(
            '<span data-claim-holder="{}">{} <strong>{}</strong></span> '
            '<span class="muted" title="{}">since {}</span>',
            claim.user.get_username(),
            "Claimed by you" if mine else "Claimed by",
            "" if mine else claim.user.get_username(),
            since.isoformat(),
            since.strftime("%H:%M:%S"),
        )
        button, label = ("release", "Release") if mine else ("take_over", "Take over")
    form = SafeString("")
    if can_act and where == "inbox":
        # The card's button submits the inbox's one claim form (its CSRF token and
        # from=inbox live there, outside the live list): a kept card carries one token.
        url = thread_url(thread_id, "claim/")
        form = format_html(
            '<button type="submit" form="claim-form" formaction="{url}" hx-post="{url}" '
            'hx-target="#inbox-list" hx-swap="outerHTML" name="{button}" '
            'data-claim-button="{button}">{label}</button>',
            url=url,
            button=button,
            label=label,
        )
    elif can_act:
        url = thread_url(thread_id, "claim/")
        form = format_html(
            '<form method="post" action="{url}" class="inline claim-form" hx-post="{url}" '
            'hx-target="#claim" hx-swap="outerHTML">{csrf}'
            '<input type="hidden" name="from" value="thread">'
            '<button type="submit" name="{button}" data-claim-button="{button}">{label}'
            "</button></form>",
            url=url,
            csrf=mark_safe(csrf_field),  # noqa: S308 - built with format_html by the caller
            button=button,
            label=label,
        )
    return format_html(
        '<div class="claim{}" data-claim="{}">{} {}</div>',
        " mine" if mine else "",
        "mine" if mine else ("taken" if claim is not None else "free"),
        text,
        form,
    )
