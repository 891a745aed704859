"""Runner benchmark: runs per second through the background runner, and crash recovery.

Run it from the project folder, with PostgreSQL and Redis on 127.0.0.1::

    .venv/bin/python bench/runner.py                 # everything, ~1-2 minutes
    .venv/bin/python bench/runner.py --runs 50 --modes sync

It prints ONE JSON document on stdout; progress goes to stderr. What it measures, on a
fresh PostgreSQL database (created and dropped here) and a fresh Redis queue:

- ``throughput``: ``--runs`` runs of the ``steps`` example (START → a → b → c → END),
  each on its own thread, created through ``create_run`` as the API does. Two rates
  per cell: ``end_to_end``, from the first create to the last end while one client
  creates them (bounded by that client); and ``executing``, with the runs created
  beforehand and handed to the runner in one burst, from the burst to the last end
  (what the workers can do). Per durability mode, with the in-process runner
  (``CRIOGEN_INPROCESS_WORKERS`` threads in this process) and with 1 and 2 Celery
  workers (``--pool threads --concurrency 4`` subprocesses);
  ``celery_2_vs_1_executing`` is the scaling from one worker to two. During the
  executing phase it also reads the CPU time every process spent (``/proc``), per run:
  ``cpu_ms_per_run`` of the runner (the Celery workers, or this process with the
  in-process runner), PostgreSQL's backends, Redis and everything else, and
  ``machine_busy``, the share of the machine's cores busy meanwhile: where a run's time
  goes, and whether a second worker has a free core to run on.
- ``sigkill_to_resume``: a run whose worker is SIGKILLed in the middle of node b; the
  seconds from the kill until another worker has claimed it again (the reaper is
  called every 0.1 s here, as a beat with a short period would; the lease is
  ``CRIOGEN_LEASE_SECONDS``), and until the run has ended.

The machine is shared and the numbers are noisy: compare ratios from one run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
PG_ADMIN = "host=127.0.0.1 user=postgres dbname=test"
MODES = ("sync", "async", "exit")
LEASE = 2


def log(message: str) -> None:
    """Progress line on stderr (stdout holds only the JSON document)."""
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100, help="runs per cell")
    parser.add_argument("--modes", default=",".join(MODES), help="durability modes")
    parser.add_argument("--workers", default="0,1,2", help="0 = in-process, n = n Celery workers")
    args = parser.parse_args()

    import psycopg

    name = f"criogen_bench_runner_{os.getpid()}"
    queue = f"criogen-bench-{uuid.uuid4().hex[:8]}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    env = {
        **os.environ,
        "DATABASE_URL": f"postgres://postgres@127.0.0.1:5432/{name}",
        "CELERY_BROKER_URL": "redis://127.0.0.1:6379/10",
        "CELERY_TASK_DEFAULT_QUEUE": queue,
        "CRIOGEN_LEASE_SECONDS": str(LEASE),
        "CRIOGEN_SWEEP_SECONDS": "0",
        "DJANGO_SETTINGS_MODULE": "criogen.settings",
        "LOG_LEVEL": "WARNING",
    }
    os.environ.update(env)
    try:
        subprocess.run(
            [str(BIN / "python"), "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True
        )
        import django

        sys.path.insert(0, str(ROOT))
        django.setup()
        report = run_all(args, env)
    finally:
        from django.db import connections

        connections.close_all()
        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        import redis

        redis.Redis.from_url(env["CELERY_BROKER_URL"]).delete(queue)
    print(json.dumps(report, indent=2))


def run_all(args: argparse.Namespace, env: dict[str, str]) -> dict[str, Any]:
    from django.conf import settings

    modes = [m for m in args.modes.split(",") if m]
    counts = [int(n) for n in args.workers.split(",") if n]
    throughput: dict[str, dict[str, float]] = {}
    for count in counts:
        label = "inprocess" if count == 0 else f"celery_{count}_worker{'s' if count > 1 else ''}"
        settings.CRIOGEN_RUNNER = "inprocess" if count == 0 else "celery"
        workers = [start_worker(env, f"b{count}{i}") for i in range(count)]
        try:
            for mode in modes:
                rates = measure(args.runs, mode, workers)
                throughput.setdefault(label, {})[mode] = rates
                log(f"{label} {mode}: {rates}")
        finally:
            stop(workers)
    scaling = {}
    if "celery_1_worker" in throughput and "celery_2_workers" in throughput:
        one, two = throughput["celery_1_worker"], throughput["celery_2_workers"]
        scaling = {
            mode: round(two[mode]["executing"] / one[mode]["executing"], 2) for mode in modes
        }
        log(f"2 workers / 1 worker (executing): {scaling}")
    settings.CRIOGEN_RUNNER = "celery"
    recovery = sigkill_to_resume(env)
    return {
        "throughput_runs_per_second": throughput,
        "celery_2_vs_1_executing": scaling,
        "sigkill_to_resume": recovery,
        "runs_per_cell": args.runs,
        "workflow": "steps (3 nodes)",
        "inprocess_workers": settings.CRIOGEN_INPROCESS_WORKERS,
        "celery_worker": "--pool threads --concurrency 4",
        "machine": {
            "cores": os.cpu_count(),
            "load": os.getloadavg(),
            "python": platform.python_version(),
        },
    }


def create_runs(runs: int, mode: str) -> list[Any]:
    from criogen.services.runs import create_run

    tag = uuid.uuid4().hex[:8]
    return [
        create_run(
            thread_id=f"bench-{tag}-{i}",
            assistant_id="steps",
            input={"n": 0},
            durability=mode,
            if_not_exists="create",
        ).pk
        for i in range(runs)
    ]


def wait_for(ids: list[Any], mode: str) -> None:
    from criogen.storage.models import Run

    deadline = time.monotonic() + 300
    while Run.objects.filter(pk__in=ids, status__in=("pending", "running")).exists():
        if time.monotonic() > deadline:
            raise SystemExit(f"{mode}: runs did not finish in 300 s")
        time.sleep(0.02)
    failed = Run.objects.filter(pk__in=ids).exclude(status="success").count()
    if failed:
        raise SystemExit(f"{mode}: {failed} runs did not succeed")


# -- where the CPU goes ------------------------------------------------------------------


def _process_cpu() -> dict[int, tuple[str, float]]:
    """(command name, CPU seconds: user + system) of every process now running."""
    tick = os.sysconf("SC_CLK_TCK")
    seen: dict[int, tuple[str, float]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            raw = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue  # gone meanwhile
        name = raw[raw.index("(") + 1 : raw.rindex(")")]
        fields = raw[raw.rindex(")") + 2 :].split()
        seen[int(entry)] = (name, (int(fields[11]) + int(fields[12])) / tick)
    return seen


def _machine_cpu() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine since boot, all cores."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    tick = os.sysconf("SC_CLK_TCK")
    idle = values[3] + values[4]  # idle + iowait
    return (sum(values[:8]) - idle) / tick, sum(values[:8]) / tick


class CpuMeter:
    """CPU seconds spent between :meth:`start` and :meth:`stop`, per group of processes:
    ``runner`` (the pids given), ``postgresql``, ``redis``, ``bench`` (this process,
    when it is not the runner) and ``other``."""

    def __init__(self, runner_pids: set[int]) -> None:
        self.runner_pids = runner_pids

    def _group(self, pid: int, name: str) -> str:
        if pid in self.runner_pids:
            return "runner"
        if pid == os.getpid():
            return "bench"
        if name.startswith("postgres"):
            return "postgresql"
        if name.startswith("redis"):
            return "redis"
        return "other"

    def start(self) -> None:
        self.before, self.machine_before = _process_cpu(), _machine_cpu()

    def stop(self, runs: int) -> dict[str, float]:
        after, (busy, total) = _process_cpu(), _machine_cpu()
        spent: dict[str, float] = {}
        for pid, (name, cpu) in after.items():
            base = self.before.get(pid)
            used = cpu - (base[1] if base and base[0] == name else 0.0)
            group = self._group(pid, name)
            spent[group] = spent.get(group, 0.0) + used
        busy_before, total_before = self.machine_before
        out = {group: round(1000 * spent.get(group, 0.0) / runs, 2) for group in GROUPS}
        out["machine_busy"] = round((busy - busy_before) / max(total - total_before, 1e-9), 2)
        return out


GROUPS = ("runner", "postgresql", "redis", "bench", "other")


def measure(runs: int, mode: str, workers: list[subprocess.Popen[bytes]]) -> dict[str, Any]:
    """Runs/s end to end (one client creating them as the API does, the runner
    executing them meanwhile) and executing only (runs created beforehand with their
    dispatch held back, then handed to the runner in one burst)."""
    from criogen.runner import drain, enqueue_run

    started = time.perf_counter()
    ids = create_runs(runs, mode)
    wait_for(ids, mode)
    end_to_end = runs / (time.perf_counter() - started)
    drain(timeout=60)

    # Hold the dispatch back: the runs are created (pending, committed) without being
    # handed to the runner, then handed to it all at once. (Parking their tasks in a
    # queue no worker reads depended on Celery re-reading task_default_queue, which
    # 5.6 does not: the workers ran them while they were being created.)
    from criogen import dispatch

    enqueue = dispatch.enqueue
    dispatch.enqueue = lambda run_id, *, at=None: None  # the services' one hand-off
    try:
        ids = create_runs(runs, mode)
    finally:
        dispatch.enqueue = enqueue
    meter = CpuMeter({w.pid for w in workers} if workers else {os.getpid()})
    meter.start()
    started = time.perf_counter()
    for pk in ids:
        enqueue_run(pk)
    wait_for(ids, mode)
    executing = runs / (time.perf_counter() - started)
    cpu = meter.stop(runs)
    drain(timeout=60)
    return {
        "end_to_end": round(end_to_end, 1),
        "executing": round(executing, 1),
        "cpu_ms_per_run": cpu,
    }


def sigkill_to_resume(env: dict[str, str]) -> dict[str, Any]:
    from criogen.runner import reap_expired
    from criogen.services.runs import create_run
    from criogen.storage.models import Run, Thread

    workers = [start_worker(env, "k1"), start_worker(env, "k2")]
    try:
        thread_id = f"bench-kill-{uuid.uuid4().hex[:8]}"
        run = create_run(
            thread_id=thread_id,
            assistant_id="steps",
            input={"n": 0, "sleep": 1},
            durability="sync",
            if_not_exists="create",
        )
        wait_until(lambda: Thread.objects.filter(pk=thread_id, head_version__gte=2).exists())
        run.refresh_from_db()
        pid = int(run.worker.rsplit(":", 1)[1])
        os.kill(pid, signal.SIGKILL)
        killed = time.perf_counter()
        while Run.objects.filter(pk=run.pk, attempts__lt=2).exists():
            reap_expired()
            time.sleep(0.1)
        resumed = time.perf_counter()
        wait_until(lambda: Run.objects.filter(pk=run.pk, status="success").exists())
        ended = time.perf_counter()
    finally:
        stop(workers)
    result = {
        "lease_seconds": LEASE,
        "kill_to_claimed_again_s": round(resumed - killed, 2),
        "kill_to_run_ended_s": round(ended - killed, 2),
        "note": "the re-run repeats node b (1 s sleep), then c",
    }
    log(f"sigkill: {result}")
    return result


def wait_until(check: Any, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit("timed out")
        time.sleep(0.02)


def start_worker(env: dict[str, str], name: str) -> subprocess.Popen[bytes]:
    log_path = Path(f"/tmp/criogen-bench-{name}-{os.getpid()}.log")  # noqa: S108
    with log_path.open("wb") as out:
        proc = subprocess.Popen(
            [
                str(BIN / "celery"),
                "-A",
                "criogen",
                "worker",
                "--pool",
                "threads",
                "--concurrency",
                "4",
                "-Q",
                env["CELERY_TASK_DEFAULT_QUEUE"],
                "-n",
                f"{name}@%h",
                "--without-heartbeat",
                "--without-mingle",
                "--without-gossip",
                "--loglevel",
                "warning",
            ],
            cwd=ROOT,
            env={**env, "LOG_LEVEL": "WARNING"},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + 60
    # The worker logs nothing at WARNING when it is ready: ask it over the broker.
    from criogen.celery import app

    while not (app.control.ping(destination=[f"{name}@{os.uname().nodename}"], timeout=0.5)):
        if time.monotonic() > deadline or proc.poll() is not None:
            raise SystemExit(f"worker {name} did not start; see {log_path}")
    return proc


def stop(workers: list[subprocess.Popen[bytes]]) -> None:
    for proc in workers:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in workers:
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


if __name__ == "__main__":
    main()
