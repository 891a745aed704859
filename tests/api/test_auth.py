"""Auth and isolation: API tokens as ``Authorization: Bearer`` or ``x-api-key``;
another user's threads and runs are a 404, never a hint that they exist; operators see
everything; ``CRIOGEN_AUTH_ENABLED=False`` turns auth off for local development."""

from __future__ import annotations

import contextlib
import hashlib
import json
import sqlite3
from typing import Any

import httpx
import pytest
from langgraph_sdk import get_client
from langgraph_sdk.errors import AuthenticationError, NotFoundError

from tests.api.conftest import Server


def test_a_request_without_a_token_is_a_401(server: Server) -> None:
    response = httpx.post(server.url + "/threads", json={})
    assert response.status_code == 401
    assert response.json()["code"] == "unauthorized"
    assert response.headers["WWW-Authenticate"] == "Bearer"


def test_a_wrong_token_is_a_401(server: Server) -> None:
    for headers in ({"x-api-key": "crg_nope"}, {"Authorization": "Bearer crg_nope"}):
        assert httpx.get(server.url + "/threads/x", headers=headers).status_code == 401


def test_a_bearer_token_and_an_api_key_both_work(server: Server) -> None:
    token = server.tokens["alice"]
    bearer = httpx.post(
        server.url + "/threads", json={}, headers={"Authorization": f"Bearer {token}"}
    )
    key = httpx.post(server.url + "/threads", json={}, headers={"x-api-key": token})
    assert bearer.status_code == key.status_code == 200


async def test_the_sdk_without_a_key_gets_an_authentication_error(server: Server) -> None:
    async with get_client(url=server.url, api_key=None) as anonymous:
        with pytest.raises(AuthenticationError):
            await anonymous.threads.search()


def test_health_and_info_need_no_token(server: Server) -> None:
    assert httpx.get(server.url + "/ok").json() == {"ok": True}
    info = httpx.get(server.url + "/info").json()
    assert info["metadata"]["server"] == "criogen"


def test_tokens_are_stored_hashed(server: Server) -> None:
    path = server.database_url.removeprefix("sqlite://")
    with sqlite3.connect(path) as db:
        stored = {row[0] for row in db.execute("SELECT token_hash FROM api_apitoken")}
    token = server.tokens["alice"]
    assert token not in stored
    assert hashlib.sha256(token.encode()).hexdigest() in stored


async def test_another_users_thread_is_a_404_everywhere(clients: Any) -> None:
    alice, bob = clients("alice"), clients("bob")
    thread = await alice.threads.create(graph_id="steps", metadata={"secret": "yes"})
    tid = thread["thread_id"]
    run = await alice.runs.create(tid, "steps", input={"n": 0})
    await alice.runs.join(tid, run["run_id"])
    attempts = [
        bob.threads.get(tid),
        bob.threads.update(tid, metadata={"x": 1}),
        bob.threads.delete(tid),
        bob.threads.copy(tid),
        bob.threads.get_state(tid),
        bob.threads.get_history(tid),
        bob.threads.update_state(tid, {"n": 1}, as_node="a"),
        bob.runs.create(tid, "steps", input={}),
        bob.runs.get(tid, run["run_id"]),
        bob.runs.list(tid),
        bob.runs.cancel(tid, run["run_id"]),
        bob.runs.delete(tid, run["run_id"]),
    ]
    for attempt in attempts:
        with pytest.raises(NotFoundError) as caught:
            await attempt
        assert caught.value.body["code"] == "thread_not_found"
    with pytest.raises(NotFoundError):
        await bob.runs.join_stream(tid, run["run_id"]).__anext__()
    assert await bob.threads.search(metadata={"secret": "yes"}, ids=[tid]) == []
    assert await bob.threads.count(metadata={"secret": "yes"}) == 0
    pruned = await bob.threads.prune([tid])
    assert pruned["pruned_count"] == 0
    assert (await alice.threads.get(tid))["values"] == {"steps": ["a", "b", "c"], "n": 3}


async def test_an_operator_sees_every_thread(clients: Any) -> None:
    thread = await clients("alice").threads.create(metadata={"who": "alice"})
    olga = clients("olga")
    seen = await olga.threads.get(thread["thread_id"])
    assert seen["metadata"]["owner"] == "alice"
    assert thread["thread_id"] in [
        t["thread_id"] for t in await olga.threads.search(ids=[thread["thread_id"]])
    ]


async def test_a_taken_thread_id_of_another_user_is_still_a_conflict(clients: Any) -> None:
    thread = await clients("alice").threads.create()
    with pytest.raises(Exception) as caught:
        await clients("bob").threads.create(thread_id=thread["thread_id"], if_exists="do_nothing")
    assert caught.value.status_code == 409  # type: ignore[attr-defined]


def test_auth_can_be_turned_off_for_local_development(open_server: Server) -> None:
    with httpx.Client(base_url=open_server.url) as http:
        created = http.post("/threads", json={"metadata": {"dev": True}})
        assert created.status_code == 200
        assert "owner" not in created.json()["metadata"]
        found = http.post("/threads/search", json={"metadata": {"dev": True}})
    assert [t["thread_id"] for t in found.json()] == [created.json()["thread_id"]]


def test_criogen_token_issues_a_working_token_for_known_users_only(server: Server) -> None:
    from tests.api.conftest import _manage

    token = _manage(server.env, "criogen_token", "bob", "--name", "cli").strip()
    assert token.startswith("crg_")
    response = httpx.post(server.url + "/threads/search", json={}, headers={"x-api-key": token})
    assert response.status_code == 200
    with pytest.raises(RuntimeError, match="no user named"):
        _manage(server.env, "criogen_token", "nobody")


# The token lookup is one hand-written statement (criogen.services.tokens): these check
# it decides as Django's ModelBackend would, on both backends.

_PEOPLE = """
import json, uuid
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from criogen.storage.models import ApiToken
User = get_user_model()
operate = Permission.objects.get(content_type__app_label="criogen", codename="operate")
suffix = uuid.uuid4().hex[:8]
group = Group.objects.create(name="operators-" + suffix)
group.permissions.add(operate)
people = {}
for role in ("direct", "grouped", "plain", "inactive", "revoked", "superuser"):
    user = User.objects.create(
        username=role + "-" + suffix,
        is_active=role != "inactive",
        is_superuser=role == "superuser",
    )
    if role == "direct":
        user.user_permissions.add(operate)
    if role == "grouped":
        user.groups.add(group)
    people[role] = ApiToken.issue(user, name="tests")[1]
ApiToken.objects.filter(user__username="revoked-" + suffix).delete()
print("PEOPLE=" + json.dumps(people))
"""


def _people(server: Server) -> dict[str, str]:
    from tests.api.conftest import _manage

    out = _manage(server.env, "shell", "-c", _PEOPLE)
    return dict(json.loads(out.split("PEOPLE=", 1)[1].strip()))


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def either_server(request: pytest.FixtureRequest) -> Server:
    """The API server on SQLite, then on PostgreSQL."""
    name = "server" if request.param == "sqlite" else "pg_server"
    return request.getfixturevalue(name)  # type: ignore[no-any-return]


def test_the_operate_permission_counts_directly_and_through_a_group(either_server: Server) -> None:
    srv = either_server
    tokens = _people(srv)
    with srv.http("alice") as alice:
        tid = alice.post("/threads", json={}).json()["thread_id"]
    seen = {}
    for role, token in tokens.items():
        response = httpx.get(f"{srv.url}/threads/{tid}", headers={"x-api-key": token})
        seen[role] = response.status_code
    assert seen == {
        "direct": 200,  # holds criogen.operate
        "grouped": 200,  # through a group
        "superuser": 200,
        "plain": 404,  # another user's thread does not exist for them
        "inactive": 401,
        "revoked": 401,
    }


def test_a_token_records_when_it_was_last_used(either_server: Server) -> None:
    from tests.api.conftest import _manage

    srv = either_server
    token = _people(srv)["plain"]
    assert (
        httpx.post(srv.url + "/threads", json={}, headers={"x-api-key": token}).status_code == 200
    )
    digest = hashlib.sha256(token.encode()).hexdigest()
    out = _manage(
        srv.env,
        "shell",
        "-c",
        "from criogen.storage.models import ApiToken; "
        f"t = ApiToken.objects.get(token_hash='{digest}'); "
        "print('USED=' + str(t.last_used is not None and t.last_used.tzinfo is not None))",
    )
    assert "USED=True" in out


# -- token expiry -------------------------------------------------------------------------

_EXPIRING = """
import json, uuid
from datetime import timedelta
from django.contrib.auth import get_user_model
from django.utils import timezone
from criogen.storage.models import ApiToken
user = get_user_model().objects.create(username="exp-" + uuid.uuid4().hex[:8])
now = timezone.now()
print("TOKENS=" + json.dumps({
    "expired": ApiToken.issue(user, expires_at=now - timedelta(seconds=1))[1],
    "valid": ApiToken.issue(user, expires_at=now + timedelta(days=1))[1],
    "never": ApiToken.issue(user, expires_at=None)[1],
}))
"""


def test_an_expired_token_is_a_401_token_expired(either_server: Server) -> None:
    from tests.api.conftest import _manage

    srv = either_server
    out = _manage(srv.env, "shell", "-c", _EXPIRING)
    tokens = json.loads(out.split("TOKENS=", 1)[1].strip())
    for kind in ("valid", "never"):
        ok = httpx.post(srv.url + "/threads/search", json={}, headers={"x-api-key": tokens[kind]})
        assert ok.status_code == 200, (kind, ok.text)
    for headers in (
        {"x-api-key": tokens["expired"]},
        {"Authorization": f"Bearer {tokens['expired']}"},
    ):
        refused = httpx.post(srv.url + "/threads/search", json={}, headers=headers)
        assert refused.status_code == 401
        body = refused.json()
        assert body["code"] == "token_expired"
        assert "expired" in body["detail"] and body["expired_at"]
        assert refused.headers["WWW-Authenticate"].startswith("Bearer")


def _expires_at(server: Server, token: str) -> str:
    """The token's expiry (ISO, or "never"), read from the server's SQLite file."""
    import sqlite3
    from datetime import UTC, datetime

    digest = hashlib.sha256(token.encode()).hexdigest()
    path = server.database_url.removeprefix("sqlite://")
    with contextlib.closing(sqlite3.connect(path)) as db:
        table = next(
            name
            for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            if name.endswith("_apitoken")
        )
        (expires,) = db.execute(
            f"SELECT expires_at FROM {table} WHERE token_hash = ?",  # noqa: S608 - our table
            [digest],
        ).fetchone()
    if expires is None:
        return "never"
    return datetime.fromisoformat(expires).replace(tzinfo=UTC).isoformat()


def test_new_tokens_live_for_the_default_ttl_unless_given_their_own(server: Server) -> None:
    from datetime import UTC, datetime, timedelta

    from tests.api.conftest import _manage

    ttl_env = {**server.env, "CRIOGEN_TOKEN_TTL_DAYS": "7"}
    default = _manage(ttl_env, "criogen_token", "bob").strip()
    own = _manage(ttl_env, "criogen_token", "bob", "--expires-in-days", "2").strip()
    never = _manage(ttl_env, "criogen_token", "bob", "--expires-in-days", "0").strip()
    unset = _manage(server.env, "criogen_token", "bob").strip()
    now = datetime.now(UTC)
    week = datetime.fromisoformat(_expires_at(server, default)) - now
    assert timedelta(days=6, hours=23) < week <= timedelta(days=7)
    two = datetime.fromisoformat(_expires_at(server, own)) - now
    assert timedelta(days=1, hours=23) < two <= timedelta(days=2)
    assert _expires_at(server, never) == "never"
    assert _expires_at(server, unset) == "never"
    with pytest.raises(RuntimeError, match="expires-in-days"):
        _manage(server.env, "criogen_token", "bob", "--expires-in-days", "-1")
