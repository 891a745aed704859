"""Intruders: the bad-token rate limit, security headers on every kind of response,
``manage.py check --deploy`` clean for production settings, and an isolation sweep
(another user's thread is a 404 on every thread path)."""

from __future__ import annotations

import json
import re
import secrets
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import httpx
import psycopg
import pytest

from tests.api.conftest import ROOT, Server, _manage, start_server, stop_server
from tests.conftest import drop_database_later
from tests.reliability.conftest import FULL, OPERATOR_PASSWORD, Figures
from tests.reliability.helpers import dashboard_session, pg, wait_idle

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


# -- CSRF on every dashboard form ---------------------------------------------------------------


def _waiting(server: Server, graph: str, body: dict[str, Any]) -> tuple[str, str]:
    """A thread of alice's suspended on ``graph``; (thread id, head checkpoint id)."""
    with server.http("alice") as alice:
        tid = alice.post("/threads", json={}).json()["thread_id"]
        done = alice.post(f"/threads/{tid}/runs/wait", json={"assistant_id": graph, **body})
        assert done.status_code == 200, done.text
        state = alice.get(f"/threads/{tid}/state").json()
    assert state["next"], state
    return tid, state["checkpoint"]["checkpoint_id"]


def _head(server: Server, tid: str) -> str:
    with server.http("alice") as alice:
        return str(alice.get(f"/threads/{tid}/state").json()["checkpoint"]["checkpoint_id"])


REFUND = {"input": {"messages": [{"role": "user", "content": "Please refund order 42"}]}}


def test_every_dashboard_form_needs_its_csrf_token(rel_server: Server, figures: Figures) -> None:
    from django.urls import URLPattern

    from dashboard import urls

    patterns = [p for p in urls.urlpatterns if isinstance(p, URLPattern)]
    for pattern in patterns:  # none of them opts out of the CSRF check
        assert not getattr(pattern.callback, "csrf_exempt", False), pattern.name
    hitl, hitl_head = _waiting(rel_server, "hitl", {"input": {}})
    refund, refund_head = _waiting(rel_server, "support", REFUND)
    values = {"thread_id": hitl, "checkpoint_id": hitl_head}
    paths = [
        "/" + re.sub(r"<(?:\w+:)?(\w+)>", lambda m: values[m.group(1)], str(p.pattern))
        for p in patterns
    ] + ["/accounts/login/", "/accounts/logout/"]
    forms = {
        f"/ui/threads/{hitl}/act/": {"resume": "", "value": '"yes"', "expected": hitl_head},
        "/ui/inbox/bulk/": {"approve": "", "item": f"{refund}|{refund_head}"},
        "/accounts/logout/": {},
        "/accounts/login/": {"username": "olga", "password": OPERATOR_PASSWORD},
    }
    with closing(dashboard_session(rel_server)) as olga:
        for path in paths:
            data = forms.get(path, {"approve": ""})
            for bad in ({}, {"csrfmiddlewaretoken": "x" * 64}):
                response = olga.post(path, data={**data, **bad})
                assert response.status_code == 403, (path, bad, response.status_code)
                assert "CSRF" in response.text
                figures.csrf_checks_passed += 1
            wrong_header = olga.post(path, data=data, headers={"X-CSRFToken": "y" * 32})
            assert wrong_header.status_code == 403, path
            figures.csrf_checks_passed += 1
        # Nothing changed: both threads still wait, the session is still signed in.
        assert _head(rel_server, hitl) == hitl_head and _head(rel_server, refund) == refund_head
        assert olga.get("/ui/inbox/").status_code == 200
        # With the token, the same forms work.
        token = olga.cookies["csrftoken"]
        for path in (f"/ui/threads/{hitl}/act/", "/ui/inbox/bulk/"):
            done = olga.post(path, data={**forms[path], "csrfmiddlewaretoken": token})
            assert done.status_code == 302, (path, done.status_code, done.text[:300])
        for tid, head in ((hitl, hitl_head), (refund, refund_head)):
            assert wait_idle(rel_server, tid) in ("idle", "interrupted")
            assert _head(rel_server, tid) != head, tid
        out = olga.post("/accounts/logout/", data={"csrfmiddlewaretoken": token})
        assert out.status_code in (200, 302)
        assert olga.get("/ui/inbox/").status_code == 302  # signed out
        figures.csrf_checks_passed += 3


# -- escaping: HTML and script in values render as text ---------------------------------------

SCRIPT = "<script>window.__criogen_xss=1</script>"
IMG = '<img src=x onerror="window.__criogen_xss=2">'
SVG = "<svg onload=window.__criogen_xss=3>"
LIVE = ("<script>window.__criogen_xss", "<img src=x onerror", "<svg onload")
SHOWN = ("&lt;script&gt;window.__criogen_xss", "&lt;img src=x onerror", "&lt;svg onload")


@pytest.fixture(scope="module")
def hostile(rel_server: Server) -> dict[str, str]:
    """Threads whose id, metadata, state values, interrupt values and tool arguments
    carry HTML and script; the dashboard pages that show them."""
    review = f"xss-{uuid.uuid4().hex[:8]}-{SVG}"
    with rel_server.http("alice") as alice:
        made = alice.post("/threads", json={"thread_id": review, "metadata": {"note": SCRIPT}})
        assert made.status_code == 200, made.text
        path = f"/threads/{quote(review, safe='')}"
        done = alice.post(
            f"{path}/runs/wait",
            json={"assistant_id": "review", "input": {"title": SCRIPT, "body": IMG}},
        )
        assert done.status_code == 200, done.text
        # The assistant column and the inbox chip come from the thread's metadata.
        assert alice.patch(path, json={"metadata": {"graph_id": IMG}}).status_code == 200
        history = alice.get(f"{path}/history", params={"limit": 100}).json()
        first = history[-1]["checkpoint"]["checkpoint_id"]
        head = history[0]["checkpoint"]["checkpoint_id"]
        refund = alice.post("/threads", json={}).json()["thread_id"]
        ask = {"messages": [{"role": "user", "content": f"Please refund order 42 {SCRIPT}"}]}
        done = alice.post(
            f"/threads/{refund}/runs/wait", json={"assistant_id": "support", "input": ask}
        )
        assert done.status_code == 200, done.text
        edit = {"type": "edit", "args": {"order_id": f"42{IMG}", "amount": 1.0}}
        done = alice.post(
            f"/threads/{refund}/runs/wait",
            json={"assistant_id": "support", "command": {"resume": {"decisions": [edit]}}},
        )
        assert done.status_code == 200, done.text
    r = quote(review, safe="")
    return {
        "threads list": f"/ui/threads/?q={quote('xss-')}",
        "inbox": f"/ui/inbox/?q={quote(review[:12])}",
        "thread (interrupt, state)": f"/ui/threads/{r}/",
        "checkpoint panel": f"/ui/threads/{r}/checkpoints/{head}/",
        "rewind confirmation": f"/ui/threads/{r}/rewind/{first}/",
        "thread (transcript, tool args)": f"/ui/threads/{refund}/",
        "audit": f"/ui/audit/?thread={refund}",
        "reflected filters (threads)": "/ui/threads/?"
        + urlencode({"q": SCRIPT, "metadata": f"k={IMG}", "assistant": SVG}),
        "reflected filters (inbox)": "/ui/inbox/?" + urlencode({"q": SCRIPT, "tool": IMG}),
        "reflected filters (audit)": "/ui/audit/?" + urlencode({"actor": SCRIPT, "action": IMG}),
    }


def test_html_in_values_renders_escaped_on_every_page(
    rel_server: Server, hostile: dict[str, str], figures: Figures
) -> None:
    with closing(dashboard_session(rel_server)) as olga:
        for name, path in hostile.items():
            headers = {"HX-Request": "true"} if "/checkpoints/" in path else {}
            page = olga.get(path, headers=headers)
            assert page.status_code in (200, 422), (name, page.status_code)
            for tag in LIVE:
                assert tag not in page.text, (name, tag)
            shown = [s for s in SHOWN if s in page.text]
            assert shown, (name, page.text[:2000])
            figures.escaping_checks_passed += 1


def test_no_injected_script_runs_in_a_browser(
    rel_server: Server, hostile: dict[str, str], figures: Figures
) -> None:
    from playwright.sync_api import sync_playwright

    from tests.conftest import need_service
    from tests.dashboard import live_server

    need_service("Chromium", live_server.chromium_available(), "apt-get install -y chromium")
    with sync_playwright() as playwright:
        browser = live_server.launch_browser(playwright)
        try:
            page = browser.new_context(base_url=rel_server.url).new_page()
            page.goto("/accounts/login/")
            page.fill("input[name=username]", "olga")
            page.fill("input[name=password]", OPERATOR_PASSWORD)
            page.click("button[name=login]")
            page.wait_for_url("**/ui/inbox/")
            for name, path in hostile.items():
                if "/checkpoints/" in path:
                    continue  # an htmx panel: the thread page loads it
                page.goto(path)
                page.wait_for_load_state("load")
                page.wait_for_timeout(200)  # an <img onerror> fires after the load
                assert page.evaluate("window.__criogen_xss") is None, name
                figures.escaping_checks_passed += 1
            # The panel, loaded by htmx into a live page, is inert too.
            page.goto(hostile["thread (interrupt, state)"])
            page.locator("a.v").last.click()
            page.wait_for_timeout(300)
            assert "<script>window.__criogen_xss=1</script>" in page.inner_text("#panel")
            assert page.evaluate("window.__criogen_xss") is None
            figures.escaping_checks_passed += 1
        finally:
            browser.close()


# -- encryption at rest --------------------------------------------------------------------------

SEALED_RUN_COLUMNS = ("input", "command", "metadata", "kwargs", "error")


@pytest.fixture
def own_database(postgres_url: str) -> Iterator[str]:
    """A database of this test's own: servers with other keys (or none) must not meet
    its sealed rows."""
    admin = postgres_url.rsplit("/", 1)[0].replace("postgres://", "postgresql://") + "/test"
    name = f"criogen_enc_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    yield postgres_url.rsplit("/", 1)[0] + "/" + name
    drop_database_later(name)


def _rows_with(database_url: str, needle: str) -> list[str]:
    """Every table of the database, read raw: the tables whose rows contain ``needle``."""
    found = []
    with pg(database_url) as db:
        tables = [
            r[0]
            for r in db.execute(
                "SELECT table_name FROM information_schema.tables "
                "WHERE table_schema = 'public' AND table_type = 'BASE TABLE'"
            ).fetchall()
        ]
        assert "criogen_run" in tables and "criogen_checkpoint" in tables
        for table in tables:
            hit = db.execute(
                f'SELECT count(*) FROM "{table}" t WHERE strpos(row_to_json(t)::text, %s) > 0',  # noqa: S608
                (needle,),
            ).fetchone()
            if hit and hit[0]:
                found.append(table)
    return found


def _run_columns(database_url: str, run_id: str) -> dict[str, str | None]:
    with pg(database_url) as db:
        row = db.execute(
            f"SELECT {', '.join(SEALED_RUN_COLUMNS)} FROM criogen_run WHERE run_id = %s",  # noqa: S608
            (run_id,),
        ).fetchone()
    assert row is not None, run_id
    return dict(zip(SEALED_RUN_COLUMNS, row, strict=True))


def _run_ids(database_url: str, tid: str) -> set[str]:
    with pg(database_url) as db:
        rows = db.execute("SELECT run_id FROM criogen_run WHERE thread_id = %s", (tid,))
        return {str(r[0]) for r in rows.fetchall()}


def _versions(database_url: str, tid: str) -> list[int]:
    with pg(database_url) as db:
        rows = db.execute(
            "SELECT version FROM criogen_checkpoint WHERE thread_id = %s ORDER BY version", (tid,)
        ).fetchall()
    return [r[0] for r in rows]


@contextmanager
def _server(database_url: str, tmp: Path, key: str | None) -> Iterator[Server]:
    settings = {"CRIOGEN_ENCRYPTION_KEY": key} if key else {}
    try:
        srv = start_server(database_url, tmp, **settings)
    except RuntimeError:
        # This test starts five servers on a shared machine: one slow start (or a port
        # taken between choosing and binding it) gets a second try.
        srv = start_server(database_url, tmp, **settings)
    try:
        yield srv
    finally:
        stop_server(srv)


def _refund_with(
    http: httpx.Client, secret: str, person: str | None = None
) -> tuple[str, list[str]]:
    """A support thread whose message, tool arguments, run metadata and config carry
    ``secret``, for ``person`` (its ``user_id``: the agent looks their memory facts up
    on every model call); (thread id, run ids)."""
    tid = http.post("/threads", json={}).json()["thread_id"]
    ask: dict[str, Any] = {
        "messages": [{"role": "user", "content": f"Refund order 42, code {secret}"}]
    }
    if person is not None:
        ask["user_id"] = person
    extra = {"metadata": {"m": secret}, "config": {"configurable": {"m": secret}}}
    first = http.post(
        f"/threads/{tid}/runs", json={"assistant_id": "support", "input": ask, **extra}
    )
    assert first.status_code == 200, first.text
    assert http.get(f"/threads/{tid}/runs/{first.json()['run_id']}/join").status_code == 200
    edit = {"type": "edit", "args": {"order_id": f"42-{secret}", "amount": 1.0}}
    second = http.post(
        f"/threads/{tid}/runs",
        json={"assistant_id": "support", "command": {"resume": {"decisions": [edit]}}},
    )
    assert second.status_code == 200, second.text
    done = http.get(f"/threads/{tid}/runs/{second.json()['run_id']}/join").json()
    assert f"42-{secret}" in json.dumps(done), done
    return tid, [first.json()["run_id"], second.json()["run_id"]]


def _memory(srv: Server, person: str, fact: str | None = None) -> list[str]:
    """Through the server's own configuration (its database and key): add ``fact``
    about ``person`` to the support agent's memory, then list what is known of them."""
    code = (
        "from criogen import Memory, Storage\n"
        "memory = Memory.by_state('user_id').bind(Storage.default())\n"
        + (f"memory.add({person!r}, {fact!r})\n" if fact else "")
        + f"print('FACTS=' + '|'.join(f.text for f in memory.list({person!r})))\n"
    )
    out = _manage(srv.env, "shell", "-c", code)
    listed = out.split("FACTS=", 1)[1].strip()
    return listed.split("|") if listed else []


def _failing_run(http: httpx.Client, secret: str) -> str:
    """A run whose error message quotes ``secret`` (``int()`` of the input)."""
    tid = http.post("/threads", json={}).json()["thread_id"]
    run = http.post(
        f"/threads/{tid}/runs", json={"assistant_id": "steps", "input": {"n": f"x-{secret}"}}
    ).json()["run_id"]
    http.get(f"/threads/{tid}/runs/{run}/join")
    row = http.get(f"/threads/{tid}/runs/{run}").json()
    assert row["status"] == "error", row
    return run


def test_encryption_at_rest_keeps_no_plaintext_and_rotates(
    own_database: str, tmp_path: Path, figures: Figures
) -> None:
    from criogen.engine.crypto import Cipher, EncryptionKeyInvalid, generate_key

    old_key, new_key = generate_key(), generate_key()
    plain, secret, later = (f"{w}-{uuid.uuid4().hex[:10]}" for w in ("plain", "zanzibar", "later"))
    # Written before encryption was turned on: stays readable afterwards.
    with _server(own_database, tmp_path, None) as srv, srv.http("alice") as http:
        legacy = http.post("/threads", json={}).json()["thread_id"]
        legacy_run = http.post(
            f"/threads/{legacy}/runs/wait",
            json={"assistant_id": "steps", "input": {"n": 1}, "metadata": {"m": plain}},
        )
        assert legacy_run.status_code == 200, legacy_run.text
    assert _rows_with(own_database, plain) == ["criogen_run"]  # in clear, as written
    person = f"person-{secret}"  # a memory subject: a person's id is user data too
    with _server(own_database, tmp_path, old_key) as srv, srv.http("alice") as http:
        assert _memory(srv, person, "Prefers e-mail.") == ["Prefers e-mail."]
        refund, runs = _refund_with(http, secret, person)
        failed = _failing_run(http, secret)
        put = {"namespace": ["vault"], "key": "code", "value": {"code": secret}}
        assert http.put("/store/items", json=put).status_code == 204
        hitl = http.post("/threads", json={}).json()["thread_id"]
        http.post(f"/threads/{hitl}/runs/wait", json={"assistant_id": "hitl", "input": {}})
        answered = http.post(
            f"/threads/{hitl}/runs/wait",
            json={"assistant_id": "hitl", "command": {"resume": {"answer": secret}}},
        )
        assert answered.status_code == 200 and secret in answered.text
        # Through the API everything reads back in clear.
        got = http.get(f"/threads/{refund}/runs/{runs[0]}").json()
        assert got["metadata"]["m"] == secret and secret in json.dumps(got["kwargs"])
        assert secret in json.dumps(http.get(f"/threads/{refund}/state").json())
        legacy_got = http.get(f"/threads/{legacy}/runs").json()[0]
        assert legacy_got["metadata"]["m"] == plain
    # Raw tables: no plaintext of state, messages, tool arguments, run input, command,
    # metadata, config, error, decisions, effects, documents, memory subjects.
    assert _rows_with(own_database, secret) == []
    figures.encryption_checks_passed += 1
    old_cipher = Cipher(old_key)
    for run_id in [*runs, failed]:
        columns = _run_columns(own_database, run_id)
        assert columns["error"] is not None or run_id != failed
        for name, value in columns.items():
            if value is not None:
                assert value.startswith("gAAAAA"), (name, value[:40])
                old_cipher.open(value)
        figures.encryption_checks_passed += 1
    # Rotation: the new key first, the old one kept.
    with _server(own_database, tmp_path, f"{new_key},{old_key}") as srv, srv.http("alice") as http:
        assert secret in json.dumps(http.get(f"/threads/{refund}/state").json())
        assert http.get(f"/threads/{refund}/runs/{runs[1]}").json()["status"] == "success"
        assert http.get(f"/threads/{refund}/runs/{runs[0]}").json()["metadata"]["m"] == secret
        item = http.get("/store/items", params={"namespace": "vault", "key": "code"}).json()
        assert item["value"] == {"code": secret}
        assert http.get(f"/threads/{legacy}/runs").json()[0]["metadata"]["m"] == plain
        figures.encryption_checks_passed += 1
        newer, newer_runs = _refund_with(http, later)
        # The person's facts are found by the old key's digest, and new ones by the new.
        assert _memory(srv, person, "Lives in Lyon.") == ["Prefers e-mail.", "Lives in Lyon."]
        figures.encryption_checks_passed += 1
    assert _rows_with(own_database, later) == []
    new_cipher = Cipher(new_key)
    for value in _run_columns(own_database, newer_runs[0]).values():
        if value is not None:
            new_cipher.open(value)  # sealed with the new key...
            with pytest.raises(EncryptionKeyInvalid):
                old_cipher.open(value)  # ...not the old one
    old_cipher.open(str(_run_columns(own_database, runs[0])["input"]))  # old rows stay as they were
    figures.encryption_checks_passed += 1
    # A wrong key, or none: a clear error code, and nothing written (no checkpoint; with
    # a wrong key not even the run's row, which no right key could read back).
    # (The fast subset tries a wrong key; make reliability also runs with none.)
    for key in (generate_key(), None) if FULL else (generate_key(),):
        before = (_versions(own_database, refund), _run_ids(own_database, refund))
        with _server(own_database, tmp_path, key) as srv, srv.http("alice") as http:
            state = http.get(f"/threads/{refund}/state")
            assert state.status_code == 422 and state.json()["code"] == "encryption_key_invalid"
            run = http.get(f"/threads/{refund}/runs/{runs[0]}")
            assert run.json()["code"] == "encryption_key_invalid", run.text
            ask = {"messages": [{"role": "user", "content": "hi"}]}
            again = http.post(
                f"/threads/{refund}/runs/wait", json={"assistant_id": "support", "input": ask}
            )
            assert "encryption_key_invalid" in again.text, again.text
            if key is not None:
                assert again.status_code == 422, again.text
            assert http.get(f"/threads/{legacy}/state").status_code == 200  # clear rows read
            # A new conversation of a person whose facts this key cannot read: the
            # memory lookup fails the same way, instead of showing no facts.
            fresh = http.post("/threads", json={}).json()["thread_id"]
            ask = {**ask, "user_id": person}
            remembered = http.post(
                f"/threads/{fresh}/runs/wait", json={"assistant_id": "support", "input": ask}
            )
            assert "encryption_key_invalid" in remembered.text, remembered.text
        after = (_versions(own_database, refund), _run_ids(own_database, refund))
        assert after[0] == before[0]
        if key is not None:
            assert after[1] == before[1]
        figures.encryption_checks_passed += 1
    with _server(own_database, tmp_path, f"{new_key},{old_key}") as srv, srv.http("alice") as http:
        listed = http.get(f"/threads/{refund}/runs", params={"limit": 100})
        assert listed.status_code == 200, listed.text  # no unreadable row was left behind
        ask = {"messages": [{"role": "user", "content": "Refund order 43"}]}
        done = http.post(
            f"/threads/{refund}/runs/wait", json={"assistant_id": "support", "input": ask}
        )
        assert done.status_code == 200, done.text
    figures.encryption_checks_passed += 1


@pytest.mark.django_db
def test_the_admin_shows_and_saves_sealed_run_fields(settings: Any, figures: Figures) -> None:
    from django.contrib.auth.models import User
    from django.db import connection
    from django.test import Client

    from criogen.engine.crypto import generate_key
    from criogen.services.assistants import resolve_assistant
    from criogen.storage.models import Run, Thread

    settings.CRIOGEN_ENCRYPTION_KEY = generate_key()
    thread = Thread.objects.create(id=f"admin-{uuid.uuid4().hex[:8]}")
    run = Run.objects.create(
        thread=thread,
        assistant=resolve_assistant(assistant_id="steps"),
        graph_id="steps",
        input={"code": "Zanzibar"},
        metadata={"m": "Zanzibar"},
    )
    admin = Client()
    admin.force_login(User.objects.create_superuser("root-enc", "root@example.com", "pw"))
    url = f"/admin/criogen/run/{run.pk}/change/"
    page = admin.get(url)
    assert page.status_code == 200 and "Zanzibar" in page.content.decode()
    form = {
        "thread": thread.pk,
        "assistant": str(run.assistant_id),
        "graph_id": "steps",
        "input": '{"code": "Zanzibar-2"}',
        "command": "null",
        "durability": "async",
        "multitask_strategy": "enqueue",
        "metadata": '{"m": "Zanzibar"}',
        "kwargs": "{}",
    }
    assert admin.post(url, form).status_code == 302
    run.refresh_from_db()
    assert run.input == {"code": "Zanzibar-2"} and run.command is None
    with connection.cursor() as cur:
        key = Run._meta.pk.get_db_prep_value(run.pk, connection)  # type: ignore[union-attr]
        cur.execute("SELECT input, metadata FROM criogen_run WHERE run_id = %s", [key])
        row = cur.fetchone() or ("", "")
    assert all(str(v).startswith("gAAAAA") for v in row), row
    figures.encryption_checks_passed += 1
