"""The assistants registry and default assistants."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from criogen import registry
from criogen.engine.workflows import CompiledWorkflow
from criogen.registry import GraphNotFound, get_graph
from criogen.services.assistants import (
    default_assistant_id,
    ensure_default_assistants,
    resolve_assistant,
)
from criogen.storage.models import Assistant


def test_the_default_assistant_id_is_a_stable_uuid5_of_the_graph_id() -> None:
    assert default_assistant_id("steps") == uuid.uuid5(
        uuid.NAMESPACE_URL, "criogen:assistant:steps"
    )


@pytest.mark.django_db
def test_it_creates_the_default_assistants_once(settings: Any) -> None:
    first = ensure_default_assistants()
    again = ensure_default_assistants()

    assert [a.graph_id for a in first] == list(settings.CRIOGEN_ASSISTANTS)
    assert [a.pk for a in again] == [a.pk for a in first]
    assert Assistant.objects.count() == len(settings.CRIOGEN_ASSISTANTS)


@pytest.mark.django_db
def test_it_resolves_a_graph_id_or_an_assistant_id_to_an_assistant() -> None:
    by_graph = resolve_assistant(assistant_id="hitl")
    by_id = resolve_assistant(assistant_id=str(default_assistant_id("hitl")))
    custom = Assistant.objects.create(graph_id="steps", name="custom")

    assert by_graph.pk == by_id.pk == default_assistant_id("hitl")
    assert resolve_assistant(assistant_id=str(custom.pk)).name == "custom"


@pytest.mark.django_db
def test_the_graph_is_loaded_once_and_bound_to_the_project_database(settings: object) -> None:
    registry.reset()
    graph = get_graph("steps")

    assert isinstance(graph, CompiledWorkflow)
    assert graph is get_graph("steps")
    assert graph.storage is registry.storage()
    assert graph.storage.url == "django://default"


def test_an_unknown_or_broken_graph_is_graph_not_found(settings: object) -> None:
    settings.CRIOGEN_ASSISTANTS = {"broken": "criogen.examples.nothing:workflow"}  # type: ignore[attr-defined]
    registry.reset()
    try:
        for graph_id in ("missing", "broken"):
            with pytest.raises(GraphNotFound) as caught:
                get_graph(graph_id)
            assert caught.value.code == "graph_not_found"
            assert caught.value.details["graph_id"] == graph_id
    finally:
        registry.reset()
