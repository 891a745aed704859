"""bench/celery_capacity.py: the CPU meter, the projection, its check and the tables.

The projection and the tables on canned figures; the meter on real processes of this
machine (a child that burns CPU, and PostgreSQL's backends of a database the test
creates). ``make bench`` runs the script itself with real Celery workers.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import celery_capacity as capacity  # noqa: E402 - bench/celery_capacity.py

from tests.conftest import START_POSTGRES, need_service, postgres_available  # noqa: E402

ONE = {
    "runs": 200,
    "seconds": 10.0,
    "runs_per_s": 20.0,
    "cpu_ms_per_run": {
        "web": 10.0,
        "worker": 5.0,
        "database": 4.0,
        "broker": 1.0,
        "client": 5.0,
        "other": 1.0,
    },
    "cores_busy": {"other": 0.1},
    "join_p50_ms": 400.0,
}


def _two(runs_per_s: float, other_cores: float) -> dict[str, Any]:
    return {**ONE, "runs_per_s": runs_per_s, "cores_busy": {"other": other_cores}}


def test_the_projection_scales_the_server_cpu_per_run_with_the_cores() -> None:
    # 20 ms of server CPU per run: 50 runs/s per core.
    proj = capacity.projection(ONE, None, cores=2)
    assert proj["server_cpu_ms_per_run"] == 20.0
    assert proj["runs_per_s"] == {"1": 50.0, "2": 100.0, "4": 200.0, "8": 400.0, "16": 800.0}
    assert "CPU-bound" in proj["assumption"] and "check" not in proj
    # A worker process uses one core at most: when it is the dearest part, it bounds.
    heavy_worker = {"web": 1.0, "worker": 40.0, "database": 1.0, "broker": 0.0}
    assert capacity.projected_runs_per_s(heavy_worker, 4, capacity.SERVER_GROUPS) == 95.2
    assert capacity.projected_runs_per_s({"web": 1.0}, 4, capacity.SERVER_GROUPS) == 0.0


def test_the_check_compares_two_workers_with_the_cores_other_processes_left() -> None:
    # Here the client shares the machine: 25 ms per run; 2 cores less 0.4 taken by
    # other processes leave 1.6 cores: 64 runs/s expected.
    holds = capacity.projection(ONE, _two(60.0, 0.4), cores=2)["check"]
    assert holds["projected_for_this_machine"] == 64.0
    assert holds["cores_left_by_other_processes"] == 1.6
    assert holds["measured_vs_projected"] == 0.94 and holds["holds"] is True
    fails = capacity.projection(ONE, _two(30.0, 0.4), cores=2)["check"]
    assert fails["measured_vs_projected"] == 0.47 and fails["holds"] is False


def test_the_tables_show_the_split_the_projection_and_the_check() -> None:
    doc = {
        "measured": {"1": ONE, "2": _two(60.0, 0.4), "4": {"skipped": "SystemExit: no"}},
        "projection": capacity.projection(ONE, _two(60.0, 0.4), cores=2),
    }
    lines = capacity.table(doc).splitlines()
    header = [c.strip() for c in lines[0].split(" | ")]
    assert header == [
        "workers",
        "runs/s",
        "web ms/run",
        "worker ms/run",
        "database ms/run",
        "broker ms/run",
        "client ms/run",
        "other cores",
        "join p50 ms",
    ]
    assert [c.strip() for c in lines[2].split(" | ")] == [
        "1",
        "20",
        "10",
        "5",
        "4",
        "1",
        "5",
        "0.1",
        "400.0",
    ]
    assert "4 worker(s) skipped: SystemExit: no" in lines
    text = "\n".join(lines)
    assert "a run: 20 ms of server CPU" in text
    assert "runs/s          | 50 | 100 | 200 | 400 | 800" in text
    assert "0.94x, holds (within ±25%)" in text


def test_descendants_are_found_through_their_parents() -> None:
    processes = {1: ("init", 0, 0.0), 10: ("a", 1, 0.0), 11: ("b", 10, 0.0), 12: ("c", 11, 0.0)}
    assert capacity.with_descendants({10}, processes) == {10, 11, 12}
    assert capacity.with_descendants({12}, processes) == {12}


WEB = """
import subprocess, sys, time
from pathlib import Path
folder = Path(sys.argv[1])
while not (folder / "go").exists():
    time.sleep(0.01)
burn = (
    "import sys, time\\nfrom pathlib import Path\\nend = time.process_time() + 0.5\\n"
    "while time.process_time() < end: pass\\n(Path(sys.argv[1]) / 'done').touch()\\n"
    "time.sleep(60)"
)
child = subprocess.Popen([sys.executable, "-c", burn, str(folder)])
child.wait()
"""


def test_the_meter_charges_each_process_to_its_group(tmp_path: Path) -> None:
    """A "web" process whose child, started once the meter runs, burns 0.5 s of CPU
    and lives on, and a query on the meter's database: the child is charged to web,
    the query to database."""
    need_service("PostgreSQL", postgres_available(), START_POSTGRES)
    import psycopg

    name = f"criogen_capacity_test_{uuid.uuid4().hex[:8]}"
    admin = "host=127.0.0.1 user=postgres dbname=test"
    with psycopg.connect(admin, autocommit=True) as db:
        db.execute(f'CREATE DATABASE "{name}"')
    web = subprocess.Popen([sys.executable, "-c", WEB, str(tmp_path)])
    try:
        with (
            psycopg.connect(f"host=127.0.0.1 user=postgres dbname={name}") as backend,
            capacity.CpuMeter(web.pid, set(), name) as meter,
        ):
            (tmp_path / "go").touch()
            backend.execute("SELECT count(*) FROM generate_series(1, 3000000)")
            deadline = time.monotonic() + 60
            while not (tmp_path / "done").exists():
                assert time.monotonic() < deadline, "the web process's child never ended"
                time.sleep(0.01)
    finally:
        children = capacity.with_descendants({web.pid}, capacity.all_processes()) - {web.pid}
        for pid in children:
            os.kill(pid, 9)
        web.kill()
        web.wait()
        with psycopg.connect(admin, autocommit=True) as db:
            db.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    spent = meter.spent()
    assert 0.45 <= spent["web"] < 1.0, spent
    assert spent["database"] > 0.05, spent
    assert spent["worker"] == 0.0, spent
    assert meter.first[os.getpid()][0] == "client"
    assert meter.seconds > 0.5


def test_a_process_cpu_is_read_from_proc() -> None:
    stat = capacity.proc_stat(os.getpid())
    assert stat is not None
    name, parent, cpu = stat
    assert parent == os.getppid() and cpu > 0 and name
    assert capacity.proc_stat(2**22 + 1) is None  # beyond pid_max: no such process
