"""``bench/runner.py`` still runs against the current services and runner: it holds the
runs' hand-off back through ``criogen.dispatch``, which a renamed function would break
without any other test noticing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import START_POSTGRES, START_REDIS, need_service, postgres_available
from tests.dashboard.conftest import redis_available

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.postgres, pytest.mark.redis]


def test_the_runner_bench_measures_the_inprocess_runner_and_a_killed_worker() -> None:
    need_service("PostgreSQL", postgres_available(), START_POSTGRES)
    need_service("Redis", redis_available(), START_REDIS)
    done = subprocess.run(
        [sys.executable, "bench/runner.py", "--runs", "3", "--modes", "exit", "--workers", "0"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    cell = report["throughput_runs_per_second"]["inprocess"]["exit"]
    assert cell["end_to_end"] > 0 and cell["executing"] > 0, cell
    assert report["runs_per_cell"] == 3
    recovery = report["sigkill_to_resume"]
    assert 0 < recovery["kill_to_claimed_again_s"] <= recovery["kill_to_run_ended_s"], recovery
