"""Template helpers of the dashboard: highlighted JSON, durations, the inbox count and
cards.

Every helper escapes what it prints: state values, tool arguments and reasons come from
models and users, and may hold HTML.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

from django import template
from django.utils import timezone
from django.utils.html import escape, format_html
from django.utils.safestring import SafeString, mark_safe

register = template.Library()

_MAX_CHARS = 20_000
"""Longer JSON is cut (with a note) so one huge state value cannot stall the page."""


def _render(value: Any, indent: int, out: list[str]) -> None:
    pad = "  " * indent
    if isinstance(value, dict):
        if not value:
            out.append('<span class="j-p">{}</span>')
            return
        out.append('<span class="j-p">{</span>\n')
        for i, (key, item) in enumerate(value.items()):
            out.append(
                f'{pad}  <span class="j-k">{escape(json.dumps(str(key), ensure_ascii=False))}</span>: '
            )
            _render(item, indent + 1, out)
            out.append(",\n" if i < len(value) - 1 else "\n")
        out.append(f'{pad}<span class="j-p">}}</span>')
    elif isinstance(value, list):
        if not value:
            out.append('<span class="j-p">[]</span>')
            return
        out.append('<span class="j-p">[</span>\n')
        for i, item in enumerate(value):
            out.append(f"{pad}  ")
            _render(item, indent + 1, out)
            out.append(",\n" if i < len(value) - 1 else "\n")
        out.append(f'{pad}<span class="j-p">]</span>')
    elif isinstance(value, str):
        out.append(f'<span class="j-s">{escape(json.dumps(value, ensure_ascii=False))}</span>')
    elif isinstance(value, bool) or value is None:
        out.append(f'<span class="j-b">{escape(json.dumps(value))}</span>')
    elif isinstance(value, int | float):
        out.append(f'<span class="j-n">{escape(json.dumps(value))}</span>')
    else:  # not JSON: show its repr, escaped
        out.append(f'<span class="j-s">{escape(repr(value))}</span>')


@register.filter
def json_html(value: Any) -> SafeString:
    """``value`` as indented JSON with ``<span class="j-k|j-s|j-n|j-b|j-p">`` highlighting.

    Every key and string is escaped, so ``<script>`` in a value shows as text.
    """
    out: list[str] = []
    _render(value, 0, out)
    html = "".join(out)
    if len(html) > _MAX_CHARS * 4:
        text = json.dumps(value, indent=2, ensure_ascii=False, default=repr)
        return format_html(
            "{}<span class='j-cut'>… ({} characters, cut)</span>", text[:_MAX_CHARS], len(text)
        )
    return mark_safe(html)  # noqa: S308 - every piece above is escaped


@register.filter
def json_text(value: Any) -> str:
    """``value`` as indented JSON text (for editable text areas; the template escapes it)."""
    return json.dumps(value, indent=2, ensure_ascii=False, default=repr)


@register.filter
def all_allow(calls: Any, decision: str) -> bool:
    """Whether every waiting call allows ``decision`` (its ``allowed_decisions``): a
    button that would answer all of them is shown only then."""
    return all(decision in getattr(call, "allowed", ()) for call in calls or ())


@register.filter
def thread_segment(thread_id: Any) -> str:
    """The thread id as one URL path segment (see :mod:`dashboard.converters`)."""
    from dashboard.converters import encode_thread_id

    return encode_thread_id(str(thread_id))


@register.filter
def short(value: Any, n: int = 8) -> str:
    """The first ``n`` characters of an id."""
    text = "" if value is None else str(value)
    return text[: int(n)]


@register.filter
def age(value: datetime | timedelta | None) -> str:
    """A compact duration: ``45s``, ``12m``, ``3h 05m``, ``2d 4h`` (since a time, or a span)."""
    if value is None:
        return ""
    span = timezone.now() - value if isinstance(value, datetime) else value
    return _compact(max(0, int(span.total_seconds())))


def _compact(seconds: int) -> str:
    """``seconds`` as :func:`age` writes a duration."""
    if seconds < 60:
        return f"{seconds}s"
    minutes = seconds // 60
    if minutes < 60:
        return f"{minutes}m"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h {minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d {hours}h"


LATE_AFTER = timedelta(hours=1)
"""A wait is shown in the warning colour once it is this old, unless the suspension
names its own ``deadline`` or ``remind`` time (then from the first of those)."""


def age_element(since: datetime | None, *, late_at: datetime | None = None) -> SafeString:
    """``since`` as a ticking age: ``<time class="age" data-age="42">42s</time>``.

    ``data-age`` is the age in seconds when the server rendered it; ``criogen.js``
    counts on from there with the browser's clock (so a server whose clock differs
    from the browser's shows the same ages), and re-formats it as :func:`age` does.
    With ``late_at``, the element carries ``data-late-at`` (the age, in seconds, from
    which the wait is late) and the class ``late`` once it is: the warning colour.
    """
    if since is None:
        return mark_safe("")  # noqa: S308 - empty
    late_after = None if late_at is None else max(0, int((late_at - since).total_seconds()))
    return timed_age(since, late_after)


def timed_age(since: datetime, late_after: int | None) -> SafeString:
    """:func:`age_element` of ``since`` late from ``late_after`` seconds on (None: never).

    The inbox fills one in every card on every render, so it is written without
    ``format_html``: each part is a number or a time stamp this function writes, and
    none can hold a character that needs escaping.
    """
    seconds = max(0, int((timezone.now() - since).total_seconds()))
    classes, late = "age", ""
    if late_after is not None:
        late = f' data-late-at="{late_after}"'
        if seconds >= late_after:
            classes = "age late"
    return mark_safe(  # noqa: S308 - numbers and an ISO time stamp only
        f'<time class="{classes}" datetime="{since.isoformat()}" data-age="{seconds}"{late}>'
        f"{_compact(seconds)}</time>"
    )


@register.filter
def live_age(since: datetime | None) -> SafeString:
    """How long ago ``since`` was, ticking in the browser (see :func:`age_element`)."""
    return age_element(since)


@register.filter
def waiting_age(item: Any) -> SafeString:
    """How long an :class:`~dashboard.data.InboxItem` has waited, ticking, in the
    warning colour once late (see :data:`LATE_AFTER`)."""
    return age_element(item.waiting_since, late_at=late_at(item))


def late_at(item: Any) -> datetime:
    """When the wait of ``item`` becomes late: the first ``deadline`` or ``remind``
    its interrupts name, else :data:`LATE_AFTER` after it began."""
    from criogen.services.deadlines import parse_when

    since: datetime = item.waiting_since
    moments = [
        moment
        for interrupt in item.interrupts or []
        if isinstance(interrupt, dict)
        for key in ("deadline", "remind")
        if (moment := parse_when(interrupt.get(key), since)) is not None
    ]
    return min(moments) if moments else since + LATE_AFTER


@register.simple_tag(takes_context=True)
def inbox_count(context: template.Context) -> int:
    """How many suspended threads the signed-in user may see (one COUNT query)."""
    from dashboard.data import inbox_count as count

    if "inbox_total" in context:
        return int(context["inbox_total"])
    user = context.get("user")
    return count(user) if user is not None else 0


@register.simple_tag(takes_context=True)
def inbox_card(context: template.Context, item: Any) -> SafeString:
    """One inbox card (``dashboard/inbox.html#inbox-card``), kept once rendered (see
    :mod:`dashboard.cards`)."""
    from dashboard.cards import inbox_card as card
    from dashboard.cards import where_shown

    where = context.render_context.get(where_shown)
    if where is None:  # the page's first card
        where = context.render_context[where_shown] = where_shown()
    return card(
        item,
        can_act=bool(context.get("can_act")),
        csrf_token=context.get("csrf_token"),
        user=context.get("user"),
        where=where,
    )


@register.filter
def assistant(thread: Any) -> str:
    """The assistant (graph id) a thread runs, from its metadata ('' when unknown)."""
    from dashboard.data import assistant_of

    return assistant_of(thread)


@register.filter
def words(value: Any) -> str:
    """``in_progress`` -> ``in progress`` (status names as words)."""
    return str(value or "").replace("_", " ")


@register.filter
def run_actor(run: Any) -> str:
    """Who asked for a run: the operator who resumed or retried it ('' if not recorded).

    Reads only the run's own row (no owner join), so a list of runs costs one query.
    """
    meta = run.metadata if isinstance(getattr(run, "metadata", None), dict) else {}
    return str(meta.get("resumed_by") or meta.get("retried_by") or "")


@register.filter
def run_kind(run: Any) -> str:
    """What a run does: ``resume``, ``retry``, ``fork`` or ``new turn``."""
    kwargs = run.kwargs if isinstance(getattr(run, "kwargs", None), dict) else {}
    if run.command:
        return "resume"
    if kwargs.get("action") == "retry":
        return "retry"
    if run.checkpoint_id:
        return "fork"
    return "new turn"


@register.simple_tag(takes_context=True)
def timeline_rows(context: template.Context) -> SafeString:
    """The ``<li>`` rows of a thread's timeline (``entries``, newest first).

    Rendered here rather than with a template loop because a page holds 100 rows and the
    template engine's per-tag cost dominated the page's time. Every value that is not a
    number goes through ``escape``. Each row: version (loads the checkpoint panel with
    htmx, or ``?at=`` without), source, status, time, run, and a Rewind link for
    operators (not on the head).
    """
    from dashboard.data import thread_url

    thread = context["thread"]
    entries = context.get("entries") or []
    if not entries:
        return mark_safe('<li class="empty">No checkpoints yet.</li>')  # noqa: S308
    base = escape(thread_url(thread.pk))
    can_act = bool(context.get("can_act"))
    selected = context.get("selected_id") or ""
    head = thread.head_version
    tz = timezone.get_current_timezone()
    steps = context.get("steps") or {}
    events = context.get("events") or {}
    rows = []
    for e in entries:
        cid = escape(e.id)
        status = escape(e.status)
        source = escape(e.source) + (f" of v{int(e.forked_from)}" if e.forked_from else "")
        stamp = e.created_at.astimezone(tz)
        run = ""
        if e.run_id:
            rid = escape(e.run_id)
            run = f'<span class="run" title="run {rid}">run {rid[:8]}</span>'
        rewind = ""
        if can_act and e.version != head:
            url = f"{base}rewind/{cid}/"
            rewind = (
                f'<a class="rewind" href="{url}" hx-get="{url}" hx-target="#panel" '
                'hx-swap="outerHTML">Rewind…</a>'
            )
        chosen = " selected" if e.id == selected else ""
        fact = steps.get(e.version)
        wrote = took = ""
        if fact is not None and fact.wrote:
            wrote = f'<span class="wrote" title="what wrote it">{escape(fact.wrote)}</span> '
        if fact is not None and fact.took is not None:
            took = (
                f'<span class="took" title="how long the step took">{duration(fact.took)}</span> '
            )
        rows.append(
            f'<li class="cp cp-{status}{chosen}" data-version="{int(e.version)}" '
            f'data-status="{status}" data-source="{escape(e.source)}" tabindex="-1">'
            '<span class="dot" aria-hidden="true"></span>'
            f'<a class="v" href="?at={cid}" hx-get="{base}checkpoints/{cid}/" '
            f'hx-target="#panel" hx-swap="outerHTML" data-open>v{int(e.version)}</a> '
            f'<span class="src">{source}</span> {wrote}'
            f'<span class="status s-{status}">{status.replace("_", " ")}</span> {took}'
            f'<time datetime="{stamp.isoformat()}">{stamp:%H:%M:%S %Z}</time> {run} {rewind}</li>'
        )
        for event in reversed(events.get(e.id, [])):
            rows.append(_event_row(event, tz))
    return mark_safe("\n".join(rows))  # noqa: S308 - every value above is escaped


def duration(took: timedelta) -> str:
    """A step's duration: ``35 ms``, ``1.2 s``, ``3 min 4 s``."""
    seconds = took.total_seconds()
    if seconds < 1:
        return f"{max(0, round(seconds * 1000))} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(int(seconds), 60)
    return f"{minutes} min {rest} s"


_VERBS = {"approve": "approved", "reject": "rejected", "edit": "edited", "respond": "answered"}


def _event_row(event: Any, tz: Any) -> str:
    """One decision or action as a timeline row (every value escaped)."""
    from dashboard.data import state_diff

    details = event.details
    what: list[str] = []
    if event.action == "decide":
        for d in details.get("decisions") or []:
            verb = _VERBS.get(str(d.get("type")), str(d.get("type")))
            text = f"{verb} {d.get('name') or 'a call'}"
            if d.get("message"):
                text += f": “{d['message']}”"
            what.append(escape(text))
    elif event.action == "resume":
        what.append("answered " + escape(_short(details.get("value"))))
    elif event.action == "resolve":
        what.append("resolved it without running what waited")
    elif event.action == "goto":
        what.append("went on from " + escape(str(details.get("node") or "another node")))
    elif event.action == "rewind":
        what.append(f"rewound to v{int(details.get('version') or 0)}")
    elif event.action == "update_state":
        keys = ", ".join(str(k) for k in details.get("keys") or [])
        what.append("edited the state" + (f" ({escape(keys)})" if keys else ""))
    elif event.action == "retry":
        what.append("retried from the last checkpoint")
    else:
        what.append("sent input")
    diffs = []
    for edit in event.edits:
        lines = []
        for d in state_diff(edit["original"] or {}, edit["edited"] or {}):
            old = escape(json.dumps(d["old"], ensure_ascii=False)) if d["op"] != "added" else ""
            new = escape(json.dumps(d["new"], ensure_ascii=False)) if d["op"] != "removed" else ""
            lines.append(
                f'<tr class="d-{escape(d["op"])}"><th scope="row"><code>{escape(d["key"])}</code></th>'
                f'<td class="old">{old}</td><td class="new">{new}</td></tr>'
            )
        diffs.append(
            '<div class="table-scroll" role="region" tabindex="0" aria-label="Edited arguments">'
            f'<table class="argdiff" data-call="{escape(edit["call_id"])}">'
            f"<caption>{escape(edit['tool'])}: arguments edited</caption>"
            '<thead><tr><th scope="col">argument</th><th scope="col">original</th>'
            f'<th scope="col">edited</th></tr></thead><tbody>{"".join(lines)}</tbody></table></div>'
        )
    stamp = event.at.astimezone(tz)
    who = escape(event.actor or "someone")
    return (
        f'<li class="event ev-{escape(event.action)}" data-action="{escape(event.action)}">'
        f'<span class="who">{who}</span> <span class="verb">{"; ".join(what)}</span> '
        f'<span class="muted">via {escape(event.door)} · '
        f'<time datetime="{stamp.isoformat()}">{stamp:%H:%M:%S %Z}</time></span>{"".join(diffs)}</li>'
    )


def _short(value: Any, limit: int = 120) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 1] + "…"


@register.simple_tag(takes_context=True)
def thread_claim_strip(context: template.Context) -> SafeString:
    """The thread page's claim strip (see :mod:`dashboard.claims`)."""
    from django.utils.html import format_html

    from dashboard.claims import claim_strip

    token = context.get("csrf_token")
    token = str(token) if token else ""
    field = ""
    if token and token != "NOTPROVIDED":  # noqa: S105 - Django's sentinel, not a secret
        field = format_html('<input type="hidden" name="csrfmiddlewaretoken" value="{}">', token)
    return claim_strip(
        context["thread"].pk,
        context.get("claim"),
        user=context.get("user"),
        can_act=bool(context.get("can_act")),
        csrf_field=field,
        where="thread",
    )
