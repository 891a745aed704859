"""bench/summary.py: one table of the goals from the benchmarks' JSON documents."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import summary  # noqa: E402 - bench/summary.py


def _write(folder: Path, name: str, doc: dict[str, object]) -> None:
    (folder / f"{name}.json").write_text(json.dumps(doc))


def test_each_goal_gets_a_row_with_its_verdict(tmp_path: Path) -> None:
    cell = {"criogen_vs_langgraph": 3.5, "criogen_vs_floor": 0.4}
    _write(
        tmp_path,
        "langgraph_compare",
        {
            "cells": {
                "memory": {"sync": cell},
                "sqlite": {"sync": cell},
                "postgres": {"skipped": "down"},
            }
        },
    )
    _write(
        tmp_path,
        "http_compare",
        {
            "langgraph": {"get_state": {"p50": 1.4}},
            "ratios": {
                "aegra": {
                    "creates_16": {"ratio": 2.1, "met": True},
                    "get_state": {"ratio": 0.9, "met": False},
                },
                "langgraph": {"get_state": {"ratio": 0.95, "met": True}},
            },
        },
    )
    _write(
        tmp_path,
        "celery_capacity",
        {
            "projection": {
                "server_cpu_ms_per_run": 21.1,
                "check": {
                    "measured_2_workers_runs_per_s": 47.9,
                    "projected_for_this_machine": 52.0,
                    "measured_vs_projected": 0.92,
                    "tolerance": 0.25,
                    "holds": True,
                },
            }
        },
    )
    _write(
        tmp_path,
        "runner",
        {
            "celery_2_vs_1_executing": {"exit": 1.24},
            "throughput_runs_per_second": {
                "celery_1_worker": {"exit": {"cpu_ms_per_run": {"machine_busy": 0.7}}}
            },
        },
    )
    _write(
        tmp_path,
        "engine",
        {
            "growth": {"memory": {}, "sqlite": {"stored_bytes_ratio": 1.0}},
            "history_depth": {"sqlite": {"checkpoints": 50000, "page_ratio": 1.02}},
        },
    )
    rows = {r.area: r for r in summary.rows(tmp_path)}

    assert rows["engine memory sync"].verdict == "met"  # no floor goal in memory
    assert rows["engine sqlite sync"].verdict == "MISSED"  # 0.4x the floor
    assert rows["engine postgres"].verdict == "not run"
    assert rows["HTTP creates/s (16 clients) vs aegra"].verdict == "met"
    assert rows["HTTP get_state p50 vs aegra"].verdict == "MISSED"
    assert rows["HTTP runs.wait/s (16 clients) vs aegra"].verdict == "not run"
    assert rows["HTTP deletes/s (16 clients) vs aegra"].goal == ">= 2x Aegra"
    assert rows["HTTP search at offset p50 vs aegra"].goal == "<= 0.5x Aegra"
    assert rows["HTTP get_state p50 vs langgraph"].verdict == "met"
    assert rows["HTTP get_state p50 vs langgraph"].measured == "0.95x LangGraph in-mem"
    assert rows["HTTP get_history(50) p50 vs langgraph"].verdict == "not run"
    assert "HTTP creates/s (16 clients) vs langgraph" not in rows  # no goal there
    assert rows["Celery 2 workers exit"].measured == "1.24x (1 worker: machine 70% busy)"
    assert rows["Celery 2 workers exit"].verdict == "MISSED"
    assert rows["Celery capacity"].verdict == "met"
    assert rows["Celery capacity"].measured == "47.9/s vs 52 (0.92x; 21.1 ms server CPU/run)"
    assert rows["bytes/checkpoint sqlite"].verdict == "met"
    assert rows["history page sqlite"].verdict == "met"
    assert rows["scale"].verdict == rows["server memory"].verdict == "not run"
    text = summary.table(list(rows.values()))
    # 13 HTTP goals against Aegra and 8 against LangGraph: 2 met, 1 missed, 18 not run;
    # and the LangGraph saver goal (issue 19), not run.
    assert rows["LangGraph saver"].verdict == "not run"
    assert text.splitlines()[-1] == "6 met, 3 missed, 22 not run"


def test_without_results_every_goal_is_not_run(tmp_path: Path, capsys: object) -> None:
    assert summary.main(["--results", str(tmp_path)]) == 0
    out = capsys.readouterr().out  # type: ignore[attr-defined]
    assert "0 met, 0 missed" in out and "MISSED" not in out
