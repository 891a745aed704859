"""Notification settings: staff set each assistant's ``metadata.notify`` (a webhook URL
and e-mail addresses) from the dashboard.

The setting is checked and saved by the one assistant update service
(``criogen.services.assistants.update_assistant``, which runs ``check_notify``), so the
dashboard accepts exactly what the REST API does; this view only reads the form, keeps
the other metadata keys, and puts a refusal next to its field.
"""

from __future__ import annotations

import re
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from criogen.engine.errors import CriogenError
from criogen.selectors.assistants import search_assistants
from criogen.services.assistants import (
    ensure_default_assistants,
    resolve_assistant,
    update_assistant,
)
from dashboard.forms import FormError
from dashboard.views.common import HtmxHttpRequest, base_context

MAX_ASSISTANTS = 500
"""The page lists at most this many assistants (by name)."""

FIELDS = {
    "metadata.notify.webhook": "webhook",
    "metadata.notify.email": "email",
    "metadata.notify.claimed_overdue_seconds": "overdue",
}
"""The service's field names → the form's."""
LABELS = {
    "webhook": "Webhook URL",
    "email": "E-mail addresses",
    "overdue": "Overdue after a claim (seconds)",
}


def require_staff(request: HtmxHttpRequest) -> None:
    """Raise PermissionDenied (403) unless the user is staff (or a superuser): the
    notification settings are the site's, not an operator's."""
    if not (request.user.is_staff or request.user.is_superuser):
        raise PermissionDenied("Only staff can change notification settings.")


def notify_form(metadata: Any) -> dict[str, str]:
    """The form's text of an assistant's ``metadata.notify``."""
    notify = metadata.get("notify") if isinstance(metadata, dict) else None
    if not isinstance(notify, dict):
        return {"webhook": "", "email": "", "overdue": ""}
    email = notify.get("email") or []
    overdue = notify.get("claimed_overdue_seconds")
    return {
        "webhook": str(notify.get("webhook") or ""),
        "email": "\n".join([email] if isinstance(email, str) else [str(e) for e in email]),
        "overdue": "" if overdue is None else f"{overdue:g}",
    }


def read_notify(post: Any) -> dict[str, Any] | None:
    """``metadata.notify`` from the form: the webhook URL, the addresses (one a line, or
    separated by commas) and the seconds after a claim at which a suspension without a
    deadline is overdue; None when all are empty (notifications off). A number that does
    not parse is passed on as typed, for the service to refuse by name."""
    webhook = post.get("webhook", "").strip()
    emails = [e for e in re.split(r"[\s,;]+", post.get("email", "")) if e]
    typed = post.get("overdue", "").strip()
    if not webhook and not emails and not typed:
        return None
    try:
        overdue: Any = float(typed) if typed else None
    except ValueError:
        overdue = typed
    return {
        **({"webhook": webhook} if webhook else {}),
        **({"email": emails} if emails else {}),
        **({"claimed_overdue_seconds": overdue} if overdue is not None else {}),
    }


@require_http_methods(["GET", "POST"])
@login_required
def notifications(request: HtmxHttpRequest) -> HttpResponse:
    """Every assistant with its notification setting, each with a form to change it."""
    require_staff(request)
    error: FormError | None = None
    edited = request.POST.get("assistant", "") if request.method == "POST" else ""
    if request.method == "POST":
        try:
            row = _save(request, edited)
        except FormError as exc:
            error = exc
        else:
            setting = "off" if not (row.metadata or {}).get("notify") else "saved"
            messages.success(
                request,
                f"Notifications of {row.name or row.graph_id} {setting} (version {row.version}).",
            )
            return redirect(f"{request.path}#a-{row.assistant_id}")
    ensure_default_assistants()
    rows = search_assistants(sort_by="name", sort_order="asc", limit=MAX_ASSISTANTS)
    assistants = []
    for row in rows:
        key = str(row.assistant_id)
        typed = error is not None and key == edited
        assistants.append(
            {
                "row": row,
                "form": (
                    {
                        "webhook": request.POST.get("webhook", ""),
                        "email": request.POST.get("email", ""),
                        "overdue": request.POST.get("overdue", ""),
                    }
                    if typed
                    else notify_form(row.metadata)
                ),
                "version": request.POST.get("version") if typed else row.version,
                "error": error if typed else None,
            }
        )
    context = base_context(request, "notifications")
    context.update({"assistants": assistants, "error": error})
    return render(request, "dashboard/notifications.html", context, status=422 if error else 200)


def _save(request: HtmxHttpRequest, assistant_id: str) -> Any:
    """Save the posted setting through the assistant update service (FormError naming
    the field it refuses; the assistant's other metadata keys are kept)."""
    version = request.POST.get("version", "")
    if not version.isdigit():
        raise FormError("version", "Reload the page: the form lost the assistant's version.")
    try:
        current = resolve_assistant(assistant_id=assistant_id)
        metadata = {k: v for k, v in (current.metadata or {}).items() if k != "notify"}
        notify = read_notify(request.POST)
        if notify is not None:
            metadata["notify"] = notify
        return update_assistant(
            assistant_id=assistant_id, expected_version=int(version), metadata=metadata
        )
    except CriogenError as exc:
        field = str(exc.details.get("field") or "")
        name = FIELDS.get(field, field or "assistant")
        # "metadata.notify.webhook 'x' must start…" → "Webhook URL 'x' must start…"
        words = LABELS[name] + exc.message[len(field) :] if name in LABELS else exc.message
        raise FormError(name, words) from None
