"""LangGraph is optional: without it Criogen imports, starts and runs its own graphs,
and a LangGraph graph in its configuration stops the start with what to install.

Each test runs a fresh interpreter in which importing LangGraph fails, as it does
where the ``langgraph`` extra is not installed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HINT = 'pip install "criogen[langgraph]"'

WITHOUT_LANGGRAPH = """
import sys

class NoLangGraph:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("langgraph", "langchain_core", "langchain"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, NoLangGraph())
"""


def _run(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "criogen.settings",
        "PYTHONDONTWRITEBYTECODE": "1",
        **env,
    }
    if "CRIOGEN_LANGGRAPH_CONFIG" not in env:
        environment.pop("CRIOGEN_LANGGRAPH_CONFIG", None)
    return subprocess.run(
        [sys.executable, "-c", WITHOUT_LANGGRAPH + code],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_criogen_starts_and_runs_its_own_graphs_without_langgraph(tmp_path: Path) -> None:
    done = _run(
        """
import django
django.setup()
from django.core.management import call_command
call_command("migrate", verbosity=0)
from criogen import registry
import criogen.langgraph, criogen.services.runs, criogen.selectors, api.api
assert not criogen.langgraph.langgraph_installed()
graph = registry.get_graph("steps")
print("steps", graph.thread("t1").run({"n": 0}).state["n"])
try:
    from criogen.langgraph import CriogenSaver
except ImportError as exc:
    print("saver:", exc)
print("loaded:", sorted(m for m in sys.modules if m.split(".")[0] in ("langgraph", "langchain_core")))
""",
        DATABASE_URL=f"sqlite://{tmp_path / 'db.sqlite3'}",
    )
    assert done.returncode == 0, done.stderr
    assert "steps 3" in done.stdout
    assert (
        f"saver: criogen.langgraph.CriogenSaver: LangGraph is not installed: {HINT}" in done.stdout
    )
    assert "loaded: []" in done.stdout


def test_a_langgraph_json_without_langgraph_stops_the_start(tmp_path: Path) -> None:
    config = tmp_path / "langgraph.json"
    config.write_text(json.dumps({"graphs": {"helpdesk": "./agents/helpdesk.py:graph"}}))

    done = _run("import django\ndjango.setup()\n", CRIOGEN_LANGGRAPH_CONFIG=str(config))

    assert done.returncode != 0
    assert "ImproperlyConfigured" in done.stderr
    assert "names LangGraph graphs (helpdesk)" in done.stderr
    assert HINT in done.stderr


@pytest.mark.parametrize(
    "target", ["tests.langgraph.agents.review:graph", "./tests/langgraph/agents/review.py:graph"]
)
def test_a_langgraph_graph_in_settings_without_langgraph_stops_the_start(target: str) -> None:
    done = _run(
        f"""
import django
django.setup()
from django.conf import settings
from criogen import registry
settings.CRIOGEN_ASSISTANTS["reviewer"] = {target!r}
registry.reset()
registry.check_configuration()
"""
    )

    assert done.returncode != 0
    assert "ImproperlyConfigured: graph 'reviewer'" in done.stderr
    assert f"needs LangGraph: LangGraph is not installed: {HINT}" in done.stderr
