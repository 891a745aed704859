"""The production settings under plain Daphne and uvicorn (docs/deployment.md): after
``collectstatic`` the dashboard's stylesheet and scripts load, the API docs render
Swagger UI, and no request leaves 127.0.0.1 (no CDN)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from tests.api.conftest import server_argv
from tests.dashboard import live_server


def start_production(asgi_server: str, tmp: Path) -> live_server.DashboardServer:
    """Criogen as docs/deployment.md deploys it: DEBUG off, a secret key, the allowed
    host, ``collectstatic``, then the ASGI server alone (no runserver, no proxy).

    Plain HTTP on loopback, so the HTTPS redirect and secure-only cookies are off.
    """
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "criogen.settings",
        "DEBUG": "false",
        "SECRET_KEY": "static-files-test-" + "k" * 40,
        "ALLOWED_HOSTS": "127.0.0.1",
        "SECURE_SSL_REDIRECT": "false",
        "SESSION_COOKIE_SECURE": "false",
        "CSRF_COOKIE_SECURE": "false",
        "STATIC_ROOT": str(tmp / "static"),
        "DATABASE_URL": f"sqlite://{tmp / 'production.db'}",
        "LOG_LEVEL": "WARNING",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    env.pop("REDIS_URL", None)
    live_server._manage(env, "migrate", "--noinput")
    live_server._manage(env, "collectstatic", "--noinput")
    out = live_server._manage(env, "shell", "-c", live_server._SETUP)
    tokens = json.loads(out.split("TOKENS=", 1)[1].strip())
    port = live_server.free_port()
    log = tmp / f"{asgi_server}-{port}.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(  # noqa: S603 - our own interpreter and arguments
            server_argv(asgi_server, port),
            cwd=live_server.ROOT,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(url + "/ok", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            process.wait()
            raise RuntimeError(f"{asgi_server} did not start:\n{log.read_text()[-4000:]}")
        time.sleep(0.1)
    return live_server.DashboardServer(url, tokens, process, log, env)


@pytest.fixture(scope="module", params=["daphne", "uvicorn"])
def production(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[live_server.DashboardServer]:
    server = start_production(request.param, tmp_path_factory.mktemp(request.param))
    yield server
    live_server.stop(server)


def test_the_dashboard_and_the_api_docs_load_without_leaving_the_host(
    production: live_server.DashboardServer, chromium: Any
) -> None:
    outside: list[str] = []
    statics: dict[str, int] = {}

    def only_local(route: Any) -> None:
        if urlsplit(route.request.url).hostname == "127.0.0.1":
            route.continue_()
        else:
            outside.append(route.request.url)
            route.abort()

    context = chromium.new_context(base_url=production.url)
    try:
        context.route("**/*", only_local)
        page = context.new_page()
        page.set_default_timeout(15_000)
        page.on(
            "response",
            lambda r: (
                statics.__setitem__(urlsplit(r.url).path, r.status) if "/static/" in r.url else None
            ),
        )
        page.goto("/ui/inbox/")
        page.fill("input[name=username]", "olga")
        page.fill("input[name=password]", live_server.PASSWORD)
        page.click("button[name=login]")
        page.wait_for_url("**/ui/inbox/")
        # criogen.css laid the header out; htmx, its ws extension and criogen.js opened
        # the live socket and said so on <body>.
        assert page.eval_on_selector("header.top", "el => getComputedStyle(el).display") == "flex"
        page.wait_for_function("document.body.dataset.live === 'open'")
        assert page.evaluate("typeof window.htmx") == "object"
        for name in ("criogen.css", "criogen.js", "vendor/htmx-2.0.11.min.js"):
            assert statics.get(f"/static/dashboard/{name}") == 200, statics

        page.goto("/docs")
        page.wait_for_selector(".swagger-ui .info .title")
        assert "Criogen API" in page.inner_text(".swagger-ui .info .title")
        page.wait_for_selector(".opblock-tag-section")  # the operations, from openapi.json
        assert statics.get("/static/ninja/swagger-ui-bundle.js") == 200, statics
        assert outside == []
    finally:
        context.close()


def test_static_files_are_cached_and_compressed(production: live_server.DashboardServer) -> None:
    with httpx.Client(base_url=production.url, timeout=10) as client:
        css = client.get("/static/dashboard/criogen.css", headers={"Accept-Encoding": "gzip"})
        assert css.status_code == 200
        assert css.headers["content-type"].startswith("text/css")
        assert css.headers["content-encoding"] == "gzip"
        assert "max-age" in css.headers["cache-control"]
        assert "header.top" in css.text
        again = client.get(
            "/static/dashboard/criogen.css", headers={"If-None-Match": css.headers["etag"]}
        )
        assert again.status_code == 304
        assert client.get("/static/dashboard/nope.css").status_code == 404
