"""Notifications: tell people when a thread's head becomes a suspension, and when a
claimed suspension waits past its deadline.

An assistant opts in with ``metadata["notify"]`` (read like ``metadata["deciders"]``
by :func:`criogen.services.runs.deciders_of`)::

    {"notify": {"webhook": "https://hooks.slack.com/services/…",
                "email": ["ops@example.com"],
                "claimed_overdue_seconds": 3600}}

- ``webhook``: an http(s) URL; it receives a Slack-compatible incoming-webhook payload
  (``{"text": …}``, with a link to the thread's dashboard page) plus Criogen's own
  fields (``event``, ``thread_id``, ``run_id``, ``assistant_id``, ``graph_id``,
  ``checkpoint_id``, ``interrupts``, ``url``);
- ``email``: one address or a list of them (Django's mail settings);
- ``claimed_overdue_seconds`` (optional): for a suspension that declares no
  ``deadline``, how long after it was claimed it counts as overdue (without it, such a
  suspension is never overdue).

What is sent, each at most once:

- ``suspension``: when a run ends with its thread suspended, the runner calls
  :func:`notify_suspension` after the run's end committed, for every door (API,
  dashboard, Python, crons);
- ``reminder``: a deadline reminder (:mod:`criogen.services.deadlines`) reaches these
  channels too (:func:`notify_reminder`);
- ``overdue``: when a suspension someone claimed passes its deadline (or, without one,
  ``claimed_overdue_seconds`` after the claim), :func:`notify_overdue` names the holder
  and since when; the holder's own address gets the e-mail too.

Each notification is one transaction: the :class:`~criogen.storage.models.DeadlineFiring`
row that makes it happen once (unique per checkpoint, interrupt and kind), its ``notify``
audit event and the enqueueing of its calls commit together, or none of them does; the
calls leave after the commit, through :mod:`criogen.outbound` (address policy, deadline,
retries with backoff, an ``OutboundAttempt`` row per attempt).

Links are absolute when ``CRIOGEN_PUBLIC_URL`` names where the dashboard is served
(``https://criogen.example.com``); otherwise they are paths.
"""

from __future__ import annotations

import json
import logging
import math
from datetime import datetime
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.urls import NoReverseMatch, reverse

from criogen import outbound
from criogen.engine.errors import InvalidArgument
from criogen.registry import storage
from criogen.selectors.claims import claim_of
from criogen.storage.models import Assistant, Claim, DeadlineFiring, Run

__all__ = [
    "check_notify",
    "claimed_overdue_seconds",
    "fire_once",
    "notify_of",
    "notify_overdue",
    "notify_reminder",
    "notify_suspension",
]

logger = logging.getLogger("criogen.services.notifications")

SYSTEM = "system"
_FIELD = "metadata.notify"
_KEYS = ("webhook", "email", "claimed_overdue_seconds")


def check_notify(metadata: Any) -> None:
    """Raise InvalidArgument (422) naming the field when ``metadata["notify"]`` is not a
    valid notification setting (assistant create and update call it)."""
    if not isinstance(metadata, dict) or metadata.get("notify") is None:
        return
    notify = metadata["notify"]
    if not isinstance(notify, dict):
        raise InvalidArgument(
            f"{_FIELD} must be an object with 'webhook' and/or 'email'.", field=_FIELD
        )
    overdue = notify.get("claimed_overdue_seconds")
    if overdue is not None and not _is_seconds(overdue):
        field = f"{_FIELD}.claimed_overdue_seconds"
        raise InvalidArgument(f"{field} must be a positive number of seconds.", field=field)
    unknown = sorted(set(notify) - set(_KEYS))
    if unknown:
        raise InvalidArgument(
            f"{_FIELD} has unknown keys {unknown}: use 'webhook' and/or 'email' (and "
            "'claimed_overdue_seconds').",
            field=_FIELD,
        )
    outbound.check_webhook_url(notify.get("webhook"), field=f"{_FIELD}.webhook")
    _emails(notify.get("email"))


def _is_seconds(value: Any) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value > 0
    )


def _emails(value: Any) -> list[str]:
    from django.core.validators import validate_email

    field = f"{_FIELD}.email"
    if value is None or value == "":
        return []
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or len(items) > 50:
        raise InvalidArgument(f"{field} must be an address or a list of addresses.", field=field)
    for item in items:
        try:
            validate_email(item if isinstance(item, str) else "")
        except ValidationError:
            raise InvalidArgument(
                f"{field}: {item!r} is not an e-mail address.", field=field
            ) from None
    return list(items)


def notify_of(assistant: Assistant) -> dict[str, Any] | None:
    """``{"webhook": url | None, "email": [addresses]}`` from the assistant's
    ``metadata["notify"]``, or None when it has none (or an invalid one, logged)."""
    metadata = assistant.metadata or {}
    if not metadata.get("notify"):
        return None
    try:
        check_notify(metadata)
    except InvalidArgument as exc:
        logger.warning("assistant %s: ignoring %s (%s)", assistant.pk, _FIELD, exc.message)
        return None
    notify = metadata["notify"]
    found = {"webhook": notify.get("webhook") or None, "email": _emails(notify.get("email"))}
    return found if found["webhook"] or found["email"] else None


def thread_url(thread_id: str) -> str:
    """The thread's dashboard page, absolute when ``CRIOGEN_PUBLIC_URL`` is set."""
    try:
        path = reverse("dashboard:thread", kwargs={"thread_id": thread_id})
    except NoReverseMatch:
        path = f"/ui/threads/{thread_id}/"
    base = str(getattr(settings, "CRIOGEN_PUBLIC_URL", "") or "").rstrip("/")
    return f"{base}{path}"


def notify_suspension(run_id: Any) -> bool:
    """Notify the channels of the assistant of run ``run_id`` that its thread is now
    suspended, once per suspension. Call it after the run's end committed; never raises.
    Returns whether notifications were queued."""
    try:
        return _notify_suspension(str(run_id))
    except Exception:
        logger.exception("could not notify of the suspension left by run %s", run_id)
        return False


def _notify_suspension(run_id: str) -> bool:
    run = Run.objects.select_related("assistant").filter(pk=run_id).first()
    if run is None or run.thread_id is None:
        return False
    notify = notify_of(run.assistant)
    if notify is None:
        return False
    head = storage().head(run.thread_id)
    if head is None or head.status != "suspended":
        return False
    reasons = ", ".join(sorted({str(i.get("reason") or "input") for i in head.interrupts}))
    url = thread_url(run.thread_id)
    name = run.assistant.name or run.graph_id
    subject = f"Waiting for a decision: {reasons or 'input'} ({name}, thread {run.thread_id})"
    body = (
        f"Thread {run.thread_id} of {name} ({run.graph_id}) is suspended since "
        f"{head.created_at:%Y-%m-%d %H:%M} UTC, waiting for: {reasons or 'input'}.\n"
        f"Decide here: {url}\n"
    )
    payload = {
        "text": f"{subject}: <{url}|open the thread>",
        "event": "suspension",
        **_about(run, head, head.interrupts, url),
    }
    return _notify_once(
        notify,
        head=head,
        interrupt_id="",
        kind="notify",
        payload=payload,
        subject=subject,
        body=body,
        run=run,
    )


def notify_reminder(head: Any, interrupt: dict[str, Any], subject: str, body: str) -> None:
    """Send a deadline reminder of ``head`` to the notification channels of the
    assistant whose run suspended it too. Call it inside the reminder's transaction
    (its once-row and audit event guard it; the calls leave when it commits). When an
    operator claimed the suspension, the message names them and their address is added
    to the e-mail's."""
    run = _run_of(head)
    notify = notify_of(run.assistant) if run is not None else None
    if run is None or notify is None:
        return
    url = thread_url(head.thread_id)
    claim = claim_of(run.thread) if run.thread is not None else None
    if claim is not None:
        # A claimed suspension waits past its reminder: its holder hears of it too.
        subject = f"{subject}, {_held(claim)}"
        notify = _with_holder(notify, claim)
    payload = {
        "text": f"{subject}: <{url}|open the thread>",
        "event": "reminder",
        "claimed_by": claim.user.get_username() if claim is not None else None,
        **_about(run, head, [interrupt], url),
    }
    _send(notify, payload=payload, subject=subject, body=f"{body}Decide here: {url}\n", run=run)


def notify_overdue(
    head: Any, interrupt: dict[str, Any] | None, claim: Claim, *, due: datetime
) -> bool:
    """Tell the assistant's channels, and the holder, that the suspension ``head``
    which ``claim`` holds waits past ``due``: the ``deadline`` of ``interrupt``, or
    (``interrupt`` None: the suspension declares none) the assistant's
    ``claimed_overdue_seconds`` after the claim. Once per suspension and interrupt;
    the once-row, the audit event and the calls' enqueueing commit together. Returns
    whether it was queued now (False: no channels, or already told)."""
    run = _run_of(head)
    notify = notify_of(run.assistant) if run is not None else None
    if run is None or notify is None:
        return False
    url = thread_url(head.thread_id)
    interrupts = [interrupt] if interrupt is not None else list(head.interrupts)
    reasons = ", ".join(sorted({str(i.get("reason") or "input") for i in interrupts}))
    name = run.assistant.name or run.graph_id
    outcome = interrupt.get("default") if interrupt is not None else None
    then = (
        f"; the default {json.dumps(outcome)} applies now"
        if outcome not in (None, "wait")
        else "; it is still waiting"
    )
    subject = f"Overdue: {reasons or 'input'} ({name}, thread {head.thread_id}), {_held(claim)}"
    body = (
        f"Thread {head.thread_id} of {name} ({run.graph_id}) has been waiting since "
        f"{head.created_at:%Y-%m-%d %H:%M} UTC for: {reasons or 'input'}.\n"
        f"{_held(claim).capitalize()}; it was due at {due:%Y-%m-%d %H:%M} UTC{then}.\n"
        f"Decide here: {url}\n"
    )
    payload = {
        "text": f"{subject}: <{url}|open the thread>",
        "event": "overdue",
        "claimed_by": claim.user.get_username(),
        "claimed_since": claim.since.isoformat(),
        "due": due.isoformat(),
        "default": outcome,
        **_about(run, head, interrupts, url),
    }
    return _notify_once(
        _with_holder(notify, claim),
        head=head,
        interrupt_id=str(interrupt["id"]) if interrupt is not None else "",
        kind="overdue",
        payload=payload,
        subject=subject,
        body=body,
        run=run,
        audit={"claimed_by": claim.user.get_username(), "due": due.isoformat()},
    )


def claimed_overdue_seconds(assistant: Assistant) -> float | None:
    """The assistant's ``metadata.notify.claimed_overdue_seconds``, or None."""
    notify = (assistant.metadata or {}).get("notify")
    value = notify.get("claimed_overdue_seconds") if isinstance(notify, dict) else None
    return float(value) if _is_seconds(value) else None


# -- the shared steps -------------------------------------------------------------------------


def _run_of(head: Any) -> Run | None:
    """The run that wrote ``head``, with its assistant and thread (None: not a run's
    checkpoint, e.g. a write by hand)."""
    try:
        return Run.objects.select_related("assistant", "thread").filter(pk=head.run_id).first()
    except (ValueError, ValidationError):
        return None


def _held(claim: Claim) -> str:
    return f"claimed by {claim.user.get_username()} since {claim.since:%Y-%m-%d %H:%M} UTC"


def _with_holder(notify: dict[str, Any], claim: Claim) -> dict[str, Any]:
    """``notify`` with the claim holder's address added to the e-mail's."""
    email = claim.user.email
    if not email or email in notify["email"]:
        return notify
    return {**notify, "email": [*notify["email"], email]}


def _about(run: Run, head: Any, interrupts: Any, url: str) -> dict[str, Any]:
    """The payload fields every notification carries."""
    return {
        "thread_id": head.thread_id,
        "run_id": str(run.pk),
        "assistant_id": str(run.assistant_id),
        "graph_id": run.graph_id,
        "checkpoint_id": head.id,
        "interrupts": list(interrupts),
        "url": url,
    }


def _notify_once(
    notify: dict[str, Any],
    *,
    head: Any,
    interrupt_id: str,
    kind: str,
    payload: dict[str, Any],
    subject: str,
    body: str,
    run: Run,
    audit: dict[str, Any] | None = None,
) -> bool:
    """The once-row, the ``notify`` audit event and the calls, in one transaction: a
    failure anywhere before the commit leaves none of them, so the next try notifies
    (once); the calls leave only after the commit. False when it was done before."""
    with transaction.atomic():
        if not fire_once(head, interrupt_id, kind):
            return False  # already notified
        storage().record_audit(
            "notify",
            thread_id=head.thread_id,
            actor=SYSTEM,
            details={
                "event": payload["event"],
                "checkpoint_id": head.id,
                "run_id": str(run.pk),
                **({"interrupt_id": interrupt_id} if interrupt_id else {}),
                **(audit or {}),
                "webhook": bool(notify["webhook"]),
                "email": notify["email"],
            },
        )
        _send(notify, payload=payload, subject=subject, body=body, run=run)
    return True


def fire_once(head: Any, interrupt_id: str, kind: str) -> bool:
    """Insert the :class:`~criogen.storage.models.DeadlineFiring` row of ``kind`` for
    the suspension ``head`` (and ``interrupt_id``) inside the caller's transaction;
    False when it exists (already fired). What the firing writes next belongs in the
    same transaction, so that all of it commits or none."""
    try:
        with transaction.atomic():  # a savepoint: a refusal leaves the caller's usable
            DeadlineFiring.objects.create(
                thread_id=head.thread_id,
                checkpoint_id=head.id,
                interrupt_id=interrupt_id,
                kind=kind,
            )
    except IntegrityError:
        return False
    return True


def _send(
    notify: dict[str, Any], *, payload: dict[str, Any], subject: str, body: str, run: Run
) -> None:
    # outbound queues the calls when the caller's transaction commits (at once outside one).
    if notify["webhook"]:
        outbound.send_webhook(
            kind="notify",
            url=notify["webhook"],
            payload=payload,
            run_id=run.pk,
            thread_id=payload["thread_id"],
        )
    if notify["email"]:
        outbound.send_email(
            subject=subject, body=body, recipients=notify["email"], thread_id=payload["thread_id"]
        )
