"""The runner on real Celery worker processes (Redis broker, PostgreSQL database).

Each test starts two ``celery -A criogen worker --pool threads`` subprocesses on a
queue of its own (Redis DB 9) against a PostgreSQL database of this module's own, creates
runs through ``create_run`` in a ``manage.py shell`` subprocess (CRIOGEN_RUNNER=celery),
and crashes or stops the worker that holds the run.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import celery_worker_argv, drop_database_later, need_service, redis_url

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
BROKER = redis_url("celery")
LEASE = 3


def redis_available() -> bool:
    import redis

    try:
        return bool(redis.Redis.from_url(BROKER, socket_connect_timeout=2).ping())
    except redis.RedisError:
        return False


@dataclass
class Cluster:
    env: dict[str, str]
    alias: str
    queue: str
    logs: Path
    workers: dict[int, subprocess.Popen[bytes]]
    shells: list[subprocess.Popen[str]] = field(default_factory=list)
    started: int = 0

    def ensure_workers(self, count: int = 2) -> None:
        """Start workers until ``count`` are alive (a test kills or stops one; the next
        finds two again). Each gets a name (and log) of its own: w1, w2, w3…"""
        alive = sum(1 for proc in self.workers.values() if proc.poll() is None)
        names = []
        for _ in range(count - alive):
            self.started += 1
            names.append(f"w{self.started}")
            self.start_worker(names[-1])
        self.wait_ready(names)

    def start_worker(self, name: str) -> subprocess.Popen[bytes]:
        with (self.logs / f"{name}.log").open("wb") as log:
            proc = self._spawn(name, log)
        self.workers[proc.pid] = proc
        return proc

    def _spawn(self, name: str, log: Any) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            celery_worker_argv(self.queue, name),
            cwd=ROOT,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )

    def start_beat(self) -> subprocess.Popen[bytes]:
        with (self.logs / "beat.log").open("wb") as log:
            return subprocess.Popen(
                [
                    str(BIN / "celery"),
                    "-A",
                    "criogen",
                    "beat",
                    "--schedule",
                    str(self.logs / "beat-schedule"),
                    "--loglevel",
                    "info",
                ],
                cwd=ROOT,
                env={**self.env, "CRIOGEN_REAP_SECONDS": "1", "CRIOGEN_CRON_TICK_SECONDS": "1"},
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def wait_ready(self, names: list[str], timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        for name in names:
            while b" ready." not in (self.logs / f"{name}.log").read_bytes():
                assert time.monotonic() < deadline, self.dump(f"worker {name} never got ready")
                time.sleep(0.1)

    def manage(self, *args: str, code: str | None = None) -> str:
        command = [str(BIN / "python"), "manage.py", *args]
        if code is not None:
            command += ["-c", code]
        done = subprocess.run(
            command, cwd=ROOT, env=self.env, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.strip().splitlines()[-1]

    def create_run(self, thread_id: str, **options: Any) -> str:
        """Create a run in a ``manage.py shell`` and return its id as soon as the shell
        prints it (committed and handed to the workers).

        Not when the shell exits: its interpreter's teardown can take seconds on a busy
        machine, and by then a worker may have run the whole run, so a test waiting to
        see it ``running`` would wait for nothing. The shell is reaped with the cluster.
        """
        assistant_id = options.pop("assistant_id", "steps")
        code = (
            "from criogen.services.runs import create_run\n"
            f"run = create_run(thread_id={thread_id!r}, assistant_id={assistant_id!r}, "
            f"if_not_exists='create', **{options!r})\n"
            "print('RUN', run.pk, flush=True)"
        )
        log = (self.logs / f"shell-{uuid.uuid4().hex[:8]}.log").open("wb")
        shell = subprocess.Popen(
            [str(BIN / "python"), "manage.py", "shell", "-c", code],
            cwd=ROOT,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
        )
        log.close()
        self.shells.append(shell)
        assert shell.stdout is not None
        for line in shell.stdout:
            if line.startswith("RUN "):
                return line.split()[1]
        shell.wait(60)
        raise AssertionError(self.dump(f"the shell creating a run exited {shell.returncode}"))

    def run(self, run_id: str) -> Any:
        from criogen.storage.models import Run

        return Run.objects.using(self.alias).get(pk=run_id)

    def head_version(self, thread_id: str) -> int:
        from criogen.storage.models import Thread

        return Thread.objects.using(self.alias).get(pk=thread_id).head_version

    def wait(self, what: str, check: Callable[[], bool], timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while not check():
            assert time.monotonic() < deadline, self.dump(f"timed out waiting for {what}")
            time.sleep(0.05)

    def holder(self, run_id: str) -> subprocess.Popen[bytes]:
        pid = int(self.run(run_id).worker.rsplit(":", 1)[1])
        return self.workers[pid]

    def dump(self, message: str) -> str:
        logs = "\n".join(
            f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}" for p in self.logs.iterdir()
        )
        return f"{message}\n{logs}"


@pytest.fixture(scope="module")
def cluster_database(postgres_url: str) -> Iterator[str]:
    """A database of this module's own.

    The session's database is shared with the live API servers of other modules, whose
    in-process cron timers would fire this module's due crons (and run them) before the
    Celery beat under test could.
    """
    import psycopg

    admin = postgres_url.rsplit("/", 1)[0].replace("postgres://", "postgresql://") + "/test"
    name = f"criogen_celery_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    yield postgres_url.rsplit("/", 1)[0] + "/" + name
    from django.db import connections

    for alias in list(connections.settings):
        if connections.settings[alias].get("NAME") == name:
            connections[alias].close()
    drop_database_later(name)


@pytest.fixture(scope="module")
def shared_cluster(
    cluster_database: str, tmp_path_factory: pytest.TempPathFactory, django_db_blocker: Any
) -> Iterator[Cluster]:
    """Workers on a fresh queue for this module (starting two costs ~10 s; each test
    used to start its own); the test process reads the runs' database."""
    tmp_path = tmp_path_factory.mktemp("celery")
    need_service(
        "Redis", redis_available(), "redis-server --daemonize yes --bind 127.0.0.1 --port 6379"
    )
    from criogen.storage.setup import database_alias

    queue = f"criogen-test-{uuid.uuid4().hex[:12]}"
    env = {
        **os.environ,
        "DATABASE_URL": cluster_database,
        "CELERY_BROKER_URL": BROKER,
        "CELERY_TASK_DEFAULT_QUEUE": queue,
        "CRIOGEN_RUNNER": "celery",
        "CRIOGEN_LEASE_SECONDS": str(LEASE),
        # Webhook tests listen on 127.0.0.2; every other internal address stays refused.
        "CRIOGEN_OUTBOUND_ALLOW": "127.0.0.2",
        "CRIOGEN_OUTBOUND_BACKOFF_SECONDS": "0.2",
        "DJANGO_SETTINGS_MODULE": "criogen.settings",
        "PYTHONUNBUFFERED": "1",
    }
    with django_db_blocker.unblock():
        alias = database_alias(cluster_database)  # migrates the database once
        found = Cluster(env, alias, queue, tmp_path, {})
        try:
            found.ensure_workers(2)
            yield found
        finally:
            for shell in found.shells:
                shell.communicate(timeout=60)  # reads what is left, then reaps it
            for proc in found.workers.values():
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
            for proc in found.workers.values():
                try:
                    proc.wait(15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            import redis

            redis.Redis.from_url(BROKER).delete(queue)


@pytest.fixture
def cluster(shared_cluster: Cluster, django_db_blocker: Any) -> Iterator[Cluster]:
    """The module's workers, two of them alive (those a previous test killed or stopped
    are replaced)."""
    with django_db_blocker.unblock():
        shared_cluster.ensure_workers(2)
        yield shared_cluster


def steps_of(cluster: Cluster, thread_id: str) -> dict[str, Any]:
    from criogen import Storage

    head = Storage(f"django://{cluster.alias}").head(thread_id)
    assert head is not None
    return head.state


@pytest.mark.parametrize(
    "durability",
    [
        "sync",
        # The same recovery under the other durabilities (async: by beat's reaper; exit:
        # started over): ~25 s each, so `make reliability` runs them, next to the killed
        # workers of tests/reliability/test_celery_crashes.py.
        pytest.param("async", marks=pytest.mark.reliability),
        pytest.param("exit", marks=pytest.mark.reliability),
    ],
)
def test_a_run_whose_worker_is_killed_is_picked_up_again_and_completes(
    cluster: Cluster, durability: str
) -> None:
    thread_id = f"kill-{durability}-{uuid.uuid4().hex[:8]}"
    run_id = cluster.create_run(thread_id, input={"n": 0, "sleep": 2}, durability=durability)
    cluster.wait("the run to start", lambda: cluster.run(run_id).status == "running")
    if durability == "exit":
        time.sleep(0.5)  # a is done, b sleeps; exit has written nothing yet
    else:
        cluster.wait("node a's checkpoint", lambda: cluster.head_version(thread_id) >= 2)
    victim = cluster.holder(run_id)

    victim.send_signal(signal.SIGKILL)
    victim.wait(10)
    assert cluster.run(run_id).status == "running"  # nobody knows yet
    written_before = cluster.head_version(thread_id)
    if durability == "async":
        # Recovery by Celery beat's schedule (the reaper every second here).
        beat = cluster.start_beat()
        try:
            cluster.wait("the run to end", lambda: cluster.run(run_id).status == "success")
        finally:
            beat.terminate()
            beat.wait(10)
    else:
        # Recovery by the management command (cron, or by hand after an outage).
        cluster.wait("the lease to expire", lambda: cluster.run(run_id).lease_expires < time.time())
        swept = cluster.manage("criogen_sweep", "--no-ttl")
        # Under load a redelivery of the task can race the sweep; either way the run
        # must be taken up again exactly once (attempts == 2 below, by another worker).
        assert run_id in swept or cluster.run(run_id).attempts == 2, swept
        cluster.wait("the run to end", lambda: cluster.run(run_id).status == "success")

    run = cluster.run(run_id)
    assert run.attempts == 2
    assert int(run.worker.rsplit(":", 1)[1]) != victim.pid
    assert steps_of(cluster, thread_id) == {"n": 3, "steps": ["a", "b", "c"], "sleep": 2}
    from criogen.storage.models import Checkpoint

    versions = sorted(
        Checkpoint.objects.using(cluster.alias)
        .filter(thread_id=thread_id)
        .values_list("version", flat=True)
    )
    if durability == "exit":
        # Started over from the state before the run: one checkpoint, at the end.
        assert (written_before, versions) == (0, [1])
    else:
        # Continued from the last checkpoint: nothing before it was written again.
        assert written_before >= 2
        assert versions == [1, 2, 3, 4]


def test_a_worker_sent_sigterm_finishes_its_step_and_hands_the_run_back(
    cluster: Cluster,
) -> None:
    thread_id = f"term-{uuid.uuid4().hex[:8]}"
    # Each step sleeps 4 s: the SIGTERM below must reach the worker while it is in
    # step b. Celery handles the signal when its event loop next wakes, which on a
    # loaded machine took longer than the 1.5 s steps this test used to have.
    run_id = cluster.create_run(thread_id, input={"n": 0, "sleep": 4.0}, durability="sync")
    cluster.wait("node a's checkpoint", lambda: cluster.head_version(thread_id) >= 2)
    leaving = cluster.holder(run_id)

    leaving.send_signal(signal.SIGTERM)
    assert leaving.wait(20) == 0
    cluster.wait("the run to end", lambda: cluster.run(run_id).status == "success")

    run = cluster.run(run_id)
    assert run.attempts == 2
    assert int(run.worker.rsplit(":", 1)[1]) != leaving.pid
    from criogen.storage.models import Checkpoint

    checkpoints = dict(
        Checkpoint.objects.using(cluster.alias)
        .filter(thread_id=thread_id)
        .values_list("version", "run_id")
    )
    # b's step finished and was checkpointed before the hand-back; c ran on the other
    # worker; no step ran twice.
    assert sorted(checkpoints) == [1, 2, 3, 4]
    assert set(checkpoints.values()) == {run_id}
    assert steps_of(cluster, thread_id)["steps"] == ["a", "b", "c"]
    assert b"run handed back" in (cluster.logs / f"{_name_of(cluster, leaving)}.log").read_bytes()


def _name_of(cluster: Cluster, proc: subprocess.Popen[bytes]) -> str:
    return proc.args[proc.args.index("-n") + 1].split("@")[0]  # type: ignore[union-attr,index]


def test_webhooks_are_sent_and_retried_by_celery_tasks(cluster: Cluster) -> None:
    from criogen.storage.models import OutboundAttempt
    from tests.listeners import Listener

    hook = Listener("127.0.0.2", statuses=[503])
    try:
        thread_id = f"hook-{uuid.uuid4().hex[:8]}"
        url = f"http://127.0.0.2:{hook.port}/hook"
        run_id = cluster.create_run(thread_id, input={"n": 0}, webhook=url)
        refused_id = cluster.create_run(
            f"hook-{uuid.uuid4().hex[:8]}", input={"n": 0}, webhook="http://127.0.0.1:9/x"
        )
        rows = OutboundAttempt.objects.using(cluster.alias).order_by("attempt")
        cluster.wait("two attempts", lambda: rows.filter(run_id=run_id).count() == 2)
        cluster.wait("the refusal", lambda: rows.filter(run_id=refused_id).exists())
    finally:
        hook.close()

    assert [(r.attempt, r.outcome, r.status_code) for r in rows.filter(run_id=run_id)] == [
        (1, "failed", 503),
        (2, "delivered", 204),
    ]
    assert [h["body"]["run_id"] for h in hook.received] == [run_id, run_id]
    assert [r.outcome for r in rows.filter(run_id=refused_id)] == ["refused"]
    logs = "".join(p.read_text(errors="replace") for p in cluster.logs.glob("w*.log"))
    assert "criogen.tasks.deliver_outbound_task" in logs


def test_a_suspension_notifies_the_assistants_webhook_once_from_a_worker(
    cluster: Cluster,
) -> None:
    from criogen.storage.models import Assistant, OutboundAttempt
    from tests.listeners import Listener

    hook = Listener("127.0.0.2", statuses=[503])
    try:
        url = f"http://127.0.0.2:{hook.port}/hook"
        assistant = Assistant.objects.using(cluster.alias).create(
            graph_id="hitl", name="hitl", metadata={"notify": {"webhook": url}}
        )
        thread_id = f"notify-{uuid.uuid4().hex[:8]}"
        cluster.create_run(thread_id, assistant_id=str(assistant.assistant_id), input={"n": 0})
        rows = OutboundAttempt.objects.using(cluster.alias).filter(thread_id=thread_id)
        cluster.wait("two attempts", lambda: rows.filter(kind="notify").count() == 2)
    finally:
        hook.close()

    assert [(r.attempt, r.outcome) for r in rows.order_by("attempt")] == [
        (1, "failed"),
        (2, "delivered"),
    ]
    assert [h["body"]["event"] for h in hook.received] == ["suspension", "suspension"]
    assert hook.received[0]["body"]["thread_id"] == thread_id


def test_crons_fire_on_workers_from_beat_and_by_the_tasks_former_name(cluster: Cluster) -> None:
    from datetime import timedelta

    from django.utils import timezone

    from criogen.storage.models import Cron, Run

    thread_id = f"cron-{uuid.uuid4().hex[:8]}"
    first = cluster.create_run(thread_id, input={"n": 0})
    cluster.wait("the thread's first run", lambda: cluster.run(first).status == "success")
    cron_id = cluster.manage(
        "shell",
        code=(
            "from criogen.services.crons import create_cron\n"
            f"cron = create_cron(assistant_id='steps', thread_id={thread_id!r}, "
            "schedule='0 3 * * *', payload={'input': {'n': 0}})\n"
            "print(cron.pk)"
        ),
    )
    cron = Cron.objects.using(cluster.alias).filter(pk=cron_id)
    runs = Run.objects.using(cluster.alias).filter(thread_id=thread_id)

    def make_due() -> None:
        cron.update(next_run_date=timezone.now() - timedelta(seconds=5))

    # A beat started before the task moved still sends its former name.
    make_due()
    cluster.manage(
        "shell",
        code="from criogen.celery import app\napp.send_task('api.tasks.fire_crons_task')\nprint(1)",
    )
    cluster.wait("the run fired by the former task name", lambda: runs.count() == 2)
    # Today's beat schedule sends criogen.tasks.fire_crons_task.
    make_due()
    beat = cluster.start_beat()
    try:
        cluster.wait("the run fired by beat", lambda: runs.count() == 3)
    finally:
        beat.terminate()
        beat.wait(10)
    cluster.wait("the runs to end", lambda: all(r.status == "success" for r in runs))
    fired = runs.exclude(pk=first)
    assert [r.metadata["cron_id"] for r in fired] == [cron_id, cron_id]
    assert cron.get().next_run_date > timezone.now()
    logs = "".join(p.read_text(errors="replace") for p in cluster.logs.glob("w*.log"))
    assert "api.tasks.fire_crons_task" in logs
    assert "criogen.tasks.fire_crons_task" in logs


def test_a_dead_workers_run_past_its_time_limit_ends_timeout_when_taken_again(
    cluster: Cluster,
) -> None:
    # The worker dies while node b sleeps; by the time its lease has lapsed and the
    # sweep takes the run again, the run's limit (counted from its first start) has
    # passed: the new attempt ends it timeout before running another step.
    thread_id = f"late-{uuid.uuid4().hex[:8]}"
    limit = {"configurable": {"run_timeout_seconds": 2}}
    run_id = cluster.create_run(
        thread_id, input={"n": 0, "sleep": 30}, durability="sync", config=limit
    )
    cluster.wait("node a's checkpoint", lambda: cluster.head_version(thread_id) >= 2)
    victim = cluster.holder(run_id)
    victim.send_signal(signal.SIGKILL)
    victim.wait(10)
    cluster.wait("the lease to expire", lambda: cluster.run(run_id).lease_expires < time.time())
    cluster.ensure_workers()

    swept = cluster.manage("criogen_sweep", "--no-ttl")
    assert run_id in swept or cluster.run(run_id).attempts == 2, swept
    cluster.wait("the run to end", lambda: cluster.run(run_id).status == "timeout")

    run = cluster.run(run_id)
    assert run.attempts == 2
    assert (run.error["type"], run.error["code"]) == ("TimeoutError", "timeout")
    from criogen.storage.models import Checkpoint

    head = (
        Checkpoint.objects.using(cluster.alias)
        .filter(thread_id=thread_id)
        .order_by("-version")
        .first()
    )
    assert head is not None and (head.source, head.status) == ("failure", "failed")
    body = head.body_json
    assert body is not None and body["error"]["type"] == "TimeoutError"
