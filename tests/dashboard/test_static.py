"""The production settings under plain Daphne and uvicorn (docs/deployment.md): after
``collectstatic`` the dashboard's stylesheet and scripts load, the API docs render
Swagger UI, and no request leaves 127.0.0.1 (no CDN)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from tests import servers
from tests.dashboard import live_server

PRODUCTION = {
    "DEBUG": "false",
    "SECRET_KEY": "static-files-test-" + "k" * 40,
    "ALLOWED_HOSTS": "127.0.0.1",
    "SECURE_SSL_REDIRECT": "false",
    "SESSION_COOKIE_SECURE": "false",
    "CSRF_COOKIE_SECURE": "false",
}
"""docs/deployment.md's settings, on plain HTTP on loopback (so the HTTPS redirect and
secure-only cookies are off)."""
PRESET = {"DJANGO_SETTINGS_MODULE": "criogen.settings"}


@pytest.fixture(scope="module")
def static_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``collectstatic`` once, with the production settings, for both servers."""
    tmp = tmp_path_factory.mktemp("static")
    root = tmp / "static"
    env = servers.server_env(
        f"sqlite://{tmp / 'unused.db'}", PRESET, **PRODUCTION, STATIC_ROOT=str(root)
    )
    servers.manage(env, "collectstatic", "--noinput")
    return root


def start_production(asgi_server: str, tmp: Path, static_root: Path) -> servers.DashboardServer:
    """Criogen as docs/deployment.md deploys it: DEBUG off, a secret key, the allowed
    host, ``collectstatic`` (``static_root``), then the ASGI server alone (no
    runserver, no proxy)."""
    return servers.start(  # type: ignore[no-any-return]
        f"sqlite://{tmp / 'production.db'}",
        tmp,
        preset=PRESET,
        asgi_server=asgi_server,
        kind=servers.DashboardServer,
        **PRODUCTION,
        STATIC_ROOT=str(static_root),
    )


@pytest.fixture(scope="module", params=["daphne", "uvicorn"])
def production(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, static_root: Path
) -> Iterator[servers.DashboardServer]:
    server = start_production(request.param, tmp_path_factory.mktemp(request.param), static_root)
    yield server
    live_server.stop(server)


def test_the_dashboard_and_the_api_docs_load_without_leaving_the_host(
    production: servers.DashboardServer, chromium: Any
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


def test_static_files_are_cached_and_compressed(production: servers.DashboardServer) -> None:
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
