"""CORS for the REST API only, as LangGraph's server answers it (docs/deployment.md).

Preflights are answered ``200`` before authentication and routing, with ``*`` (or the
origin, with an allow-list), the requested headers, every method and
``max-age: 600``; real responses expose ``x-pagination-total``, ``x-pagination-next``,
``content-location`` and ``location`` (the last beyond LangGraph's server: the JS SDK
reconnects a resumable stream to it). A preflight the configuration does not allow is a
``400``.
The dashboard, ``/admin/`` and the login pages (cookies) never answer CORS headers.

Through Django's test client (the whole ``MIDDLEWARE``), and over HTTP under Daphne
(the API's own ASGI handler) on SQLite and PostgreSQL, and under uvicorn with the
full JSON configuration. The browser itself: ``test_cors_browser.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import Client

from api.cors import cors_settings
from tests.api.conftest import ROOT, Server, start_server, stop_server

APP = "http://localhost:3000"
"""The origin of a browser app (LangChain's chat front end runs here in development)."""

ASKED = "content-type, x-api-key, authorization"
"""The headers LangGraph's JS SDK asks for on a preflight."""

EXPOSED = "x-pagination-total, x-pagination-next, content-location, location"

PREFLIGHTS = [
    ("GET", "/info"),
    ("GET", "/ok"),
    ("POST", "/threads"),
    ("POST", "/threads/search"),
    ("GET", "/threads/some-thread/state"),
    ("POST", "/threads/some-thread/runs/stream"),
    ("POST", "/threads/some-thread/runs/wait"),
    ("GET", "/threads/some-thread/runs/some-run/stream"),
    ("DELETE", "/threads/some-thread"),
    ("PATCH", "/threads/some-thread"),
    ("POST", "/assistants/search"),
    ("POST", "/runs/crons/search"),
    ("PUT", "/store/items"),
]

NOT_API = ["/ui/inbox/", "/admin/", "/admin/login/", "/accounts/login/", "/", "/ws/ui/inbox/"]


def preflight(origin: str = APP, method: str = "POST", headers: str = ASKED) -> dict[str, str]:
    asked = {"Origin": origin, "Access-Control-Request-Method": method}
    if headers:
        asked["Access-Control-Request-Headers"] = headers
    return asked


def assert_open_preflight(response: Any, method: str) -> None:
    """LangGraph's server's answer to a preflight (default configuration)."""
    assert response.status_code == 200, response.content
    assert response.headers["access-control-allow-origin"] == "*"
    assert response.headers["access-control-allow-headers"] == ASKED
    allowed = response.headers["access-control-allow-methods"].split(", ")
    assert method in allowed
    assert set(allowed) == {"DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT"}
    assert response.headers["access-control-max-age"] == "600"
    assert "access-control-allow-credentials" not in response.headers


def assert_no_cors(response: Any) -> None:
    assert not [h for h in response.headers if h.lower().startswith("access-control-")], dict(
        response.headers
    )


def use(settings: Any, allow_origins: str = "", config: str = "") -> None:
    """Configure CORS in this test's settings as the environment variables would."""
    for name, value in cors_settings(allow_origins, config).items():
        setattr(settings, name, value)


# -- Django's test client: the whole middleware stack ---------------------------------------


@pytest.mark.parametrize(("method", "path"), PREFLIGHTS)
def test_a_preflight_of_every_api_path_is_answered_before_auth_and_routing(
    method: str, path: str
) -> None:
    # No database: the answer comes before token checks, the lockout, and the views.
    response = Client().options(path, headers=preflight(method=method))
    assert_open_preflight(response, method)
    assert response.content == b""


def test_a_preflight_carrying_a_bad_token_is_still_answered() -> None:
    headers = {**preflight(), "x-api-key": "crg_nope", "Authorization": "Bearer crg_nope"}
    assert_open_preflight(Client().options("/threads", headers=headers), "POST")


def test_a_preflight_without_requested_headers_allows_none() -> None:
    response = Client().options("/info", headers=preflight(method="GET", headers=""))
    assert response.status_code == 200
    assert response.headers["access-control-allow-origin"] == "*"
    assert "access-control-allow-headers" not in response.headers


def test_options_without_a_preflight_is_still_refused_by_the_method_check() -> None:
    # Not a preflight (no Access-Control-Request-Method): routing answers as before.
    assert Client().options("/info", headers={"Origin": APP}).status_code == 405


@pytest.mark.django_db
def test_a_real_response_carries_the_origin_and_the_exposed_headers() -> None:
    response = Client().get("/info", headers={"Origin": APP})
    assert response.status_code == 200
    assert response.headers["access-control-allow-origin"] == "*"
    assert response.headers["access-control-expose-headers"] == EXPOSED
    assert "access-control-allow-credentials" not in response.headers


def test_a_response_without_origin_has_no_cors_headers() -> None:
    response = Client().options("/info", headers={"Access-Control-Request-Method": "GET"})
    assert "access-control-allow-origin" not in response.headers


@pytest.mark.django_db
@pytest.mark.parametrize("path", NOT_API)
def test_the_dashboard_admin_and_login_answer_no_cors_headers(path: str) -> None:
    client = Client()
    assert_no_cors(client.get(path, headers={"Origin": APP}))
    assert_no_cors(client.options(path, headers=preflight(method="GET")))
    assert_no_cors(client.post(path, headers={"Origin": APP}))


@pytest.mark.django_db
def test_a_response_refused_by_a_guard_still_carries_cors_headers(settings: Any) -> None:
    # The browser app must be able to read a 413 (or a 429) to tell its user why.
    settings.CRIOGEN_MAX_BODY_BYTES = 10
    response = Client().post(
        "/threads", data=b"{" + b" " * 64 + b"}", content_type="application/json",
        headers={"Origin": APP},
    )  # fmt: skip
    assert response.status_code == 413
    assert response.headers["access-control-allow-origin"] == "*"


def test_an_allow_list_answers_the_origin_and_refuses_the_others(settings: Any) -> None:
    use(settings, "https://chat.example.com, http://localhost:3000")
    client = Client()
    allowed = client.options("/threads", headers=preflight())
    assert allowed.status_code == 200
    assert allowed.headers["access-control-allow-origin"] == APP
    assert "origin" in allowed.headers["vary"].lower()
    other = client.options("/threads", headers=preflight(origin="https://evil.example"))
    assert other.status_code == 400
    body = other.json()
    assert body["code"] == "cors_refused"
    assert body["field"] == "Origin"
    assert "'https://evil.example' is not allowed" in body["detail"]
    assert "access-control-allow-origin" not in other.headers


@pytest.mark.django_db
def test_a_real_request_from_a_disallowed_origin_gets_no_cors_headers(settings: Any) -> None:
    use(settings, "https://chat.example.com")
    response = Client().get("/info", headers={"Origin": APP})
    assert response.status_code == 200  # the browser, not the server, withholds it
    assert "access-control-allow-origin" not in response.headers


def test_a_disallowed_header_or_method_is_a_400(settings: Any) -> None:
    use(settings, config=json.dumps({"allow_headers": ["x-api-key"], "allow_methods": ["GET"]}))
    client = Client()
    ok = client.options("/info", headers=preflight(method="GET", headers="X-Api-Key, Accept"))
    assert ok.status_code == 200
    assert ok.headers["access-control-allow-headers"] == (
        "accept, accept-language, content-language, content-type, x-api-key"
    )
    header = client.options("/info", headers=preflight(method="GET", headers="x-api-key, x-evil"))
    assert header.status_code == 400
    assert header.json()["field"] == "Access-Control-Request-Headers"
    assert "x-evil" in header.json()["detail"]
    method = client.options("/threads", headers=preflight(method="POST", headers=""))
    assert method.status_code == 400
    assert method.json()["field"] == "Access-Control-Request-Method"


def test_the_json_form_sets_every_key(settings: Any) -> None:
    use(
        settings,
        config=json.dumps(
            {
                "allow_origins": ["https://chat.example.com"],
                "allow_origin_regex": r"https://.*\.preview\.example\.com",
                "allow_methods": ["GET", "POST"],
                "allow_headers": ["authorization", "x-api-key"],
                "allow_credentials": True,
                "expose_headers": ["x-pagination-total"],
                "max_age": 60,
            }
        ),
    )
    client = Client()
    for origin in ("https://chat.example.com", "https://pr-7.preview.example.com"):
        response = client.options("/threads", headers=preflight(origin, headers="x-api-key"))
        assert response.status_code == 200, response.content
        assert response.headers["access-control-allow-origin"] == origin
        assert response.headers["access-control-allow-credentials"] == "true"
        assert response.headers["access-control-allow-methods"] == "GET, POST"
        assert response.headers["access-control-max-age"] == "60"
        assert response.headers["access-control-expose-headers"] == "x-pagination-total"
    # The regular expression must match the whole origin, not a prefix of it.
    sneaky = preflight("https://x.preview.example.com.evil.test", headers="x-api-key")
    assert client.options("/threads", headers=sneaky).status_code == 400


# -- the configuration ------------------------------------------------------------------


def test_the_defaults_are_langgraphs() -> None:
    assert cors_settings() == {
        "CORS_ALLOW_ALL_ORIGINS": True,
        "CORS_ALLOWED_ORIGINS": [],
        "CORS_ALLOWED_ORIGIN_REGEXES": [],
        "CORS_ALLOW_METHODS": ["DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT"],
        "CORS_ALLOW_HEADERS": ["*"],
        "CORS_ALLOW_CREDENTIALS": False,
        "CORS_EXPOSE_HEADERS": [
            "x-pagination-total",
            "x-pagination-next",
            "content-location",
            "location",
        ],
        "CORS_PREFLIGHT_MAX_AGE": 600,
    }


def test_a_comma_list_becomes_the_allow_list() -> None:
    found = cors_settings(" https://Chat.Example.com ,http://localhost:3000,")
    assert found["CORS_ALLOW_ALL_ORIGINS"] is False
    assert found["CORS_ALLOWED_ORIGINS"] == ["https://chat.example.com", "http://localhost:3000"]


def test_an_empty_json_list_of_origins_turns_cross_origin_access_off() -> None:
    found = cors_settings(config='{"allow_origins": []}')
    assert (found["CORS_ALLOW_ALL_ORIGINS"], found["CORS_ALLOWED_ORIGINS"]) == (False, [])


@pytest.mark.parametrize(
    ("origins", "config", "message"),
    [
        ("", "{", "CRIOGEN_CORS is not valid JSON"),
        ("", "[]", "CRIOGEN_CORS must be a JSON object"),
        ("", '{"allow_origin": ["*"]}', "unknown key(s) allow_origin"),
        ("http://a.example", '{"max_age": 1}', "not both"),
        ("https://chat.example.com/", "", "no path, not even a trailing slash"),
        ("chat.example.com", "", "is not an origin; write scheme://host[:port]"),
        ("http://a.example:port", "", "is not an origin"),
        ("*,http://a.example", "", "list it alone"),
        ("", '{"allow_credentials": true}', "allow_credentials cannot be true"),
        ("", '{"allow_origins": ["*"], "allow_credentials": true}', "cannot be true"),
        ("", '{"allow_credentials": "yes"}', "must be true or false"),
        ("", '{"allow_origins": "http://a.example"}', "must be a list of strings"),
        ("", '{"allow_origin_regex": "("}', "is not a regular expression"),
        ("", '{"allow_origins": ["*"], "allow_origin_regex": "x"}', "has no effect"),
        ("", '{"allow_headers": ["x api key"]}', "is not a method or header name"),
        ("", '{"max_age": -1}', "max_age must be a number of seconds"),
        ("", '{"max_age": true}', "max_age must be a number of seconds"),
    ],
)
def test_an_invalid_configuration_is_refused_with_a_clear_message(
    origins: str, config: str, message: str
) -> None:
    with pytest.raises(ImproperlyConfigured) as refused:
        cors_settings(origins, config)
    assert message in str(refused.value)


def test_an_invalid_configuration_stops_the_start_up() -> None:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "criogen.settings"}
    env["CRIOGEN_CORS"] = '{"allow_credentials": true}'
    done = subprocess.run(  # noqa: S603 - our own interpreter and arguments
        [sys.executable, "-c", "import criogen.asgi"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode != 0
    assert "ImproperlyConfigured: CRIOGEN_CORS allow_credentials cannot be true" in done.stderr


# -- over HTTP: Daphne (SQLite, PostgreSQL) -------------------------------------------------


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def api_server(request: pytest.FixtureRequest) -> Server:
    return request.getfixturevalue("server" if request.param == "sqlite" else "pg_server")


@pytest.mark.parametrize("token", [False, True])
def test_preflights_over_http_are_answered_before_auth(server: Server, token: bool) -> None:
    extra = {"x-api-key": server.tokens["alice"]} if token else {}
    with httpx.Client(base_url=server.url, timeout=30) as http:
        for method, path in PREFLIGHTS:
            response = http.options(path, headers={**preflight(method=method), **extra})
            assert_open_preflight(response, method)
        for path in NOT_API:
            assert_no_cors(http.options(path, headers=preflight(method="GET")))
            assert_no_cors(http.get(path, headers={"Origin": APP}))
        custom = http.options("/threads", headers=preflight(headers="X-Api-Key, X-Trace"))
        assert custom.status_code == 200  # "*" allows the headers asked for, by name
        assert custom.headers["access-control-allow-headers"] == "x-api-key, x-trace"


def test_real_responses_over_http_expose_the_headers(api_server: Server) -> None:
    origin = {"Origin": APP}
    mark = uuid.uuid4().hex
    with api_server.http("alice") as http:
        created = [
            http.post("/threads", json={"metadata": {"mark": mark}}, headers=origin)
            for _ in range(3)
        ]
        for response in created:
            assert response.status_code == 200
            assert response.headers["access-control-allow-origin"] == "*"
            assert response.headers["access-control-expose-headers"] == EXPOSED
        search = {"metadata": {"mark": mark}, "limit": 2}
        first = http.post("/threads/search", json=search, headers=origin)
        assert len(first.json()) == 2
        assert first.headers["x-pagination-total"] == "3"
        assert first.headers["x-pagination-next"] == "2"
        assert first.headers["access-control-expose-headers"] == EXPOSED
        last = http.post("/threads/search", json={**search, "offset": 2}, headers=origin)
        assert len(last.json()) == 1
        assert last.headers["x-pagination-total"] == "3"
        assert "x-pagination-next" not in last.headers
        past = http.post("/threads/search", json={**search, "offset": 9}, headers=origin)
        assert (past.json(), past.headers["x-pagination-total"]) == ([], "3")
        tid = created[0].json()["thread_id"]
        ran = http.post(
            f"/threads/{tid}/runs/wait",
            json={"assistant_id": "steps", "input": {"n": 0}},
            headers=origin,
        )
        assert ran.status_code == 200
        assert ran.headers["content-location"].startswith(f"/threads/{tid}/runs/")
        assert ran.headers["access-control-allow-origin"] == "*"
    # Errors too: the app must read a 401 to ask for a token.
    unauthorized = httpx.post(api_server.url + "/threads", json={}, headers=origin)
    assert unauthorized.status_code == 401
    assert unauthorized.headers["access-control-allow-origin"] == "*"


# -- over HTTP: uvicorn, with the full JSON configuration -----------------------------------

LOCKED = {
    "allow_origins": ["https://chat.example.com"],
    "allow_origin_regex": r"http://127\.0\.0\.1:\d+",
    "allow_headers": ["content-type", "x-api-key", "authorization"],
    "allow_credentials": True,
    "max_age": 120,
}


@pytest.fixture(scope="module")
def locked_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """uvicorn on a fresh SQLite database with ``CRIOGEN_CORS`` set to :data:`LOCKED`."""
    tmp = tmp_path_factory.mktemp("cors-uvicorn")
    srv = start_server(
        f"sqlite://{tmp / 'cors.db'}", tmp, asgi_server="uvicorn", CRIOGEN_CORS=json.dumps(LOCKED)
    )
    yield srv
    stop_server(srv)


def test_a_locked_down_server_under_uvicorn(locked_server: Server) -> None:
    with locked_server.http("alice") as http:
        for origin in ("https://chat.example.com", "http://127.0.0.1:5173"):
            response = http.options("/threads/search", headers=preflight(origin))
            assert response.status_code == 200, response.text
            assert response.headers["access-control-allow-origin"] == origin
            assert response.headers["access-control-allow-credentials"] == "true"
            assert response.headers["access-control-max-age"] == "120"
            real = http.post("/threads/search", json={}, headers={"Origin": origin})
            assert real.headers["access-control-allow-origin"] == origin
            assert real.headers["access-control-expose-headers"] == EXPOSED
            assert "x-pagination-total" in real.headers
        for refused in (
            preflight("http://localhost:3000"),
            preflight("https://chat.example.com", headers="x-api-key, x-custom"),
        ):
            response = http.options("/threads", headers=refused)
            assert response.status_code == 400
            assert response.json()["code"] == "cors_refused"
        for path in NOT_API:
            assert_no_cors(http.get(path, headers={"Origin": "https://chat.example.com"}))
