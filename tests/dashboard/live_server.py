"""A real dashboard server for browser tests, screenshots and the benchmark.

:func:`start` migrates a fresh database, creates the personas (with passwords and an
API token for making runs), and starts Daphne serving ``criogen.asgi`` on a free port,
with the in-process runner: runs execute in the server, and their checkpoints reach the
open pages through the server's channel layer, as in production.
:func:`launch_browser` starts Debian's Chromium through Playwright.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
PASSWORD = "correct horse battery staple"

_SETUP = """
import json
PASSWORD = "correct horse battery staple"
from django.contrib.auth.models import Permission, User
from criogen.storage.models import ApiToken
operate = Permission.objects.get(codename="operate", content_type__app_label="criogen")
tokens = {}
for name, role in (("olga", "operator"), ("oscar", "operator"), ("vera", "viewer")):
    # The session's PostgreSQL database is shared with other test servers: reuse a persona.
    user, _ = User.objects.get_or_create(username=name)
    user.set_password(PASSWORD)
    user.save()
    if role == "operator":
        user.user_permissions.add(operate)
    tokens[name] = ApiToken.issue(user, name="browser tests")[1]
print("TOKENS=" + json.dumps(tokens))
"""


@dataclass
class DashboardServer:
    """A running server: its URL, the personas' API tokens, its process and log."""

    url: str
    tokens: dict[str, str]
    process: subprocess.Popen[bytes]
    log: Path
    env: dict[str, str] = field(default_factory=dict)

    def client(self, who: str = "olga") -> Any:
        """A sync ``langgraph_sdk`` client acting as ``who`` (use it in ``with``)."""
        from langgraph_sdk import get_sync_client

        return get_sync_client(url=self.url, api_key=self.tokens[who])

    def call(self, fn: Any, who: str = "olga") -> Any:
        """``fn(client)`` with a client that is closed afterwards."""
        with self.client(who) as client:
            return fn(client)

    def start_hitl(self, *, n: int = 1, who: str = "olga", prefix: str = "hitl") -> str:
        """Start a ``hitl`` run on a new thread; return the thread id once it suspended."""
        thread_id = f"{prefix}-{uuid.uuid4().hex[:10]}"

        def go(client: Any) -> None:
            client.threads.create(thread_id=thread_id, metadata={"graph_id": "hitl"})
            run = client.runs.create(thread_id, "hitl", input={"n": n})
            client.runs.join(thread_id, run["run_id"])

        self.call(go, who)
        return thread_id

    def start_refund(self, text: str = "refund order 42 of 10 EUR", *, who: str = "olga") -> str:
        """Start a ``refunds`` agent run on a new thread; return it once it waits."""
        thread_id = f"refund-{uuid.uuid4().hex[:10]}"
        message = {"type": "human", "content": text}

        def go(client: Any) -> None:
            client.threads.create(thread_id=thread_id, metadata={"graph_id": "refunds"})
            run = client.runs.create(thread_id, "refunds", input={"messages": [message]})
            client.runs.join(thread_id, run["run_id"])

        self.call(go, who)
        return thread_id

    def start_flaky(self, *, who: str = "olga") -> str:
        """Start a ``flaky`` run that fails (its first attempt); return the thread id."""
        thread_id = f"flaky-{uuid.uuid4().hex[:10]}"

        def go(client: Any) -> None:
            client.threads.create(thread_id=thread_id, metadata={"graph_id": "flaky"})
            run = client.runs.create(
                thread_id, "flaky", input={"explode": True, "order": thread_id}
            )
            client.runs.join(thread_id, run["run_id"])

        self.call(go, who)
        return thread_id

    def manage(self, *args: str) -> str:
        return _manage(self.env, *args)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _manage(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(  # noqa: S603 - our own interpreter and arguments
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"manage.py {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
    return done.stdout


def start(database_url: str, tmp: Path, **settings: str) -> DashboardServer:
    """Migrate ``database_url``, add the personas, start Daphne; wait until it answers."""
    env = {
        **os.environ,
        # The project's settings plus the test graphs (refunds agent, flaky workflow).
        "DJANGO_SETTINGS_MODULE": "tests.dashboard.settings",
        "DATABASE_URL": database_url,
        "CONN_MAX_AGE": "0",
        "LOG_LEVEL": "WARNING",
        "CRIOGEN_RUNNER": "inprocess",
        "CRIOGEN_AUDIT": "true",
        "PYTHONDONTWRITEBYTECODE": "1",
        **settings,
    }
    if "REDIS_URL" not in settings:
        env.pop("REDIS_URL", None)
    _manage(env, "migrate", "--noinput", "--skip-checks")
    tokens = json.loads(_manage(env, "shell", "-c", _SETUP).split("TOKENS=", 1)[1].strip())
    port = free_port()
    log = tmp / f"dashboard-{port}.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(  # noqa: S603 - our own interpreter and arguments
            # Daphne's runserver: the same ASGI application, plus /static/ (DEBUG).
            [sys.executable, "manage.py", "runserver", f"127.0.0.1:{port}", "--noreload"],
            cwd=ROOT,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 40
    while True:
        try:
            if httpx.get(url + "/accounts/login/", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise RuntimeError(f"the dashboard server did not start:\n{log.read_text()[-4000:]}")
        time.sleep(0.1)
    return DashboardServer(url, tokens, process, log, env)


def stop(server: DashboardServer) -> None:
    """Stop the server's process (and only it)."""
    server.process.terminate()
    try:
        server.process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        server.process.kill()
        server.process.wait()


def chromium_available() -> bool:
    return Path(CHROMIUM).exists()


def launch_browser(playwright: Any) -> Any:
    """Headless Debian Chromium (never a downloaded browser)."""
    return playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)


def sign_in(browser: Any, server: DashboardServer, who: str, **context_options: Any) -> Any:
    """A new browser context signed in as ``who`` through the login form; its page."""
    context = browser.new_context(base_url=server.url, **context_options)
    page = context.new_page()
    page.goto("/ui/inbox/")
    page.fill("input[name=username]", who)
    page.fill("input[name=password]", PASSWORD)
    page.click("button[name=login]")
    page.wait_for_url("**/ui/inbox/")
    return page
