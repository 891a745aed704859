"""``bench/scale.py`` seeds a (tiny) data set the engine reads back, and measures it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

from tests.conftest import START_POSTGRES, need_service, postgres_available

ROOT = Path(__file__).resolve().parents[2]


def test_the_scale_bench_seeds_readable_data_and_measures_every_request() -> None:
    need_service("PostgreSQL", postgres_available(), START_POSTGRES)
    name = f"criogen_scale_test_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    done = subprocess.run(
        [
            sys.executable,
            "bench/scale.py",
            *("--db", name, "--drop", "--threads", "2000", "--checkpoints", "20000"),
            *("--samples", "5", "--warmup", "1", "--table"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    sizes = report["sizes"]
    assert sizes["criogen_thread"]["rows"] == 2000
    assert 18_000 <= sizes["criogen_checkpoint"]["rows"] <= 22_000
    # Two value rows per checkpoint (messages and the agent's counters), a run per thread
    # that has a checkpoint, and some threads waiting in the inbox.
    assert sizes["criogen_value"]["rows"] == 2 * sizes["criogen_checkpoint"]["rows"]
    assert 1900 <= sizes["criogen_run"]["rows"] < 2000
    assert sizes["suspended_threads"] >= 5
    assert report["seeding"]["total_s"] > 0
    assert report["checks"] == dict.fromkeys(report["checks"], True)
    assert set(report["checks"]) >= {
        "deep_head",
        "history_chained",
        "suspended_head",
        "inbox",
        "batched_heads",
        "status_filters",
    }
    measured = report["measurements"]
    assert {
        "search_first_page",
        "search_metadata_rare",
        "search_status_interrupted",
        "inbox_first_page",
        "inbox_filtered",
        "get_state_deep",
        "get_history_deep",
    } <= set(measured)
    for entry in measured.values():
        assert entry["samples"] == 5
        assert 0 < entry["p50_ms"] <= entry["p95_ms"]
    # user01 owns 100 threads: a full first page, and the rare customer's threads.
    assert measured["search_first_page"]["rows"] == 20
    assert measured["search_metadata_rare"]["rows"] >= 1
    assert measured["get_history_deep"]["rows"] == 10
    assert "goal (<20 ms p50)" in done.stderr
    # --drop removed the database.
    import psycopg

    with psycopg.connect("host=127.0.0.1 user=postgres dbname=test") as conn:
        found = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
    assert found is None
