"""The bad-token lockout counts the connection's peer, and reads ``X-Forwarded-For``
only when that peer is one of ``CRIOGEN_TRUSTED_PROXIES`` (docs/security.md), the same
under Daphne and under uvicorn run as docs/deployment.md runs it.

Each server here has ``CRIOGEN_TRUSTED_PROXIES=127.0.0.2``: requests sent from
127.0.0.1 come from an untrusted peer, requests sent from 127.0.0.2 (the whole
127.0.0.0/8 is loopback) come through the trusted "proxy".
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from django.test import RequestFactory, override_settings

from tests.api.conftest import ASGI_SERVERS, UVICORN_OPTIONS, Server, start_server, stop_server

PROXY = "127.0.0.2"
LIMIT = 20  # the default CRIOGEN_AUTH_FAILURE_LIMIT


@pytest.fixture(scope="module", params=ASGI_SERVERS)
def proxied_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    """A server of its own (its lockout counts must not touch other tests) that trusts
    127.0.0.2 as a proxy."""
    tmp = tmp_path_factory.mktemp(f"lockout-{request.param}")
    srv = start_server(
        f"sqlite://{tmp / 'lockout.db'}",
        tmp,
        asgi_server=request.param,
        CRIOGEN_TRUSTED_PROXIES=f"{PROXY}, 10.0.0.0/8",
    )
    yield srv
    stop_server(srv)


def _from(address: str, server: Server) -> httpx.Client:
    """A client whose connections leave from ``address``."""
    transport = httpx.HTTPTransport(local_address=address)
    return httpx.Client(base_url=server.url, transport=transport, timeout=30)


def _status(http: httpx.Client, token: str, forwarded: str | None) -> int:
    headers = {"x-api-key": token}
    if forwarded is not None:
        headers["X-Forwarded-For"] = forwarded
    return http.post("/threads/search", json={}, headers=headers).status_code


def test_an_untrusted_peer_is_locked_out_whatever_it_forwards(proxied_server: Server) -> None:
    # Only this test connects from 127.0.0.1, so its count starts at zero.
    good = proxied_server.tokens["alice"]
    with _from("127.0.0.1", proxied_server) as http:
        answers = [_status(http, f"crg_bad{i}", f"198.51.100.{i}") for i in range(25)]
        assert answers[:LIMIT] == [401] * LIMIT
        assert answers[LIMIT:] == [429] * (25 - LIMIT)
        # The right token, with yet another forwarded address: still the same peer.
        assert _status(http, good, "203.0.113.99") == 429
    with _from(PROXY, proxied_server) as proxy:
        # Another peer is not affected.
        assert _status(proxy, good, "192.0.2.1") == 200


def test_behind_a_trusted_proxy_each_client_has_its_own_count(proxied_server: Server) -> None:
    good = proxied_server.tokens["bob"]
    victim = "203.0.113.7"
    with _from(PROXY, proxied_server) as proxy:
        # The attacker (198.51.100.1) writes the victim's address into the header; the
        # proxy appends the address the request really came from, then a second
        # trusted proxy (10.1.2.3) appends its own hop.
        attack = f"{victim}, 198.51.100.1, 10.1.2.3"
        answers = [_status(proxy, "crg_guess", attack) for _ in range(25)]
        assert answers[:LIMIT] == [401] * LIMIT
        assert answers[LIMIT:] == [429] * (25 - LIMIT)
        assert _status(proxy, good, "198.51.100.1") == 429  # the attacker is locked out
        assert _status(proxy, good, victim) == 200  # the named address is not
        assert _status(proxy, good, "198.51.100.2") == 200  # nor another client
        assert _status(proxy, good, f"198.51.100.1, {victim}") == 200


def test_the_documented_uvicorn_command_does_not_rewrite_the_peer() -> None:
    """docs/deployment.md gives uvicorn the options the tests run it with."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "deployment.md").read_text()
    commands = [line for line in text.splitlines() if re.match(r"\s*uvicorn\s", line)]
    assert commands
    for command in commands:
        for option in UVICORN_OPTIONS:
            assert option in command.split(), command


@pytest.mark.parametrize(
    ("peer", "forwarded", "client"),
    [
        ("198.51.100.9", "1.2.3.4", "198.51.100.9"),  # untrusted peer: header ignored
        ("10.0.0.5", "1.2.3.4, 198.51.100.9", "198.51.100.9"),  # right-most untrusted
        ("10.0.0.5", "1.2.3.4, 198.51.100.9, 10.0.0.6", "198.51.100.9"),  # two proxies
        ("10.0.0.5", "", "10.0.0.5"),  # no header: the proxy itself
        ("10.0.0.5", "10.0.0.7", "10.0.0.7"),  # only proxies: the farthest one
        ("10.0.0.5", "1.2.3.4, junk", "10.0.0.5"),  # not an address: stop there
        ("10.0.0.5", "2001:db8::1", "2001:db8::1"),
        ("::ffff:10.0.0.5", "198.51.100.9", "198.51.100.9"),  # IPv4-mapped peer
    ],
)
def test_the_client_address_is_the_right_most_untrusted_hop(
    peer: str, forwarded: str, client: str
) -> None:
    from api.auth import client_ip

    request = RequestFactory().get("/", REMOTE_ADDR=peer, HTTP_X_FORWARDED_FOR=forwarded)
    with override_settings(CRIOGEN_TRUSTED_PROXIES=["10.0.0.0/8"]):
        assert client_ip(request) == client
    with override_settings(CRIOGEN_TRUSTED_PROXIES=[]):
        assert client_ip(request) == peer


def test_the_counts_are_those_of_django_s_default_cache() -> None:
    """The lockout keeps one LocMemCache object (api.auth._cache): it reads and writes
    the counts every other object of Django's default cache sees, clears with it, and
    follows a change of CACHES."""
    from django.core.cache import cache

    from api.auth import _keys, _note_failure, auth_failures_retry_after

    address = "203.0.113.77"
    request = RequestFactory().get("/threads", REMOTE_ADDR=address)
    count_key, _ = _keys(address)
    cache.clear()
    for _ in range(LIMIT - 1):
        _note_failure(request)
    assert cache.get(count_key) == LIMIT - 1
    assert auth_failures_retry_after(request) is None
    _note_failure(request)
    assert 1 <= (auth_failures_retry_after(request) or 0) <= 60
    cache.clear()
    assert auth_failures_retry_after(request) is None
    other = {
        "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "x"}
    }
    cache.set(count_key, LIMIT)
    assert auth_failures_retry_after(request) is not None
    with override_settings(CACHES=other):
        assert auth_failures_retry_after(request) is None  # another cache: no counts
    assert auth_failures_retry_after(request) is not None
    cache.clear()
