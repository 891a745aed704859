"""The SDK workload of ``bench/api.py`` and ``bench/http_compare.py`` still runs.

One Criogen server on SQLite, tiny sizes, about a second per test; Aegra is not
installed here (``make bench`` does that), so the comparison runs with one target and
its ratio and table code is checked on that target's own figures.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import _sdk_workload as workload  # noqa: E402 - bench/_sdk_workload.py
import http_compare  # noqa: E402 - bench/http_compare.py


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[workload.Target]:
    tmp = tmp_path_factory.mktemp("bench-http")
    with workload.criogen_server("sqlite", tmp) as (target, _server):
        yield target


async def test_the_api_bench_measures_every_cell_without_errors(target: workload.Target) -> None:
    report = await workload.measure(
        target, seconds=0.2, search_threads=40, samples=3, checkpoints=8
    )
    for cell in (
        report["threads_created_per_s"]["clients_1"],
        report["threads_created_per_s"]["clients_16"],
        report["runs_per_s"]["clients_16"],
    ):
        assert cell["per_s"] > 0
        assert "errors" not in cell, cell
    assert report["history_checkpoints"] >= 8
    for cell in (
        report["get_state_ms"],
        report["get_history_ms"],
        report["search_ms"]["by_metadata"],
        report["search_ms"]["by_status"],
    ):
        assert cell["n"] == 3 and cell["p50"] > 0 and "errors" not in cell, cell


async def test_a_run_with_the_wrong_output_counts_as_an_error(target: workload.Target) -> None:
    async def wrong(sdk: Any) -> float:
        thread = await sdk.threads.create()
        values = await sdk.runs.wait(thread["thread_id"], "steps", input={"n": 5})
        if values.get("n") != 3:
            raise RuntimeError(f"runs.wait returned {values!r}")
        return 0.0

    cell = await workload.throughput(target, clients=1, seconds=0.1, op=wrong)
    assert cell.ops == 0 and cell.errors >= 1
    assert "'n': 8" in cell.first_error


async def test_the_comparison_alternates_rounds_and_judges_the_goals(
    target: workload.Target,
) -> None:
    args = argparse.Namespace(
        seconds=0.1, rounds=2, samples=2, search_threads=20, history_checkpoints=4
    )
    failed: dict[str, str] = {}
    sides = await http_compare.compare([target], args, failed, ["get_state", "creates_16"])
    assert failed == {}
    side = sides["criogen"]
    assert len(side["creates_16"]["rounds"]) == 2 and side["creates_16"]["per_s"] > 0
    assert side["get_state"]["n"] == 4 and side["get_state"]["p50"] > 0
    # Against itself every ratio is 1: the rate goals (>= 2) and latency goals (<= 0.5)
    # are both missed, and the table says so.
    ratios = http_compare.ratios(side, side)
    assert ratios["creates_16"] == {"ratio": 1.0, "goal": ">= 2.0", "met": False}
    assert ratios["get_state"] == {"ratio": 1.0, "goal": "<= 0.5", "met": False}
    faster = {**side, "get_state": {**side["get_state"], "p50": side["get_state"]["p50"] / 3}}
    assert http_compare.ratios(faster, side)["get_state"]["met"] is True
    table = http_compare.table({"criogen": side, "aegra": side, "ratios": ratios})
    assert table.count("MISSED") == len(http_compare.GOALS)
    skipped = http_compare.table({"criogen": side, "aegra": {"skipped": "no network"}})
    assert "aegra skipped: no network" in skipped
