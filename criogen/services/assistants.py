"""Assistants: each registered graph has a default assistant; more may be configured.

The default assistant of graph ``g`` has the id ``uuid5(NAMESPACE_URL,
"criogen:assistant:" + g)``, so every process computes the same id without asking the
database; :func:`ensure_default_assistants` creates the rows on demand.
"""

from __future__ import annotations

import uuid

from criogen.registry import GraphNotFound, get_graph, graph_ids
from criogen.storage.models import Assistant

__all__ = ["default_assistant_id", "ensure_default_assistants", "resolve_assistant"]


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
        found = Assistant.objects.filter(assistant_id=key).first()
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
    assistant, _ = Assistant.objects.get_or_create(
        assistant_id=default_assistant_id(text),
        defaults={"graph_id": text, "name": text, "metadata": {"created_by": "system"}},
    )
    return assistant
