"""Record what LangGraph's own server streams for the stream tests' requests.

    .venv/bin/python bench/stream_reference.py            # ~1 minute after the venv

Starts ``langgraph dev`` (``bench/.venvs/langgraph``, made by :mod:`_venv` on first
use, as ``http_compare.py`` does) serving ``tests/langgraph/agents/streaming.py`` as
``streamer``, makes each request of ``tests/langgraph/stream_cases.py`` with the
official ``langgraph_sdk``, and writes the normalised events to
``tests/langgraph/streams_reference.json``, which ``tests/langgraph/test_streams.py``
compares Criogen's streams with (CI has no network, so it reads the recording).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _servers import LANGGRAPH_REQUIREMENTS, langgraph_dev  # noqa: E402 - bench/_servers.py
from _venv import ensure_venv  # noqa: E402 - bench/_venv.py, next to this file

from tests.langgraph import stream_cases  # noqa: E402

REFERENCE = ROOT / "tests" / "langgraph" / "streams_reference.json"


def log(text: str) -> None:
    print(text, file=sys.stderr)


async def record_all(url: str) -> dict[str, list[list[object]]]:
    from langgraph_sdk import get_client

    client = get_client(url=url)
    try:
        return {
            case.name: stream_cases.normalise(await stream_cases.record(client, case))
            for case in stream_cases.CASES
        }
    finally:
        await client.aclose()


def main() -> None:
    python = ensure_venv("langgraph", LANGGRAPH_REQUIREMENTS, log)
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        shutil.copy(ROOT / "tests" / "langgraph" / "agents" / "streaming.py", home)
        (home / "langgraph.json").write_text(
            json.dumps({"dependencies": ["."], "graphs": {"streamer": "./streaming.py:graph"}})
        )
        with langgraph_dev(python, home, home, "--config", "langgraph.json") as url:
            recorded = asyncio.run(record_all(url))
    REFERENCE.write_text(json.dumps(recorded, indent=1, sort_keys=True) + "\n")
    log(f"wrote {REFERENCE} ({sum(len(v) for v in recorded.values())} events)")


if __name__ == "__main__":
    main()
