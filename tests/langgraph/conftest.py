"""LangGraph tests need the ``langgraph`` extra (in the dev extras, so ``make test`` has
it); without it they are skipped, or fail in CI.

:func:`langgraph_project` and :func:`langgraph_server` make the project folder and the
live Criogen server that the tests driving graphs over the REST API share."""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from criogen.langgraph import INSTALL_HINT, langgraph_installed
from tests.api.conftest import Server, start_server, stop_server
from tests.conftest import IN_CI

if not langgraph_installed():
    if IN_CI:
        raise RuntimeError(f"CI=true and {INSTALL_HINT} (it is in the dev extras)")
    pytest.skip(INSTALL_HINT, allow_module_level=True)

AGENTS = Path(__file__).parent / "agents"


def langgraph_project(project: Path, graphs: Mapping[str, str]) -> Path:
    """``project/langgraph.json`` registering ``graphs``, as LangGraph's server reads it.

    ``graphs`` maps a graph id to ``file.py:attribute`` of a file of ``agents/`` here,
    which is copied to ``project/agents/``. Returns the path of ``langgraph.json``."""
    (project / "agents").mkdir(parents=True, exist_ok=True)
    registered = {}
    for graph_id, target in graphs.items():
        name, _, attribute = target.partition(":")
        shutil.copy(AGENTS / name, project / "agents" / name)
        registered[graph_id] = f"./agents/{name}:{attribute}"
    config = project / "langgraph.json"
    config.write_text(json.dumps({"graphs": registered}))
    return config


@contextlib.contextmanager
def langgraph_server(
    request: pytest.FixtureRequest, tmp: Path, graphs: Mapping[str, str], **settings: str
) -> Iterator[Server]:
    """Criogen's server (in-process runner) serving ``graphs`` (as
    :func:`langgraph_project` takes them, the project in ``tmp/project``) on the
    database ``request.param`` names: a new SQLite file in ``tmp``, or ``"postgres"``,
    the session's PostgreSQL database; ``settings`` go to its environment."""
    config = langgraph_project(tmp / "project", graphs)
    if request.param == "sqlite":
        url = f"sqlite://{tmp / 'api.db'}"
    else:
        url = str(request.getfixturevalue("postgres_url"))
    srv = start_server(url, tmp, CRIOGEN_LANGGRAPH_CONFIG=str(config), **settings)
    try:
        yield srv
    finally:
        stop_server(srv)
