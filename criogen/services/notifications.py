"""Notifications: tell people when a thread's head becomes a suspension.

An assistant opts in with ``metadata["notify"]`` (read like ``metadata["deciders"]``
by :func:`criogen.services.runs.deciders_of`)::

    {"notify": {"webhook": "https://hooks.slack.com/services/…",
                "email": ["ops@example.com"]}}

- ``webhook``: an http(s) URL; it receives a Slack-compatible incoming-webhook payload
  (``{"text": …}``, with a link to the thread's dashboard page) plus Criogen's own
  fields (``event``, ``thread_id``, ``run_id``, ``assistant_id``, ``graph_id``,
  ``checkpoint_id``, ``interrupts``, ``url``);
- ``email``: one address or a list of them (Django's mail settings).

When a run ends with its thread suspended, the runner calls
:func:`notify_suspension` once, after the run's end committed, for every door (API,
dashboard, Python, crons). The notification is sent at most once per suspension: a
:class:`~criogen.storage.models.DeadlineFiring` row of kind ``notify`` (unique per
checkpoint) is inserted first, then the calls go through :mod:`criogen.outbound`
(address policy, deadline, retries with backoff, an ``OutboundAttempt`` row per
attempt) and the audit log gets a ``notify`` event. A deadline reminder
(:mod:`criogen.services.deadlines`) also reaches these channels
(:func:`notify_reminder`).

Links are absolute when ``CRIOGEN_PUBLIC_URL`` names where the dashboard is served
(``https://criogen.example.com``); otherwise they are paths.
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.urls import NoReverseMatch, reverse

from criogen import outbound
from criogen.engine.errors import InvalidArgument
from criogen.registry import storage
from criogen.selectors.claims import claim_of
from criogen.storage.models import Assistant, DeadlineFiring, Run

__all__ = ["check_notify", "notify_of", "notify_reminder", "notify_suspension"]

logger = logging.getLogger("criogen.services.notifications")

SYSTEM = "system"
_FIELD = "metadata.notify"
_KEYS = ("webhook", "email")


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
    unknown = sorted(set(notify) - set(_KEYS))
    if unknown:
        raise InvalidArgument(
            f"{_FIELD} has unknown keys {unknown}: use 'webhook' and/or 'email'.", field=_FIELD
        )
    outbound.check_webhook_url(notify.get("webhook"), field=f"{_FIELD}.webhook")
    _emails(notify.get("email"))


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
    Returns whether notifications were sent (queued)."""
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
    try:
        with transaction.atomic():
            DeadlineFiring.objects.create(
                thread_id=run.thread_id, checkpoint_id=head.id, interrupt_id="", kind="notify"
            )
    except IntegrityError:
        return False  # already notified of this suspension
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
        "thread_id": run.thread_id,
        "run_id": str(run.pk),
        "assistant_id": str(run.assistant_id),
        "graph_id": run.graph_id,
        "checkpoint_id": head.id,
        "interrupts": head.interrupts,
        "url": url,
    }
    storage().record_audit(
        "notify",
        thread_id=run.thread_id,
        actor=SYSTEM,
        details={
            "checkpoint_id": head.id,
            "run_id": str(run.pk),
            "webhook": bool(notify["webhook"]),
            "email": notify["email"],
        },
    )
    # Audited first: the log tells of every notification whose calls may follow.
    _send(notify, payload=payload, subject=subject, body=body, run_id=run.pk, head=head)
    return True


def notify_reminder(head: Any, interrupt: dict[str, Any], subject: str, body: str) -> None:
    """Send a deadline reminder of ``head`` to the notification channels of the
    assistant whose run suspended it too (the reminder's own once-row guards it); when
    an operator claimed the suspension, the message names them and their address is
    added to the e-mail's."""
    try:
        run = Run.objects.select_related("assistant", "thread").filter(pk=head.run_id).first()
    except (ValueError, ValidationError):  # not a run's id (a write by hand)
        return
    notify = notify_of(run.assistant) if run is not None else None
    if notify is None:
        return
    url = thread_url(head.thread_id)
    recipients = list(notify["email"])
    claim = claim_of(run.thread) if run.thread is not None else None
    if claim is not None:
        # A claimed suspension waits past its reminder: its holder hears of it too.
        holder = claim.user.get_username()
        subject = f"{subject}, claimed by {holder} since {claim.since:%Y-%m-%d %H:%M} UTC"
        if claim.user.email and claim.user.email not in recipients:
            recipients.append(claim.user.email)
    payload = {
        "text": f"{subject}: <{url}|open the thread>",
        "event": "reminder",
        "claimed_by": claim.user.get_username() if claim is not None else None,
        "thread_id": head.thread_id,
        "run_id": str(run.pk),
        "assistant_id": str(run.assistant_id),
        "graph_id": run.graph_id,
        "checkpoint_id": head.id,
        "interrupts": [interrupt],
        "url": url,
    }
    _send(
        {**notify, "email": recipients},
        payload=payload,
        subject=subject,
        body=f"{body}Decide here: {url}\n",
        run_id=run.pk,
        head=head,
    )


def _send(
    notify: dict[str, Any],
    *,
    payload: dict[str, Any],
    subject: str,
    body: str,
    run_id: Any,
    head: Any,
) -> None:
    if notify["webhook"]:
        outbound.send_webhook(
            kind="notify",
            url=notify["webhook"],
            payload=payload,
            run_id=run_id,
            thread_id=head.thread_id,
        )
    if notify["email"]:
        outbound.send_email(
            subject=subject, body=body, recipients=notify["email"], thread_id=head.thread_id
        )
