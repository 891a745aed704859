"""``bench/engine.py`` still runs against the current engine and prints its JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_engine_bench_prints_throughput_and_agent_turns() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "bench/engine.py",
            "--seconds",
            "0.2",
            "--backends",
            "memory",
            "--no-growth",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    for mode in ("sync", "async", "exit"):
        assert report["throughput"]["memory"][mode]["runs_per_s"] > 0
        assert report["agent_turns"]["memory"][mode]["turns_per_s"] > 0
