"""``bench/engine.py`` still runs against the current engine and prints its JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_engine_bench_prints_throughput_commits_and_deep_history_reads() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "bench/engine.py",
            "--seconds",
            "0.2",
            "--backends",
            "memory,sqlite",
            "--no-growth",
            "--history-depth",
            "300",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    for backend in ("memory", "sqlite"):
        for mode in ("sync", "async", "exit"):
            assert report["throughput"][backend][mode]["runs_per_s"] > 0
            assert report["agent_turns"][backend][mode]["turns_per_s"] > 0
        deep = report["history_depth"][backend]
        assert deep["checkpoints"] == 300 and deep["page_at_50_us"] > 0
    # One durable commit per checkpoint (input + 3 steps, or 1 with exit), and no
    # lease commit: a run on a fresh thread creates it with its first write. Counted
    # from sqlite3's own statement trace, so this also checks the counter sees the
    # storage's raw cursor.
    counts = report["statements"]["sqlite"]
    assert (counts["sync"]["commits"], counts["sync"]["relaxed_commits"]) == (4.0, 0.0)
    assert (counts["exit"]["commits"], counts["exit"]["relaxed_commits"]) == (1.0, 0.0)
    assert counts["sync"]["by_kind"]["COMMIT"] == 4.0
