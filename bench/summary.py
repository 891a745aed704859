"""One table of the performance goals (issues 9 and 18) from the benchmarks' JSON documents.

``make bench`` writes each benchmark's JSON to ``bench/results/`` and ends with this
script, which prints every goal with the figure that decides it and ``met`` or
``MISSED``; a benchmark that did not run (no JSON, or a skipped side) shows ``not run``.
Run it alone on earlier results::

    .venv/bin/python bench/summary.py                  # bench/results/
    .venv/bin/python bench/summary.py --results DIR --json
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"

VS_LANGGRAPH = 3.0
VS_FLOOR = 0.5
HTTP_RATE = 2.0
HTTP_LATENCY = 0.5
HTTP_VS_INMEM = 1.0
CELERY_SCALING = 1.6
GROWTH = 2.0
SAME_COST = 1.25
"""History pages "cost the same" at depth 50 and 50,000 when within this ratio (the
machine's noise between two reads of the same page is about ±10 %)."""
SCALE_MS = 20.0
MEMORY_MB = 300.0


@dataclass(frozen=True)
class Row:
    area: str
    goal: str
    measured: str
    verdict: str  # "met", "MISSED" or "not run"


def _load(results: Path, name: str) -> dict[str, Any] | None:
    path = results / f"{name}.json"
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError):
        return None


def _verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"


def engine_rows(doc: dict[str, Any] | None) -> Iterator[Row]:
    goal = f">= {VS_LANGGRAPH:g}x LangGraph, >= {VS_FLOOR:g}x floor"
    if doc is None:
        yield Row("engine", goal, "langgraph_compare.json missing", "not run")
        return
    for backend, modes in doc.get("cells", {}).items():
        if "skipped" in modes:
            yield Row(f"engine {backend}", goal, str(modes["skipped"])[:60], "not run")
            continue
        for mode, cell in modes.items():
            vs_lg = cell.get("criogen_vs_langgraph") or 0.0
            vs_floor = cell.get("criogen_vs_floor") or 0.0
            ok = vs_lg >= VS_LANGGRAPH and (backend == "memory" or vs_floor >= VS_FLOOR)
            measured = f"{vs_lg:.2f}x LG" + (
                "" if backend == "memory" else f", {vs_floor:.2f}x floor"
            )
            cell_goal = f">= {VS_LANGGRAPH:g}x LangGraph" if backend == "memory" else goal
            yield Row(f"engine {backend} {mode}", cell_goal, measured, _verdict(ok))


SAVER_VS_LANGGRAPH = 1.0


def saver_rows(doc: dict[str, Any] | None) -> Iterator[Row]:
    """Issue 19: CriogenSaver at least as fast as LangGraph's own savers."""
    goal = f">= {SAVER_VS_LANGGRAPH:g}x LangGraph's saver"
    if doc is None:
        yield Row("LangGraph saver", goal, "langgraph_savers.json missing", "not run")
        return
    for backend, modes in doc.get("cells", {}).items():
        if "skipped" in modes:
            yield Row(f"LangGraph saver {backend}", goal, str(modes["skipped"])[:60], "not run")
            continue
        for mode, cell in modes.items():
            found = cell.get("criogen_vs_langgraph") or 0.0
            ok = found >= SAVER_VS_LANGGRAPH
            yield Row(f"LangGraph saver {backend} {mode}", goal, f"{found:.2f}x", _verdict(ok))


HTTP_LABELS = {
    "creates_1": "creates/s (1 client)",
    "creates_16": "creates/s (16 clients)",
    "runs_16": "runs.wait/s (16 clients)",
    "joins_16": "runs.create+join/s (16 clients)",
    "deletes_16": "deletes/s (16 clients)",
    "get_state": "get_state p50",
    "get_history": "get_history(10) p50",
    "get_history_50": "get_history(50) p50",
    "search_first_page": "search first page p50",
    "search_metadata": "search by metadata p50",
    "search_status": "search by status p50",
    "search_metadata_status": "search metadata+status p50",
    "search_offset": "search at offset p50",
}
HTTP_GOALS = {
    "aegra": {
        **dict.fromkeys(list(HTTP_LABELS)[:5], f">= {HTTP_RATE:g}x"),
        **dict.fromkeys(list(HTTP_LABELS)[5:], f"<= {HTTP_LATENCY:g}x"),
    },
    "langgraph": dict.fromkeys(list(HTTP_LABELS)[5:], f"<= {HTTP_VS_INMEM:g}x"),
}
"""Issue 18's HTTP goals: against Aegra every throughput and every p50; against
LangGraph's in-memory server the read p50s."""
HTTP_NAMES = {"aegra": "Aegra", "langgraph": "LangGraph in-mem"}


def http_rows(doc: dict[str, Any] | None) -> Iterator[Row]:
    by_server = (doc or {}).get("ratios") or {}
    for other, goals in HTTP_GOALS.items():
        ratios = by_server.get(other) or {}
        skipped = ((doc or {}).get(other) or {}).get("skipped")
        for metric, goal in goals.items():
            area = f"HTTP {HTTP_LABELS[metric]} vs {other}"
            target = f"{goal} {HTTP_NAMES[other]}"
            entry = ratios.get(metric)
            if not isinstance(entry, dict) or entry.get("ratio") is None:
                why = f"{other} skipped" if skipped else "http_compare.json missing or no figure"
                yield Row(area, target, why, "not run")
                continue
            yield Row(
                area,
                target,
                f"{entry['ratio']:.2f}x {HTTP_NAMES[other]}",
                _verdict(bool(entry.get("met"))),
            )


def celery_rows(doc: dict[str, Any] | None) -> Iterator[Row]:
    goal = f">= {CELERY_SCALING:g}x one worker"
    scaling = (doc or {}).get("celery_2_vs_1_executing") or {}
    if not scaling:
        yield Row("Celery 2 workers", goal, "runner.json missing", "not run")
        return
    for mode, ratio in scaling.items():
        busy = (
            (doc or {})
            .get("throughput_runs_per_second", {})
            .get("celery_1_worker", {})
            .get(mode, {})
            .get("cpu_ms_per_run", {})
            .get("machine_busy")
        )
        note = f" (1 worker: machine {busy:.0%} busy)" if busy is not None else ""
        yield Row(
            f"Celery 2 workers {mode}",
            goal,
            f"{ratio:.2f}x{note}",
            _verdict(ratio >= CELERY_SCALING),
        )


def capacity_rows(doc: dict[str, Any] | None) -> Iterator[Row]:
    goal = "2 workers within ±25% of the projection"
    check = ((doc or {}).get("projection") or {}).get("check")
    if not check:
        why = "celery_capacity.json missing" if doc is None else "1 or 2 workers not measured"
        yield Row("Celery capacity", goal, why, "not run")
        return
    proj = doc["projection"] if doc else {}
    per_run = proj.get("server_cpu_ms_per_run")
    yield Row(
        "Celery capacity",
        goal.replace("25%", f"{check.get('tolerance', 0.25):.0%}"),
        f"{check['measured_2_workers_runs_per_s']:g}/s vs {check['projected_for_this_machine']:g}"
        f" ({check['measured_vs_projected']}x; {per_run:g} ms server CPU/run)",
        _verdict(bool(check.get("holds"))),
    )


def storage_rows(doc: dict[str, Any] | None) -> Iterator[Row]:
    growth_goal = f"step 500 <= {GROWTH:g}x step 10"
    depth_goal = f"depth 50,000 <= {SAME_COST:g}x depth 50"
    if doc is None:
        yield Row("bytes per checkpoint", growth_goal, "engine.json missing", "not run")
        yield Row("history page cost", depth_goal, "engine.json missing", "not run")
        return
    for backend, growth in doc.get("growth", {}).items():
        ratio = growth.get("stored_bytes_ratio")
        if ratio is None:
            continue  # memory keeps no bytes
        yield Row(
            f"bytes/checkpoint {backend}", growth_goal, f"{ratio:.2f}x", _verdict(ratio <= GROWTH)
        )
    for backend, depth in doc.get("history_depth", {}).items():
        ratio = depth.get("page_ratio")
        if ratio is None:
            continue
        yield Row(
            f"history page {backend}",
            depth_goal.replace("50,000", f"{depth.get('checkpoints', 0):,}"),
            f"{ratio:.2f}x",
            _verdict(ratio <= SAME_COST),
        )


def scale_rows(doc: dict[str, Any] | None) -> Iterator[Row]:
    goal = f"< {SCALE_MS:g} ms p50"
    measurements = (doc or {}).get("measurements")
    if not measurements:
        yield Row("scale", goal, "scale.json missing (make bench-scale)", "not run")
        return
    threads = doc.get("sizes", {}).get("criogen_thread", {}).get("rows") if doc else None
    where = f" among {threads:,} threads" if isinstance(threads, int) else ""
    for name, m in measurements.items():
        if name.startswith("_") or not m.get("goal"):
            continue
        yield Row(
            f"scale {name}", goal + where, f"{m['p50_ms']:.1f} ms", _verdict(m["p50_ms"] < SCALE_MS)
        )


def memory_rows(doc: dict[str, Any] | None) -> Iterator[Row]:
    goal = f"< {MEMORY_MB:g} MB RSS after 10,000 runs"
    if doc is None:
        yield Row("server memory", goal, "memory.json missing", "not run")
        return
    yield Row(
        "server memory", goal, f"{doc['final_rss_mb']} MB", _verdict(bool(doc.get("goal_met")))
    )


def rows(results: Path) -> list[Row]:
    return [
        *engine_rows(_load(results, "langgraph_compare")),
        *saver_rows(_load(results, "langgraph_savers")),
        *http_rows(_load(results, "http_compare")),
        *celery_rows(_load(results, "runner")),
        *capacity_rows(_load(results, "celery_capacity")),
        *storage_rows(_load(results, "engine")),
        *scale_rows(_load(results, "scale")),
        *memory_rows(_load(results, "memory")),
    ]


def table(found: list[Row]) -> str:
    header = Row("goal", "target", "measured", "verdict")
    widths = [
        max(len(getattr(r, f)) for r in [header, *found]) for f in ("area", "goal", "measured")
    ]
    lines = []
    for row in [header, *found]:
        cells = [
            row.area.ljust(widths[0]),
            row.goal.ljust(widths[1]),
            row.measured.ljust(widths[2]),
        ]
        lines.append("  ".join([*cells, row.verdict]))
    lines.insert(1, "-" * len(lines[0]))
    met = sum(r.verdict == "met" for r in found)
    missed = sum(r.verdict == "MISSED" for r in found)
    lines.append(f"{met} met, {missed} missed, {len(found) - met - missed} not run")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--results", type=Path, default=RESULTS, help="the JSON documents' folder")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON instead")
    args = parser.parse_args(argv)
    found = rows(args.results)
    if args.json:
        print(json.dumps([asdict(r) for r in found], indent=2))
    else:
        print(table(found))
    return 0


if __name__ == "__main__":
    sys.exit(main())
