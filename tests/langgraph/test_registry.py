"""LangGraph graphs in the registry: named by module or by file, compiled or made by a
factory, from settings and from a ``langgraph.json``; each has a default assistant,
served over the REST API next to Criogen's own graphs."""

from __future__ import annotations

import json
import logging
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured

from criogen import registry
from criogen.engine.errors import GraphNotFound
from criogen.langgraph import CriogenSaver
from criogen.langgraph.graphs import CONFIG_ENV, LangGraphGraph, read_config
from tests.api.conftest import start_server, stop_server

AGENT = Path(__file__).parent / "agents" / "review.py"


@pytest.fixture
def graphs(settings: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    """``CRIOGEN_ASSISTANTS`` to add entries to (no langgraph.json unless a test sets
    one); the registry forgets what it loaded before and after."""
    monkeypatch.delenv(CONFIG_ENV, raising=False)
    settings.CRIOGEN_ASSISTANTS = dict(settings.CRIOGEN_ASSISTANTS)
    registry.reset()
    yield settings.CRIOGEN_ASSISTANTS
    registry.reset()


def _langgraph_json(folder: Path, **extra: Any) -> Path:
    """A project as LangGraph's server has it: agents/helpdesk.py and langgraph.json."""
    (folder / "agents").mkdir(parents=True, exist_ok=True)
    shutil.copy(AGENT, folder / "agents" / "helpdesk.py")
    config = folder / "langgraph.json"
    config.write_text(json.dumps({"graphs": {"helpdesk": "./agents/helpdesk.py:graph"}, **extra}))
    return config


@pytest.mark.parametrize(
    "target",
    [
        "tests.langgraph.agents.review:graph",
        "./tests/langgraph/agents/review.py:graph",
        "tests/langgraph/agents/review.py",
        "./tests/langgraph/agents/review.py:make_graph",
        "tests.langgraph.agents.review:make_graph_async",
    ],
)
def test_it_loads_a_langgraph_graph_with_criogens_checkpointer(
    graphs: dict[str, str], target: str
) -> None:
    graphs["reviewer"] = target

    loaded = registry.get_graph("reviewer")

    assert isinstance(loaded, LangGraphGraph)
    assert "reviewer" in registry.graph_ids()
    assert isinstance(loaded.compiled.checkpointer, CriogenSaver)
    assert loaded.compiled.checkpointer is registry.langgraph_saver()
    assert loaded.compiled.checkpointer.alias == registry.storage().alias  # type: ignore[attr-defined]
    assert loaded.graph.nodes == ["draft", "review", "publish"]
    assert loaded.graph.edges == {
        "__start__": ["draft"],
        "draft": ["review"],
        "publish": ["__end__"],
    }
    assert loaded.graph.routes == {"review": [(None, {"__end__": "__end__", "publish": "publish"})]}
    assert registry.get_graph("reviewer") is loaded  # once per process


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("tests.langgraph.agents.review:not_a_graph", "is a int, not a Workflow"),
        ("./tests/langgraph/agents/nowhere.py:graph", "cannot be loaded: no file"),
        ("tests.langgraph.agents.nowhere:graph", "cannot be loaded"),
        ("tests.langgraph.agents.review:missing", "cannot be loaded"),
    ],
)
def test_a_target_that_is_no_graph_says_why(
    graphs: dict[str, str], target: str, message: str
) -> None:
    graphs["broken"] = target
    with pytest.raises(GraphNotFound, match=message):
        registry.get_graph("broken")


def test_it_reads_the_graphs_of_a_langgraph_json(
    graphs: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    config = _langgraph_json(tmp_path, env=".env", dependencies=["."])
    monkeypatch.setenv(CONFIG_ENV, str(config))
    registry.reset()

    with caplog.at_level(logging.INFO, logger="criogen.langgraph.graphs"):
        ids = registry.graph_ids()
    loaded = registry.get_graph("helpdesk")

    assert ids == [*graphs, "helpdesk"]
    assert loaded.target == f"{tmp_path / 'agents' / 'helpdesk.py'}:graph"
    assert isinstance(loaded.compiled.checkpointer, CriogenSaver)
    logged = " ".join(r.getMessage() for r in caplog.records)
    assert "'env' is not used" in logged and "'dependencies' is not used" in logged


def test_a_settings_entry_wins_over_langgraph_json(
    graphs: dict[str, str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(CONFIG_ENV, str(_langgraph_json(tmp_path)))
    graphs["helpdesk"] = "criogen.examples.support:agent"
    registry.reset()

    assert registry.graph_ids().count("helpdesk") == 1
    assert not isinstance(registry.get_graph("helpdesk"), LangGraphGraph)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "cannot be read"),
        ("{not json", "is not JSON"),
        ('{"graphs": ["a.py:graph"]}', "'graphs' must be an object"),
        ('{"graphs": {"a": 3}}', "'graphs' must be an object"),
    ],
)
def test_a_langgraph_json_that_cannot_be_used_stops_the_start(
    graphs: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    content: str | None,
    message: str,
) -> None:
    config = tmp_path / "langgraph.json"
    if content is not None:
        config.write_text(content)
    monkeypatch.setenv(CONFIG_ENV, str(config))
    registry.reset()

    with pytest.raises(ImproperlyConfigured, match=message):
        registry.check_configuration()
    with pytest.raises(ImproperlyConfigured, match=CONFIG_ENV):
        registry.graph_ids()


def test_read_config_makes_file_paths_absolute_and_keeps_modules(tmp_path: Path) -> None:
    config = tmp_path / "deploy" / "langgraph.json"
    config.parent.mkdir()
    config.write_text(
        json.dumps({"graphs": {"a": "./agents/a.py:make", "b": "../b.py", "c": "pkg.mod:graph"}})
    )
    assert read_config(config) == {
        "a": f"{tmp_path / 'deploy' / 'agents' / 'a.py'}:make",
        "b": f"{tmp_path / 'b.py'}:graph",
        "c": "pkg.mod:graph",
    }


@pytest.mark.django_db
def test_each_langgraph_graph_has_a_default_assistant(graphs: dict[str, str]) -> None:
    from criogen.services.assistants import (
        default_assistant_id,
        ensure_default_assistants,
        resolve_assistant,
    )

    graphs["reviewer"] = "tests.langgraph.agents.review:graph"

    made = {a.graph_id: a for a in ensure_default_assistants()}
    by_graph_id = resolve_assistant(assistant_id="reviewer")

    assert made["reviewer"].assistant_id == default_assistant_id("reviewer")
    assert by_graph_id.assistant_id == default_assistant_id("reviewer")
    assert by_graph_id.graph_id == "reviewer"


@pytest.mark.slow
async def test_the_api_serves_a_langgraph_json_graph_as_an_assistant(tmp_path: Path) -> None:
    config = _langgraph_json(tmp_path / "project")
    server = start_server(
        f"sqlite://{tmp_path / 'api.db'}", tmp_path, CRIOGEN_LANGGRAPH_CONFIG=str(config)
    )
    client = server.client("olga")
    try:
        found = await client.assistants.search(graph_id="helpdesk")
        assistant = await client.assistants.get("helpdesk")
        drawing = await client.assistants.get_graph("helpdesk")
        schemas = await client.assistants.get_schemas("helpdesk")
        made = await client.assistants.create("helpdesk", name=f"helpdesk {uuid.uuid4()}")
    finally:
        await client.aclose()
        stop_server(server)

    assert [a["assistant_id"] for a in found] == [assistant["assistant_id"]]
    assert assistant["graph_id"] == "helpdesk"
    assert {n["id"] for n in drawing["nodes"]} == {
        "__start__",
        "draft",
        "review",
        "publish",
        "__end__",
    }
    assert {"source": "review", "target": "publish", "conditional": True} in drawing["edges"]
    assert schemas["graph_id"] == "helpdesk"
    assert made["graph_id"] == "helpdesk"
