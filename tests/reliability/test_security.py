"""Intruders: the bad-token rate limit, security headers on every kind of response,
``manage.py check --deploy`` clean for production settings, and an isolation sweep
(another user's thread is a 404 on every thread path)."""

from __future__ import annotations

import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.api.conftest import ROOT, Server, start_server, stop_server
from tests.reliability.conftest import Figures

pytestmark = pytest.mark.postgres

HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
}


@pytest.fixture(scope="module")
def strict_server(tmp_path_factory: pytest.TempPathFactory, postgres_url: str) -> Iterator[Server]:
    """A server of its own (the lockout is per client IP: 127.0.0.1) with a low limit."""
    tmp = tmp_path_factory.mktemp("lockout")
    srv = start_server(
        postgres_url, tmp, CRIOGEN_AUTH_FAILURE_LIMIT="5", CRIOGEN_AUTH_FAILURE_WINDOW="3"
    )
    yield srv
    stop_server(srv)


def test_too_many_bad_tokens_lock_the_address_out_for_a_while(
    strict_server: Server, figures: Figures
) -> None:
    good = {"x-api-key": strict_server.tokens["alice"]}
    with httpx.Client(base_url=strict_server.url, timeout=30) as http:
        assert http.get("/threads/nope", headers=good).status_code == 404
        for i in range(5):
            bad = {"x-api-key": f"crg_guess_{i}"} if i % 2 else {"Authorization": f"Bearer g{i}"}
            assert http.post("/threads/search", json={}, headers=bad).status_code == 401
        locked = http.post("/threads/search", json={}, headers={"x-api-key": "crg_guess_9"})
        assert locked.status_code == 429
        assert 1 <= int(locked.headers["Retry-After"]) <= 3
        assert locked.json()["code"] == "too_many_auth_failures"
        # Even the right token waits: a guesser must not learn which guess was right.
        assert http.get("/threads/nope", headers=good).status_code == 429
        # Requests without a token are not affected (health checks, the dashboard).
        assert http.get("/ok").status_code == 200
        time.sleep(int(locked.headers["Retry-After"]) + 0.2)
        assert http.get("/threads/nope", headers=good).status_code == 404
    figures.security_checks_passed += 1


@pytest.mark.parametrize(
    ("path", "who"),
    [
        ("/ok", None),
        ("/threads/does-not-exist", "alice"),
        ("/threads/search", None),  # a 401
        ("/accounts/login/", None),
        ("/ui/", None),  # the redirect to sign in
        ("/openapi.json", None),
    ],
)
def test_security_headers_are_set_on_api_and_dashboard_responses(
    rel_server: Server, figures: Figures, path: str, who: str | None
) -> None:
    with rel_server.http(who) as http:
        response = http.get(path)
    assert response.status_code < 500
    for name, value in HEADERS.items():
        assert response.headers.get(name) == value, (path, name, response.headers)
    figures.security_checks_passed += 1


def test_check_deploy_is_clean_with_production_settings(figures: Figures, tmp_path: Path) -> None:
    env = {
        "PATH": "/usr/bin:/bin",
        "DJANGO_SETTINGS_MODULE": "criogen.settings",
        "DEBUG": "false",
        "SECRET_KEY": secrets.token_urlsafe(50),
        "ALLOWED_HOSTS": "criogen.example.com",
        "DATABASE_URL": f"sqlite://{tmp_path / 'deploy.db'}",
    }
    done = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no issues" in done.stdout
    figures.security_checks_passed += 1


THREAD_PATHS = [
    ("GET", "/threads/{t}", None),
    ("PATCH", "/threads/{t}", {"metadata": {"x": 1}}),
    ("POST", "/threads/{t}/copy", None),
    ("GET", "/threads/{t}/state", None),
    ("POST", "/threads/{t}/state", {"values": {"n": 1}}),
    ("POST", "/threads/{t}/state/checkpoint", {"checkpoint": {}}),
    ("POST", "/threads/{t}/history", {}),
    ("GET", "/threads/{t}/history", None),
    ("GET", "/threads/{t}/runs", None),
    ("POST", "/threads/{t}/runs", {"assistant_id": "steps", "input": {}}),
    ("POST", "/threads/{t}/runs/wait", {"assistant_id": "steps", "input": {}}),
    ("DELETE", "/threads/{t}", None),
]


def test_another_users_thread_is_a_404_on_every_thread_path(
    rel_server: Server, figures: Figures
) -> None:
    with rel_server.http("alice") as alice, rel_server.http("bob") as bob:
        tid = alice.post("/threads", json={}).json()["thread_id"]
        done = alice.post(f"/threads/{tid}/runs/wait", json={"assistant_id": "steps", "input": {}})
        assert done.status_code == 200
        for method, path, body in THREAD_PATHS:
            response = bob.request(method, path.format(t=tid), json=body)
            assert response.status_code == 404, (method, path, response.status_code)
            figures.isolation_checks_passed += 1
        found = bob.post("/threads/search", json={"ids": [tid]}).json()
        assert found == []
        figures.isolation_checks_passed += 1
        # ... and alice's thread is untouched by all that.
        assert alice.get(f"/threads/{tid}").json()["metadata"].get("x") is None
