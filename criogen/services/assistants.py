"""Assistants: each registered graph has a default assistant; more may be configured.

The default assistant of graph ``g`` has the id ``uuid5(NAMESPACE_URL,
"criogen:assistant:" + g)``, so every process computes the same id without asking the
database; :func:`ensure_default_assistants` creates the rows on demand. Creating,
changing and deleting assistants happens here (the REST ``/assistants`` door checks
that the caller is an operator first).
"""

from __future__ import annotations

import math
import uuid
from typing import Any

from django.db import IntegrityError, router, transaction
from django.db.models.fields.json import KeyTransform
from django.utils import timezone

from criogen.engine.errors import Conflict, InvalidArgument
from criogen.registry import GraphNotFound, get_graph, graph_ids
from criogen.services.notifications import check_notify
from criogen.storage.models import Assistant, Thread
from criogen.storage.rows import row_by_pk

__all__ = [
    "create_assistant",
    "default_assistant_id",
    "delete_assistant",
    "ensure_default_assistants",
    "resolve_assistant",
    "update_assistant",
]

EDITABLE = ("graph_id", "config", "context", "metadata", "name", "description")
"""The fields :func:`update_assistant` replaces."""


def default_assistant_id(graph_id: str) -> uuid.UUID:
    """The id of ``graph_id``'s default assistant."""
    return uuid.uuid5(uuid.NAMESPACE_URL, "criogen:assistant:" + graph_id)


def ensure_default_assistants() -> list[Assistant]:
    """Create the default assistant of every registered graph that has none; return all
    the default assistants, in settings order."""
    out = []
    for graph_id in graph_ids():
        assistant, _ = Assistant.objects.get_or_create(
            assistant_id=default_assistant_id(graph_id),
            defaults={"graph_id": graph_id, "name": graph_id, "metadata": {"created_by": "system"}},
        )
        out.append(assistant)
    return out


def resolve_assistant(*, assistant_id: str) -> Assistant:
    """The assistant named by ``assistant_id``: an assistant's UUID, or a graph id
    (its default assistant, created if needed).

    Raises:
        GraphNotFound: neither an assistant nor a registered graph has this id.
    """
    text = str(assistant_id)
    try:
        key = uuid.UUID(text)
    except ValueError:
        key = None
    if key is not None:
        found = _assistant(key)
        if found is not None:
            return found
        for graph_id in graph_ids():
            if default_assistant_id(graph_id) == key:
                ensure_default_assistants()
                return Assistant.objects.get(assistant_id=key)
        raise GraphNotFound(
            f"no assistant or graph has the id {text!r}.", assistant_id=text, graph_id=text
        )
    get_graph(text)  # raises GraphNotFound for an unknown graph id
    found = _assistant(default_assistant_id(text))
    if found is not None:
        return found
    assistant, _ = Assistant.objects.get_or_create(
        assistant_id=default_assistant_id(text),
        defaults={"graph_id": text, "name": text, "metadata": {"created_by": "system"}},
    )
    return assistant


def _assistant(key: uuid.UUID) -> Assistant | None:
    """The assistant with this id, or None: every run resolves its assistant, and the
    ORM compiled that query anew each time (bench/NOTES.md, "A run's row in one
    statement")."""
    return row_by_pk(Assistant, router.db_for_read(Assistant), key)


def _insert_assistant(**fields: Any) -> Assistant:
    try:
        with transaction.atomic():
            return Assistant.objects.create(**fields)
    except IntegrityError:
        raise Conflict(
            f"assistant {fields['assistant_id']} already exists.", field="assistant_id"
        ) from None


RUN_TIMEOUT_KEY = "run_timeout_seconds"
"""The key of ``config.configurable`` (a run's or its assistant's) that sets the run's
time limit in seconds."""


def check_run_timeout(config: Any, field: str = "config") -> float | None:
    """The time limit a ``config`` sets (``configurable.run_timeout_seconds``), or None
    when it sets none; InvalidArgument naming the field for anything but a number of
    seconds above 0."""
    configurable = config.get("configurable") if isinstance(config, dict) else None
    if not isinstance(configurable, dict) or configurable.get(RUN_TIMEOUT_KEY) is None:
        return None
    value = configurable[RUN_TIMEOUT_KEY]
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        name = f"{field}.configurable.{RUN_TIMEOUT_KEY}"
        raise InvalidArgument(f"{name} is {value!r}; use a number of seconds above 0.", field=name)
    return float(value)


def create_assistant(
    *,
    graph_id: str,
    assistant_id: str | None = None,
    name: str | None = None,
    description: str | None = None,
    config: dict[str, Any] | None = None,
    context: dict[str, Any] | None = None,
    metadata: dict[str, Any] | None = None,
    if_exists: str | None = None,
    by: str | None = None,
) -> Assistant:
    """A new assistant of the registered graph ``graph_id`` (GraphNotFound otherwise).

    ``assistant_id``: a UUID (InvalidArgument otherwise), or None for a new one; an id
    that exists is a Conflict, unless ``if_exists="do_nothing"`` (then that assistant
    comes back unchanged). ``by`` is recorded as ``metadata.created_by``.
    """
    get_graph(graph_id)  # GraphNotFound (404) for an unknown graph
    check_notify(metadata)  # InvalidArgument (422) naming metadata.notify
    check_run_timeout(config)
    key = uuid.uuid4()
    if assistant_id is not None:
        try:
            key = uuid.UUID(assistant_id)
        except ValueError:
            raise InvalidArgument(
                f"assistant_id {assistant_id!r} is not a UUID.", field="assistant_id"
            ) from None
    with transaction.atomic():
        existing = Assistant.objects.filter(assistant_id=key).first()
        if existing is not None:
            if if_exists == "do_nothing":
                return existing
            raise Conflict(f"assistant {key} already exists.", field="assistant_id")
        return _insert_assistant(
            assistant_id=key,
            graph_id=graph_id,
            name=name or graph_id,
            description=description or "",
            config=config or {},
            context=context or {},
            metadata={**(metadata or {}), **({"created_by": by} if by else {})},
        )


def update_assistant(
    *, assistant_id: str, expected_version: int | None = None, **fields: Any
) -> Assistant:
    """Replace the given :data:`EDITABLE` fields (None: keep) of the assistant named by
    ``assistant_id`` (as :func:`resolve_assistant` reads it); its version goes up by one.

    ``expected_version``: the version the caller edited (a form that replaces the
    whole metadata); Conflict (409) if another update came first, and nothing changes.
    """
    if fields.get("graph_id"):
        get_graph(fields["graph_id"])  # GraphNotFound (404) for an unknown graph
    check_notify(fields.get("metadata"))  # InvalidArgument (422) naming metadata.notify
    check_run_timeout(fields.get("config"))
    with transaction.atomic():
        # Locked: two concurrent updates each raise the version once.
        row = Assistant.objects.select_for_update().get(
            pk=resolve_assistant(assistant_id=assistant_id).pk
        )
        if expected_version is not None and row.version != expected_version:
            raise Conflict(
                f"assistant {row.assistant_id} changed since version {expected_version} "
                f"(it is at version {row.version}): reload it and edit again.",
                field="version",
            )
        for name in EDITABLE:
            value = fields.get(name)
            if value is not None:
                setattr(row, name, value)
        row.version += 1
        row.updated_at = timezone.now()
        row.save()
    return row


def delete_assistant(
    *, assistant_id: str, delete_threads: bool = False, by: str | None = None, door: str = "python"
) -> None:
    """Delete the assistant and its runs; with ``delete_threads`` also the threads whose
    last assistant it was (each through :func:`criogen.services.threads.delete_thread`,
    audited as ``delete`` by ``by`` from ``door``)."""
    from criogen.services.threads import delete_thread

    row = resolve_assistant(assistant_id=assistant_id)
    if delete_threads:
        key = str(row.assistant_id)
        ids = list(
            Thread.objects.alias(_a=KeyTransform("assistant_id", "metadata"))
            .filter(_a=key)
            .values_list("id", flat=True)
        )
        for tid in ids:
            delete_thread(thread_id=tid, by=by, door=door)
    row.delete()
