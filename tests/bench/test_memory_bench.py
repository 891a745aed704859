"""``bench/memory.py`` drives runs through the real server and samples its memory."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_memory_bench_samples_the_server_rss_along_the_runs() -> None:
    done = subprocess.run(
        [sys.executable, "bench/memory.py", "--runs", "50", "--every", "25", "--clients", "2"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert report["runs"] == 50
    assert report["errors"] == 0, report["first_errors"]
    assert report["server_alive"] is True
    assert [p["runs"] for p in report["curve"]] == [0, 25, 50]
    # A Django server holds tens of MB; a reading of 0 would mean the wrong process.
    assert all(20 < p["rss_mb"] < 2000 for p in report["curve"])
    assert report["final_rss_mb"] == report["curve"][-1]["rss_mb"]
    assert report["goal_met"] is True
