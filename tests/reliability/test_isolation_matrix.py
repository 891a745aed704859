"""The isolation matrix: every operation of the live OpenAPI schema and every dashboard
route (HTTP and WebSocket), tried by another user on alice's objects and by an anonymous
caller.

alice (a regular user) owns a finished thread and its run, a thread waiting for a
person, a cron and a store item; the operator olga owns an assistant (assistants are
shared: everyone signed in may read them, only operators change them). bob, another
regular user with his own token and his own dashboard login, must get a 404 on every
path naming alice's objects (a 403 where the contract says so: changing an assistant,
acting on the dashboard), find none of them in his lists and searches, and change
nothing; anonymous callers get a 401 from every API operation except the public
health and version checks, and the sign-in page from every dashboard page.

The operations and routes are read from the running server's ``/openapi.json`` and from
``dashboard.urls`` / ``dashboard.routing``: one that no case below covers fails the
test, so a new endpoint cannot be forgotten.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect as ws_connect

from dashboard.converters import encode_thread_id
from tests.api.conftest import Server
from tests.conftest import PASSWORD
from tests.reliability.conftest import Figures
from tests.reliability.helpers import dashboard_session

pytestmark = pytest.mark.postgres

PUBLIC_OPERATIONS = {"ok", "info"}
"""Health and version: no token needed (as on LangGraph Platform, see api/routers/system.py)."""

BOB_PASSWORD = PASSWORD  # the cast's one password (tests/conftest.py)
NEVER = "0 0 1 1 *"
"""A cron schedule that does not fire during the test (1 January, midnight)."""


@dataclass
class World:
    """alice's objects (and the ids bob must never reach)."""

    thread: str
    run: str
    waiting: str
    """A thread of alice's suspended for a person."""
    waiting_head: str
    cron: str
    namespace: list[str]
    key: str
    assistant: str
    """olga's assistant (shared: readable by all, changeable by operators only)."""
    bob_thread: str
    marker: str
    """In alice's metadata, so a search by it shows whether bob sees her threads."""


@pytest.fixture(scope="module")
def world(rel_server: Server) -> World:
    marker = f"iso-{uuid.uuid4().hex[:10]}"
    with rel_server.http("alice") as alice, rel_server.http("olga") as olga:
        tid = alice.post("/threads", json={"metadata": {"marker": marker}}).json()["thread_id"]
        done = alice.post(f"/threads/{tid}/runs", json={"assistant_id": "steps", "input": {}})
        assert done.status_code == 200, done.text
        run = done.json()["run_id"]
        assert alice.get(f"/threads/{tid}/runs/{run}/join").status_code == 200
        waiting = alice.post("/threads", json={"metadata": {"marker": marker}}).json()["thread_id"]
        wait = alice.post(
            f"/threads/{waiting}/runs/wait", json={"assistant_id": "hitl", "input": {}}
        )
        assert wait.status_code == 200, wait.text
        state = alice.get(f"/threads/{waiting}/state").json()
        assert state["next"] == ["ask"], state
        head = state["checkpoint"]["checkpoint_id"]
        cron = alice.post(
            f"/threads/{tid}/runs/crons", json={"assistant_id": "steps", "schedule": NEVER}
        )
        assert cron.status_code == 200, cron.text
        namespace = ["iso", marker]
        put = alice.put(
            "/store/items", json={"namespace": namespace, "key": "k", "value": {"m": marker}}
        )
        assert put.status_code == 204, put.text
        assistant = olga.post(
            "/assistants", json={"graph_id": "steps", "name": marker, "metadata": {"m": marker}}
        )
        assert assistant.status_code == 200, assistant.text
    with rel_server.http("bob") as bob:
        bob_thread = bob.post("/threads", json={}).json()["thread_id"]
    return World(
        thread=tid,
        run=run,
        waiting=waiting,
        waiting_head=head,
        cron=cron.json()["cron_id"],
        namespace=namespace,
        key="k",
        assistant=assistant.json()["assistant_id"],
        bob_thread=bob_thread,
        marker=marker,
    )


@pytest.fixture(scope="module")
def schema(rel_server: Server) -> dict[str, Any]:
    response = httpx.get(rel_server.url + "/openapi.json", timeout=30)
    assert response.status_code == 200
    return dict(response.json())


def operations(schema: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """operation id -> (method, path template) of every operation in the schema."""
    out = {}
    for path, item in schema["paths"].items():
        for method, op in item.items():
            if method in ("get", "post", "put", "patch", "delete"):
                out[op["operationId"]] = (method.upper(), path)
    return out


# -- the API: operations that name alice's objects in their path -------------------------

RUN = {"assistant_id": "steps", "input": {}}
BODIES: dict[str, Any] = {
    "patch_thread": {"metadata": {"taken": "by bob"}},
    "post_thread_history": {},
    "create_run": RUN,
    "wait_run": RUN,
    "stream_run": RUN,
    "create_thread_cron": {"assistant_id": "steps", "schedule": NEVER},
    "update_thread_state": {"values": {"n": 666}},
    "post_thread_state_at_checkpoint": {"checkpoint": {}},
    "patch_cron": {"schedule": "0 0 2 1 *"},
    "patch_assistant": {"metadata": {"taken": "by bob"}},
    "set_assistant_latest": {"version": 1},
    "get_assistant_versions": {},
}
ASSISTANT_READS = {
    "get_assistant",
    "get_assistant_graph",
    "get_assistant_schemas",
    "get_assistant_subgraphs",
    "get_assistant_subgraphs_by_namespace",
    "get_assistant_versions",
}
"""Assistants are shared by all users (api/routers/assistants.py): reading one is allowed."""


def fill(path: str, world: World, *, thread: str | None = None) -> str:
    """The path with alice's ids (the waiting thread, whose head is a checkpoint)."""
    values = {
        "thread_id": thread or world.waiting,
        "run_id": world.run,
        "cron_id": world.cron,
        "assistant_id": world.assistant,
        "checkpoint_id": world.waiting_head,
        "namespace": "sub",
    }
    if "{run_id}" in path and thread is None:
        values["thread_id"] = world.thread  # the run is on this thread
    return re.sub(r"\{(\w+)\}", lambda m: quote(values[m.group(1)], safe=""), path)


def call(http: httpx.Client, method: str, path: str, body: Any = None) -> httpx.Response:
    """One request; a stream is read only as far as its status (a 404 has no stream)."""
    with http.stream(method, path, json=body, timeout=30) as response:
        if response.status_code == 200 and "text/event-stream" in response.headers.get(
            "content-type", ""
        ):
            return response
        response.read()
        return response


def untouched(rel_server: Server, world: World) -> None:
    """alice's objects are as she left them."""
    with rel_server.http("alice") as alice, rel_server.http("olga") as olga:
        thread = alice.get(f"/threads/{world.thread}").json()
        assert "taken" not in thread["metadata"], thread
        run = alice.get(f"/threads/{world.thread}/runs/{world.run}")
        assert run.status_code == 200 and run.json()["status"] == "success", run.text
        state = alice.get(f"/threads/{world.waiting}/state").json()
        assert state["checkpoint"]["checkpoint_id"] == world.waiting_head
        assert state["next"] == ["ask"] and state["values"].get("n") != 666
        crons = alice.post("/runs/crons/search", json={}).json()
        mine = [c for c in crons if c["cron_id"] == world.cron]
        assert len(mine) == 1 and mine[0]["schedule"] == NEVER, crons
        item = alice.get(
            "/store/items", params={"namespace": ".".join(world.namespace), "key": "k"}
        )
        assert item.status_code == 200 and item.json()["value"] == {"m": world.marker}
        assistant = olga.get(f"/assistants/{world.assistant}").json()
        assert "taken" not in assistant["metadata"] and assistant["version"] == 1


def test_api_every_operation_is_isolated(
    rel_server: Server, world: World, schema: dict[str, Any], figures: Figures
) -> None:
    ops = operations(schema)
    named = {op: mp for op, mp in ops.items() if "{" in mp[1]}
    listing = {op: mp for op, mp in ops.items() if "{" not in mp[1]}
    uncovered = set(listing) - set(COLLECTION_CHECKS) - PUBLIC_OPERATIONS
    assert not uncovered, f"operations with no isolation case: {sorted(uncovered)}"
    passed = 0
    with rel_server.http("bob") as bob:
        for op, (method, path) in sorted(named.items()):
            response = call(bob, method, fill(path, world), BODIES.get(op))
            if op in ASSISTANT_READS:
                expected = 200  # shared by contract
            elif "{assistant_id}" in path:
                expected = 403  # only operators change assistants
            else:
                expected = 404
            assert response.status_code == expected, (op, response.status_code, response.text)
            if expected == 404:
                assert response.json()["code"].endswith("not_found"), (op, response.text)
            passed += 1
            if "{run_id}" in path:
                # alice's run through bob's own thread: still a 404.
                other = call(bob, method, fill(path, world, thread=world.bob_thread))
                assert other.status_code == 404, (op, other.status_code, other.text)
                passed += 1
        for op in sorted(listing):
            if op in PUBLIC_OPERATIONS:
                continue
            passed += COLLECTION_CHECKS[op](bob, world)
    untouched(rel_server, world)
    figures.isolation_checks_passed += passed


def test_api_anonymous_gets_401_on_every_operation_but_the_public_ones(
    rel_server: Server, world: World, schema: dict[str, Any], figures: Figures
) -> None:
    with rel_server.http(None) as anonymous:
        for op, (method, path) in sorted(operations(schema).items()):
            response = call(anonymous, method, fill(path, world), BODIES.get(op))
            if op in PUBLIC_OPERATIONS:
                assert response.status_code == 200, (op, response.text)
            else:
                assert response.status_code == 401, (op, response.status_code, response.text)
                assert response.json()["code"] == "unauthorized"
                assert response.headers["WWW-Authenticate"] == "Bearer"
            figures.isolation_checks_passed += 1
    untouched(rel_server, world)


# -- the API: lists, searches and bulk operations ----------------------------------------


def _no_threads_of_alice(rows: list[dict[str, Any]], world: World) -> None:
    ids = {r.get("thread_id") for r in rows}
    assert not ids & {world.thread, world.waiting}, rows


def _threads(bob: httpx.Client, world: World) -> int:
    everything = bob.post("/threads/search", json={"limit": 1000}).json()
    _no_threads_of_alice(everything, world)
    by_id = bob.post("/threads/search", json={"ids": [world.thread, world.waiting]}).json()
    by_meta = bob.post("/threads/search", json={"metadata": {"marker": world.marker}}).json()
    assert by_id == [] and by_meta == []
    return 3


def _count(bob: httpx.Client, world: World) -> int:
    assert bob.post("/threads/count", json={"metadata": {"marker": world.marker}}).json() == 0
    return 1


def _create_with_alices_id(bob: httpx.Client, world: World) -> int:
    # Ids are chosen by callers; an existing one is a conflict, never alice's thread.
    for policy in ("raise", "do_nothing"):
        response = bob.post("/threads", json={"thread_id": world.thread, "if_exists": policy})
        assert response.status_code == 409, (policy, response.text)
        assert world.marker not in response.text
    return 2


def _prune(bob: httpx.Client, world: World) -> int:
    response = bob.post("/threads/prune", json={"thread_ids": [world.thread, world.waiting]})
    assert response.status_code == 200, response.text
    assert response.json()["deleted"] == 0 and response.json()["pruned"] == 0
    return 1


def _cancel(bob: httpx.Client, world: World) -> int:
    by_thread = bob.post("/runs/cancel", json={"thread_id": world.waiting, "status": "all"})
    assert by_thread.status_code == 404, by_thread.text
    by_ids = bob.post("/runs/cancel", json={"run_ids": [world.run]})
    assert by_ids.status_code == 204, by_ids.text  # nothing of bob's matched
    return 2


def _batch(bob: httpx.Client, world: World) -> int:
    response = bob.post("/runs/batch", json=[{**RUN, "thread_id": world.waiting}])
    assert response.status_code == 404, response.text
    return 1


def _stateless(op: str) -> Callable[[httpx.Client, World], int]:
    """A stateless run names no thread; bob's lands on a new thread of his own."""

    def check(bob: httpx.Client, world: World) -> int:
        path = {"create_stateless_run": "/runs", "wait_stateless_run": "/runs/wait"}
        if op == "stream_stateless_run":
            response = call(bob, "POST", "/runs/stream", {**RUN, "stream_mode": "values"})
            response.close()
        else:
            response = bob.post(path[op], json={**RUN, "on_completion": "keep"})
        assert response.status_code == 200, response.text
        _no_threads_of_alice(bob.post("/threads/search", json={"limit": 1000}).json(), world)
        return 1

    return check


def _crons(bob: httpx.Client, world: World) -> int:
    found = bob.post("/runs/crons/search", json={"limit": 1000}).json()
    assert world.cron not in {c["cron_id"] for c in found}
    on_thread = bob.post("/runs/crons/search", json={"thread_id": world.thread}).json()
    assert on_thread == []
    assert bob.post("/runs/crons/count", json={"thread_id": world.thread}).json() == 0
    return 3


def _stateless_cron(bob: httpx.Client, world: World) -> int:
    made = bob.post("/runs/crons", json={"assistant_id": "steps", "schedule": NEVER})
    assert made.status_code == 200, made.text
    assert bob.delete(f"/runs/crons/{made.json()['cron_id']}").status_code == 204
    return 1


def _store_get(bob: httpx.Client, world: World) -> int:
    ns = ".".join(world.namespace)
    assert bob.get("/store/items", params={"namespace": ns, "key": "k"}).status_code == 404
    return 1


def _store_put(bob: httpx.Client, world: World) -> int:
    # bob writes the same namespace and key: his own store, alice's item is untouched
    # (checked at the end); his copy is found by him, then deleted again.
    body = {"namespace": world.namespace, "key": "k", "value": {"m": "bob"}}
    assert bob.put("/store/items", json=body).status_code == 204
    ns = ".".join(world.namespace)
    assert bob.get("/store/items", params={"namespace": ns, "key": "k"}).json()["value"] == {
        "m": "bob"
    }
    gone = bob.request("DELETE", "/store/items", json={"namespace": world.namespace, "key": "k"})
    assert gone.status_code == 204
    return 1


def _store_delete(bob: httpx.Client, world: World) -> int:
    body = {"namespace": world.namespace, "key": "k"}
    assert bob.request("DELETE", "/store/items", json=body).status_code == 204
    return 1


def _store_search(bob: httpx.Client, world: World) -> int:
    found = bob.post("/store/items/search", json={"namespace_prefix": ["iso"], "limit": 1000})
    values = [i["value"] for i in found.json()["items"]]
    assert {"m": world.marker} not in values, values
    by_query = bob.post("/store/items/search", json={"query": world.marker}).json()["items"]
    assert by_query == []
    return 2


def _store_namespaces(bob: httpx.Client, world: World) -> int:
    found = bob.post("/store/namespaces", json={"prefix": world.namespace}).json()
    assert found["namespaces"] == [], found
    return 1


def _assistant_create(bob: httpx.Client, world: World) -> int:
    response = bob.post("/assistants", json={"graph_id": "steps"})
    assert response.status_code == 403, response.text
    return 1


def _assistants_shared(bob: httpx.Client, world: World) -> int:
    # Shared by contract: bob sees olga's assistant (and cannot change it, above).
    found = bob.post("/assistants/search", json={"metadata": {"m": world.marker}}).json()
    assert [a["assistant_id"] for a in found] == [world.assistant]
    assert bob.post("/assistants/count", json={"metadata": {"m": world.marker}}).json() == 1
    return 0


COLLECTION_CHECKS: dict[str, Callable[[httpx.Client, World], int]] = {
    "create_thread": _create_with_alices_id,
    "search_threads": _threads,
    "count_threads": _count,
    "prune_threads": _prune,
    "cancel_runs": _cancel,
    "create_runs_batch": _batch,
    "create_stateless_run": _stateless("create_stateless_run"),
    "wait_stateless_run": _stateless("wait_stateless_run"),
    "stream_stateless_run": _stateless("stream_stateless_run"),
    "create_cron": _stateless_cron,
    "search_crons": _crons,
    "count_crons": _crons,
    "get_item": _store_get,
    "put_item": _store_put,
    "delete_item": _store_delete,
    "search_items": _store_search,
    "list_namespaces": _store_namespaces,
    "create_assistant": _assistant_create,
    "search_assistants": _assistants_shared,
    "count_assistants": _assistants_shared,
}


# -- the dashboard -------------------------------------------------------------------------


def dashboard_routes() -> dict[str, str]:
    """name -> route of every ``dashboard.urls`` pattern."""
    from dashboard import urls

    return {p.name: str(p.pattern) for p in urls.urlpatterns if p.name}


def dashboard_url(route: str, world: World) -> str:
    values = {"thread_id": world.waiting, "checkpoint_id": world.waiting_head}

    def segment(m: re.Match[str]) -> str:
        value = values[m.group(2)]
        return quote(encode_thread_id(value) if m.group(1) == "thread:" else value, safe="~")

    return "/" + re.sub(r"<(\w+:)?(\w+)>", segment, route)


def signed_in(server: Server, who: str, password: str) -> httpx.Client:
    if who == "olga":
        return dashboard_session(server)
    client = httpx.Client(base_url=server.url, timeout=60)
    page = client.get("/accounts/login/")
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
    assert token
    done = client.post(
        "/accounts/login/",
        data={"username": who, "password": password, "csrfmiddlewaretoken": token.group(1)},
    )
    assert done.status_code == 302 and "sessionid" in client.cookies, done.text[:300]
    return client


def post_form(client: httpx.Client, path: str, data: dict[str, Any]) -> httpx.Response:
    """A form POST with the session's CSRF token (as the dashboard's forms send it)."""
    token = client.cookies.get("csrftoken")
    assert token, "no CSRF cookie"
    return client.post(path, data={**data, "csrfmiddlewaretoken": token})


@pytest.fixture(scope="module")
def bob_ui(rel_server: Server, world: World) -> Iterator[httpx.Client]:
    client = signed_in(rel_server, "bob", BOB_PASSWORD)
    yield client
    client.close()


@pytest.fixture(scope="module")
def olga_ui(rel_server: Server) -> Iterator[httpx.Client]:
    client = dashboard_session(rel_server)
    yield client
    client.close()


def _status(response: httpx.Response, expected: int) -> int:
    assert response.status_code == expected, (
        response.request.url,
        response.status_code,
        response.text[:300],
    )
    return 1


def _list_page(bob: httpx.Client, olga: httpx.Client, path: str, world: World) -> int:
    """A list page of bob's (whole, and searched for alice's thread) shows none of
    alice's threads; the operator's, searched the same way, does (so a leak would show)."""
    checks = 0
    for params in ({}, {"q": world.waiting}):
        page = bob.get(path, params=params)
        assert page.status_code == 200, (path, page.status_code)
        # The search box and the links echo the query: what is left must not name her.
        text = page.text.replace(f'value="{world.waiting}"', "").replace(f"q={world.waiting}", "")
        for oid in (world.thread, world.waiting, world.marker):
            assert oid not in text, (path, params, oid)
        checks += 1
    if not path.endswith("/audit/"):
        seen = olga.get(path, params={"q": world.waiting})
        assert world.waiting in seen.text, path
    return checks


def _home(bob: httpx.Client, olga: httpx.Client, path: str, world: World) -> int:
    response = bob.get(path)
    assert response.status_code == 302 and response.headers["location"] == "/ui/inbox/"
    return _list_page(bob, olga, response.headers["location"], world)


def _thread(bob: httpx.Client, olga: httpx.Client, path: str, world: World) -> int:
    return _status(bob.get(path), 404) + _status(bob.get(path, headers={"HX-Request": "1"}), 404)


def _operator_only(bob: httpx.Client, olga: httpx.Client, path: str, world: World) -> int:
    return _status(bob.get(path), 403)


def _act(bob: httpx.Client, olga: httpx.Client, path: str, world: World) -> int:
    resume = {"resume": "", "value": '"bob"', "expected": world.waiting_head}
    rewind = {"rewind": "", "checkpoint": world.waiting_head}
    return _status(post_form(bob, path, resume), 403) + _status(post_form(bob, path, rewind), 403)


def _claim(bob: httpx.Client, olga: httpx.Client, path: str, world: World) -> int:
    """Claims are an operator's: bob can neither claim nor take over alice's waiting
    thread (nor learn who holds it)."""
    return _status(post_form(bob, path, {"claim": ""}), 403) + _status(
        post_form(bob, path, {"take_over": ""}), 403
    )


def _bulk(bob: httpx.Client, olga: httpx.Client, path: str, world: World) -> int:
    item = f"{world.waiting}|{world.waiting_head}"
    return _status(post_form(bob, path, {"approve": "", "item": item}), 403)


def _tokens(bob: httpx.Client, olga: httpx.Client, path: str, world: World) -> int:
    """bob's tokens page lists none of olga's tokens, and revoking one of them by its
    id changes nothing (each user manages only their own)."""
    theirs = re.findall(r'data-token="(\d+)"', olga.get(path).text)
    prefixes = re.findall(r"<code>(crg_[^<…]+)…</code>", olga.get(path).text)
    assert theirs and prefixes
    page = bob.get(path)
    assert page.status_code == 200
    assert not set(re.findall(r'data-token="(\d+)"', page.text)) & set(theirs)
    assert not any(prefix in page.text for prefix in prefixes)
    for token_id in theirs:
        done = post_form(bob, path, {"revoke": "", "token": token_id})
        assert done.status_code == 302
    assert re.findall(r'data-token="(\d+)"', olga.get(path).text) == theirs
    return 1 + len(theirs)


def _staff_only(bob: httpx.Client, olga: httpx.Client, path: str, world: World) -> int:
    """Notification settings are the site's: neither an owner nor an operator who is not
    staff may read or change them."""
    change = {"assistant": "refunds", "version": "1", "webhook": "https://evil.example/"}
    checked = _status(bob.get(path), 403) + _status(olga.get(path), 403)
    return (
        checked
        + _status(post_form(bob, path, change), 403)
        + _status(post_form(olga, path, change), 403)
    )


def _public_icon(bob: httpx.Client, olga: httpx.Client, path: str, world: World) -> int:
    """The favicon is the same static file for everyone: it names nobody's data."""
    response = bob.get(path)
    assert response.status_code in (301, 302), response.status_code
    assert "/static/" in response.headers["location"]
    return 1


DASHBOARD_CASES: dict[str, Callable[[httpx.Client, httpx.Client, str, World], int]] = {
    "home": _home,
    "inbox": _list_page,
    "threads": _list_page,
    "audit": _list_page,
    "thread": _thread,
    "checkpoint": _thread,
    "rewind_confirm": _operator_only,
    "thread_act": _act,
    "thread_claim": _claim,
    "inbox_bulk": _bulk,
    "tokens": _tokens,
    "notifications": _staff_only,
    "favicon": _public_icon,
}
PUBLIC_ROUTES = {"favicon"}
"""Dashboard routes anyone may fetch: static files that hold no one's data."""


def test_dashboard_every_page_is_isolated(
    rel_server: Server,
    world: World,
    bob_ui: httpx.Client,
    olga_ui: httpx.Client,
    figures: Figures,
) -> None:
    routes = dashboard_routes()
    assert set(routes) == set(DASHBOARD_CASES), (
        f"dashboard routes with no isolation case: {sorted(set(routes) - set(DASHBOARD_CASES))}"
    )
    passed = 0
    for name, route in sorted(routes.items()):
        checked = DASHBOARD_CASES[name](bob_ui, olga_ui, dashboard_url(route, world), world)
        assert checked, name
        passed += checked
    untouched(rel_server, world)
    figures.isolation_checks_passed += passed


def test_dashboard_anonymous_gets_the_sign_in_page_everywhere(
    rel_server: Server, world: World, figures: Figures
) -> None:
    with httpx.Client(base_url=rel_server.url, timeout=30) as anonymous:
        anonymous.get("/accounts/login/")  # a CSRF cookie, so a POST reaches the view
        for name, route in sorted(dashboard_routes().items()):
            path = dashboard_url(route, world)
            response = anonymous.get(path)
            if name in PUBLIC_ROUTES:
                assert "/static/" in response.headers["location"], name
                figures.isolation_checks_passed += 1
                continue
            if response.status_code == 405:  # a form endpoint: POST only
                response = post_form(anonymous, path, {"approve": ""})
            if name == "home":  # /ui/ redirects to the inbox, which asks to sign in
                assert response.headers["location"].endswith("/ui/inbox/")
                response = anonymous.get(response.headers["location"])
            assert response.status_code == 302, (name, response.status_code)
            assert response.headers["location"].startswith("/accounts/login/?next="), name
            figures.isolation_checks_passed += 1
    untouched(rel_server, world)


def ws_routes() -> list[str]:
    from dashboard import routing

    return [str(p.pattern) for p in routing.websocket_urlpatterns]


def _ws_first(server: Server, path: str, cookie: str | None) -> tuple[str | None, int | None]:
    """(first message, close code) of a live page's socket."""
    headers = {"Origin": server.url}
    if cookie:
        headers["Cookie"] = cookie
    url = server.url.replace("http://", "ws://") + path
    try:
        with ws_connect(url, additional_headers=headers, open_timeout=10) as sock:
            return str(sock.recv(timeout=10)), None
    except ConnectionClosed as exc:
        return None, exc.rcvd.code if exc.rcvd else None
    except Exception as exc:  # noqa: BLE001 - a refused handshake
        status = getattr(getattr(exc, "response", None), "status_code", None)
        return None, status


def test_dashboard_live_sockets_are_isolated(
    rel_server: Server,
    world: World,
    bob_ui: httpx.Client,
    olga_ui: httpx.Client,
    figures: Figures,
) -> None:
    """A refused socket is closed before it is accepted: the handshake answers 403."""
    cookie = f"sessionid={bob_ui.cookies['sessionid']}"
    routes = ws_routes()
    covered = {"ws/ui/inbox/", "ws/ui/threads/<thread:thread_id>/", "ws/ui/nav/"}
    assert set(routes) == covered, f"live routes with no isolation case: {set(routes) - covered}"
    passed = 0
    for route in routes:
        segment = quote(encode_thread_id(world.waiting), safe="~")
        path = "/" + route.replace("<thread:thread_id>", segment)
        message, code = _ws_first(rel_server, path, None)
        assert message is None and code == 403, (route, code)  # anonymous
        passed += 1
        message, code = _ws_first(rel_server, path, cookie)
        if "<thread:thread_id>" in route:
            assert message is None and code == 403, (route, code)
            # The operator's socket on the same page is accepted and names the thread.
            olga = f"sessionid={olga_ui.cookies['sessionid']}"
            seen, _ = _ws_first(rel_server, path, olga)
            assert seen is not None and world.waiting in seen, route
        else:
            assert message is not None, route
            for oid in (world.thread, world.waiting, world.marker):
                assert oid not in message, (route, oid)
        passed += 1
    figures.isolation_checks_passed += passed


def test_a_session_cookie_is_no_api_credential(
    rel_server: Server, world: World, olga_ui: httpx.Client, figures: Figures
) -> None:
    """The API takes tokens only: a signed-in browser (the operator's, even) cannot be
    made to call it cross-site, so the API needs no CSRF token."""
    for method, path in (("POST", "/threads/search"), ("GET", f"/threads/{world.waiting}")):
        response = olga_ui.request(method, path, json={} if method == "POST" else None)
        assert response.status_code == 401, (path, response.status_code)
        assert json.loads(response.text)["code"] == "unauthorized"
        figures.isolation_checks_passed += 1
