"""REST API benchmark, over the official ``langgraph_sdk`` client.

Run it from the project folder::

    .venv/bin/python bench/api.py                       # SQLite, ~1-2 minutes
    .venv/bin/python bench/api.py --database postgres   # a fresh PostgreSQL database
    .venv/bin/python bench/api.py --search-threads 2000 --seconds 3

It starts the real server (uvicorn, or Daphne with ``--server daphne``, serving
``criogen.asgi``: one process, the in-process runner, production settings) on a fresh
database, as the API tests do, runs the workload of
``bench/_sdk_workload.py`` (the one ``bench/http_compare.py`` also runs against Aegra)
and prints ONE JSON document on stdout (progress on stderr):

- ``threads_created_per_s``: ``threads.create()`` with 1 and with 16 concurrent
  clients, for ``--seconds`` each (``per_s`` and the per-call p50/p95);
- ``runs_per_s``: a fresh thread and ``runs.wait`` of the 3-step ``steps`` graph (input
  ``n`` and a ~1 KB payload; four checkpoints each) with 16 concurrent clients;
  p50/p95 are those of ``runs.wait``;
- ``get_state_ms`` / ``get_history_ms``: p50 and p95 of ``threads.get_state`` and of
  ``threads.get_history(limit=10)`` on a thread with at least 50 checkpoints;
- ``search_ms``: p50 and p95 of ``threads.search(metadata=…, limit=20)`` and of
  ``threads.search(status="idle", limit=20)`` among ``--search-threads`` threads (10,000
  by default; inserted with SQL, not through the API, to keep the run short).

Errors (a failed call, a run with the wrong output) are counted in the cell that met
them. The machine is shared and the numbers are noisy: compare ratios from one run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _sdk_workload as workload  # noqa: E402 - bench/_sdk_workload.py, next to this file


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--database", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--seconds", type=float, default=5.0, help="per throughput cell")
    parser.add_argument("--search-threads", type=int, default=10_000)
    parser.add_argument("--samples", type=int, default=100, help="per latency cell")
    parser.add_argument(
        "--server", choices=workload.ASGI_SERVERS, default="uvicorn", help="the ASGI server"
    )
    args = parser.parse_args()
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    tmp = Path(tempfile.mkdtemp(prefix="criogen-bench-api-"))
    workload.log(f"starting the server on {args.database}")
    with workload.criogen_server(args.database, tmp, asgi_server=args.server) as (target, _):
        results = asyncio.run(
            workload.measure(target, args.seconds, args.search_threads, args.samples)
        )
    print(
        json.dumps(
            {
                "database": args.database,
                "server": f"{args.server}, 1 process, in-process runner, DEBUG off",
                **results,
                "machine": {
                    "cores": os.cpu_count(),
                    "load": os.getloadavg(),
                    "python": platform.python_version(),
                },
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
