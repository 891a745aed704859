"""Record what LangGraph's own server answers for the graphs of tests/langgraph, so that
``tests/langgraph/test_server_shapes.py`` compares Criogen with it without a network.

    .venv/bin/python bench/record_langgraph_server.py     # writes tests/langgraph/data/

It starts ``langgraph dev`` (the in-memory server of ``langgraph-cli[inmem]``, in
``bench/.venvs/langgraph`` as ``bench/http_compare.py`` installs it) on
``tests/langgraph/agents/nested.py`` (``nested``) and ``review.py`` (``helpdesk``), and
asks it with ``langgraph_sdk``: the ``nested`` assistant's schemas, drawing (with and
without ``xray``) and subgraphs; a ``helpdesk`` thread's state at its interrupt and its
history after the resume.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _servers import LANGGRAPH_REQUIREMENTS, langgraph_dev  # noqa: E402 - bench/_servers.py
from _venv import ensure_venv  # noqa: E402 - bench/_venv.py, next to this file

ROOT = Path(__file__).resolve().parent.parent
AGENTS = ROOT / "tests" / "langgraph" / "agents"
OUT = ROOT / "tests" / "langgraph" / "data" / "langgraph_server.json"
START = {"topic": "otters", "notes": [], "approved": False}


def ask(url: str) -> dict[str, Any]:
    from langgraph_sdk import get_sync_client

    client = get_sync_client(url=url, api_key=None)
    # LangGraph's server takes an assistant's UUID only, not its graph id.
    nested = next(a["assistant_id"] for a in client.assistants.search(graph_id="nested"))
    out: dict[str, Any] = {
        "schemas": client.assistants.get_schemas(nested),
        "graph": client.assistants.get_graph(nested),
        "graph_xray": client.assistants.get_graph(nested, xray=True),
        "subgraphs": client.assistants.get_subgraphs(nested),
        "subgraphs_recurse": client.assistants.get_subgraphs(nested, recurse=True),
        "subgraphs_ns": client.assistants.get_subgraphs(nested, namespace="draft"),
    }
    thread = client.threads.create()["thread_id"]
    client.runs.wait(thread, "helpdesk", input=START)
    out["waiting"] = client.threads.get_state(thread)
    client.runs.wait(thread, "helpdesk", command={"resume": "yes"})
    out["history"] = client.threads.get_history(thread, limit=100)
    return out


def main() -> int:
    python = ensure_venv("langgraph", LANGGRAPH_REQUIREMENTS, print)
    versions = subprocess.run(  # noqa: S603 - the venv's Python, our arguments
        [str(python), "-c", "import importlib.metadata as m; print(m.version('langgraph'))"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="criogen-record-") as tmp:
        home = Path(tmp)
        for name in ("nested.py", "review.py"):
            shutil.copy(AGENTS / name, home / name)
        graphs = {"nested": "./nested.py:graph", "helpdesk": "./review.py:graph"}
        config = {"dependencies": ["."], "graphs": graphs}
        (home / "langgraph.json").write_text(json.dumps(config))
        with langgraph_dev(python, home, home) as url:
            answers = ask(url)
    recorded = {
        "recorded_with": (
            f"langgraph dev ({', '.join(LANGGRAPH_REQUIREMENTS)}; langgraph {versions}; "
            f"langgraph-sdk {metadata.version('langgraph-sdk')}): "
            "bench/record_langgraph_server.py"
        ),
        **answers,
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(recorded, indent=1) + "\n")
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
