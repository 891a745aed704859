"""The dashboard's pages: sign-in, inbox, threads list, thread timeline, audit log."""

from __future__ import annotations

import re
from datetime import timedelta
from urllib.parse import quote

import pytest
from django.test import Client
from django.utils import timezone
from django.utils.html import escape

from criogen import registry
from criogen.storage.models import Thread
from tests.conftest import PASSWORD
from tests.dashboard.conftest import client_for, new_thread_id

pytestmark = pytest.mark.django_db


# -- sign-in and layout -------------------------------------------------------------------


def test_it_sends_anonymous_visitors_to_the_sign_in_page(client: Client) -> None:
    for url in ("/ui/inbox/", "/ui/threads/", "/ui/audit/", "/ui/threads/x/"):
        response = client.get(url)
        assert response.status_code == 302
        assert response["Location"].startswith("/accounts/login/?next=")


def test_an_htmx_request_without_a_session_signs_in_as_a_whole_page(
    client: Client, waiting_agent
) -> None:
    t = waiting_agent()
    page = f"/ui/threads/{t.pk}/?at={t.head_id}"
    hx = {"HTTP_HX_REQUEST": "true", "HTTP_HX_CURRENT_URL": f"http://testserver{page}"}
    for response in (
        client.get(f"/ui/threads/{t.pk}/checkpoints/{t.head_id}/", **hx),
        client.post(f"/ui/threads/{t.pk}/act/", {"approve": "", "expected": t.head_id}, **hx),
        client.get("/ui/inbox/", {"q": "x"}, **hx),
    ):
        # Not a redirect htmx would follow and swap into a panel, but one it makes
        # the browser follow, back to the page the operator was on.
        assert response.status_code == 200
        assert response["HX-Redirect"] == "/accounts/login/?next=" + quote(page)
        assert response.content == b""
    # Another origin's page is not returned to.
    foreign = client.get("/ui/inbox/", HTTP_HX_REQUEST="true", HTTP_HX_CURRENT_URL="http://x/y")
    assert foreign["HX-Redirect"] == "/accounts/login/?next=/ui/inbox/"
    # Without htmx, the usual redirect.
    assert client.get("/ui/inbox/")["Location"] == "/accounts/login/?next=/ui/inbox/"


def test_the_site_root_lands_on_the_inbox(client: Client) -> None:
    assert client.get("/")["Location"] == "/ui/inbox/"
    assert client.get("/ui/")["Location"] == "/ui/inbox/"


def test_it_signs_in_with_a_password_and_shows_the_navigation(operator: object) -> None:
    client = Client()
    page = client.get("/accounts/login/")
    assert b'name="username"' in page.content and b"csrfmiddlewaretoken" in page.content
    response = client.post(
        "/accounts/login/", {"username": "olga", "password": PASSWORD}, follow=True
    )
    assert response.redirect_chain[-1][0] == "/ui/inbox/"
    html = response.content.decode()
    for label in ("Inbox", "Threads", "Audit", 'id="nav-inbox-count"', "Sign out olga"):
        assert label in html


def test_a_wrong_password_is_refused(operator: object) -> None:
    response = Client().post("/accounts/login/", {"username": "olga", "password": "nope"})
    assert response.status_code == 200
    assert b"didn't match" in response.content


def test_sign_out_lands_on_the_sign_in_page_with_a_message(as_operator: Client) -> None:
    response = as_operator.post("/accounts/logout/", follow=True)
    assert response.redirect_chain[-1][0] == "/accounts/login/"
    html = response.content.decode()
    assert "You are signed out." in html
    assert 'name="username"' in html and "Logged out" not in html
    # Signed out for real: the inbox asks to sign in again.
    assert as_operator.get("/ui/inbox/")["Location"].startswith("/accounts/login/")


def test_the_site_has_a_favicon(client: Client) -> None:
    from pathlib import Path

    from django.contrib.staticfiles import finders

    response = client.get("/favicon.ico")
    assert response.status_code == 302
    assert response["Location"] == "/static/dashboard/favicon.svg"
    icon = finders.find("dashboard/favicon.svg")
    assert icon and Path(icon).read_text().startswith("<svg")
    page = client.get("/accounts/login/").content.decode()
    assert '<link rel="icon" href="/static/dashboard/favicon.svg"' in page


def test_the_page_carries_the_csrf_token_for_htmx(as_operator: Client) -> None:
    html = as_operator.get("/ui/inbox/").content.decode()
    assert 'hx-headers=\'{"X-CSRFToken": "' in html
    assert "/static/dashboard/vendor/htmx-2.0.11.min.js" in html
    assert "/static/dashboard/vendor/htmx-ext-ws-2.0.4.min.js" in html
    # Every script and stylesheet is served from here: none from a CDN (a random CSRF
    # token may well hold the letters "cdn", so the page's text is not searched).
    sources = re.findall(r'<(?:script|link)\b[^>]*?\b(?:src|href)="([^"]*)"', html)
    assert sources and all(not re.match(r"(?:[a-z]+:)?//", url) for url in sources), sources


def test_the_navigation_counts_what_waits(
    as_operator: Client, suspended_workflow, waiting_agent
) -> None:
    suspended_workflow()
    waiting_agent()
    html = as_operator.get("/ui/threads/").content.decode()
    assert (
        '<span id="nav-inbox-count" class="badge hot" title="suspended threads waiting">2</span>'
        in html
    )


# -- inbox -----------------------------------------------------------------------------------


def test_the_inbox_lists_suspended_threads_oldest_first(
    as_operator: Client, suspended_workflow, waiting_agent, viewer
) -> None:
    old = suspended_workflow(owner=viewer)
    new = waiting_agent(text="refund order 77 of 30 EUR")
    Thread.objects.filter(pk=old.pk).update(updated_at=timezone.now() - timedelta(hours=3))
    done = new_thread_id("done")
    registry.get_graph("steps").thread(done).run({"n": 1}, durability="sync")

    html = as_operator.get("/ui/inbox/").content.decode()
    assert html.index(old.pk) < html.index(new.pk)
    assert done not in html
    # What each waits for: the workflow's reason and payload; the agent's tool and args.
    assert "approve?" in html and "question" in html
    assert "issue_refund" in html and "&quot;77&quot;" in html
    # Who owns it, which assistant, how long it waited.
    assert "owner vera" in html
    assert ">hitl<" in html and ">refunds<" in html
    assert re.search(r"waiting \d+s\b", re.sub(r"<[^>]+>", "", html))


def test_the_inbox_filters_by_assistant_tool_age_and_search(
    as_operator: Client, suspended_workflow, waiting_agent, viewer
) -> None:
    wf = suspended_workflow(owner=viewer)
    ag = waiting_agent()
    Thread.objects.filter(pk=wf.pk).update(updated_at=timezone.now() - timedelta(hours=2))

    def shown(query: str) -> set[str]:
        html = as_operator.get("/ui/inbox/?" + query).content.decode()
        return {t for t in (wf.pk, ag.pk) if f'data-thread="{t}"' in html}

    assert shown("") == {wf.pk, ag.pk}
    assert shown("assistant=refunds") == {ag.pk}
    assert shown("tool=issue_refund") == {ag.pk}
    assert shown("tool=delete_everything") == set()
    assert shown("older_than=60") == {wf.pk}
    assert shown(f"q={ag.pk[3:9]}") == {ag.pk}
    assert shown("q=vera") == {wf.pk}


def test_the_inbox_runs_the_same_number_of_queries_for_3_or_30_rows(
    as_operator: Client, suspended_workflow, waiting_agent, django_assert_max_num_queries
) -> None:
    for _ in range(2):
        suspended_workflow()
    waiting_agent()
    with django_assert_max_num_queries(8) as few:
        assert as_operator.get("/ui/inbox/").status_code == 200
    queries = len(few.captured_queries)
    for _ in range(15):
        suspended_workflow()
        t = waiting_agent()
    # A claimed card reads its holder's name from the same query.
    assert as_operator.post(f"/ui/threads/{t.pk}/claim/", {"claim": ""}).status_code == 302
    with django_assert_max_num_queries(queries) as many:
        html = as_operator.get("/ui/inbox/").content.decode()
    assert html.count('class="card waiting"') == 33
    assert html.count('data-claim="mine"') == 1
    assert len(many.captured_queries) == queries


def test_a_viewer_sees_only_their_own_threads_and_no_buttons(
    as_viewer: Client, suspended_workflow, waiting_agent, viewer, stranger
) -> None:
    mine = waiting_agent(owner=viewer)
    theirs = waiting_agent(owner=stranger)
    html = as_viewer.get("/ui/inbox/").content.decode()
    assert mine.pk in html and theirs.pk not in html
    assert 'name="approve"' not in html and "bulk-form" not in html
    assert as_viewer.get(f"/ui/threads/{theirs.pk}/").status_code == 404
    page = as_viewer.get(f"/ui/threads/{mine.pk}/").content.decode()
    assert "You can look but not act" in page and 'name="approve"' not in page


def test_html_in_values_is_shown_escaped(
    as_operator: Client, waiting_agent, suspended_workflow
) -> None:
    evil = "<script>alert(1)</script>"
    agent = waiting_agent(text=f"refund order {evil} of 5 EUR")
    Thread.objects.filter(pk=agent.pk).update(metadata={"graph_id": "<b>x</b>"})
    for url in ("/ui/inbox/", f"/ui/threads/{agent.pk}/", "/ui/threads/"):
        html = as_operator.get(url).content.decode()
        assert "<script>alert(1)" not in html
        assert "<b>x</b>" not in html
    html = as_operator.get(f"/ui/threads/{agent.pk}/").content.decode()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html


# -- threads list ----------------------------------------------------------------------------


def _bulk_threads(n: int, **fields: object) -> list[str]:
    now = timezone.now()
    ids = [f"bulk-{i:05d}" for i in range(n)]
    Thread.objects.bulk_create(
        Thread(id=tid, updated_at=now - timedelta(seconds=i), **fields)  # type: ignore[arg-type]
        for i, tid in enumerate(ids)
    )
    return ids


def test_the_threads_list_pages_with_a_cursor(as_operator: Client) -> None:
    ids = _bulk_threads(120, head_status="completed", head_version=3)
    first = as_operator.get("/ui/threads/")
    html = first.content.decode()
    assert ids[0] in html and ids[49] in html and ids[50] not in html
    cursor = first.context["next_cursor"]
    second = as_operator.get("/ui/threads/", {"after": cursor}).content.decode()
    assert ids[50] in second and ids[99] in second and ids[49] not in second
    third = as_operator.get(
        "/ui/threads/",
        {"after": as_operator.get("/ui/threads/", {"after": cursor}).context["next_cursor"]},
    )
    assert third.context["next_cursor"] == ""
    assert ids[119] in third.content.decode()


def test_the_threads_list_searches_by_id_status_assistant_and_metadata(
    as_operator: Client, suspended_workflow, waiting_agent
) -> None:
    wf = suspended_workflow()
    ag = waiting_agent()
    Thread.objects.filter(pk=ag.pk).update(
        metadata={"graph_id": "refunds", "customer": "acme", "tier": 2}
    )

    def rows(**query: str) -> set[str]:
        response = as_operator.get("/ui/threads/", query)
        return {t.pk for t in response.context["rows"]}

    assert rows(q=wf.pk[3:]) == {wf.pk}
    assert rows(status="suspended") == {wf.pk, ag.pk}
    assert rows(status="completed") == set()
    assert rows(assistant="refunds") == {ag.pk}
    assert rows(metadata="customer=acme") == {ag.pk}
    assert rows(metadata="tier=2") == {ag.pk}
    bad = as_operator.get("/ui/threads/", {"metadata": "no equals sign"})
    assert bad.status_code == 422
    assert b'data-field="metadata"' in bad.content


def test_the_threads_list_says_an_unknown_status_is_not_a_status(
    as_operator: Client, suspended_workflow
) -> None:
    suspended_workflow()
    response = as_operator.get("/ui/threads/", {"status": "nope"})
    assert response.status_code == 422
    assert response.context["rows"] == []
    html = response.content.decode()
    assert 'data-field="status"' in html
    assert (
        escape("'nope' is not a status: use one of in_progress, suspended, completed, failed.")
        in html
    )


def test_the_threads_list_costs_the_same_on_a_deep_page(
    as_operator: Client, django_assert_max_num_queries
) -> None:
    _bulk_threads(400, head_status="completed")
    page = as_operator.get("/ui/threads/")
    cursor = page.context["next_cursor"]
    for _ in range(5):
        cursor = as_operator.get("/ui/threads/", {"after": cursor}).context["next_cursor"]
    # Session, user, permissions (2), the page's rows, the status counts, the nav count.
    with django_assert_max_num_queries(7):
        assert as_operator.get("/ui/threads/", {"after": cursor}).status_code == 200


# -- thread timeline --------------------------------------------------------------------------


def test_the_timeline_shows_every_checkpoint_with_its_facts(
    as_operator: Client, suspended_workflow
) -> None:
    t = suspended_workflow()
    response = as_operator.get(f"/ui/threads/{t.pk}/")
    html = response.content.decode()
    entries = response.context["entries"]
    assert [e.version for e in entries] == [3, 2, 1]
    assert [e.source for e in entries] == ["suspend", "step", "input"]
    assert all(f'data-version="{v}"' in html for v in (1, 2, 3))
    assert f"run {entries[0].run_id[:8]}" in html
    # The head is selected: its state, and its diff to v2 (nothing changed at suspend).
    assert response.context["selected"].version == 3
    assert "No change to the state." in html
    # The decision panel for a workflow: its reason, payload and a Resume form.
    assert 'name="resume"' in html and "approve?" in html


def test_the_panel_shows_a_checkpoint_state_and_its_diff(
    as_operator: Client, suspended_workflow
) -> None:
    t = suspended_workflow()
    v2 = next(
        e for e in as_operator.get(f"/ui/threads/{t.pk}/").context["entries"] if e.version == 2
    )
    panel = as_operator.get(f"/ui/threads/{t.pk}/checkpoints/{v2.id}/", HTTP_HX_REQUEST="true")
    html = panel.content.decode()
    assert html.lstrip().startswith('<section id="panel"')
    assert "<h2>v2" in html
    assert '<tr class="d-changed"><td><code>n</code></td><td>changed</td>' in html
    assert (
        '<pre class="json old"><span class="j-n">1</span></pre><pre class="json"><span class="j-n">2</span>'
        in html
    )
    assert '<tr class="d-added"><td><code>steps</code></td><td>added</td>' in html
    # Without htmx the same URL opens the whole page at that checkpoint.
    full = as_operator.get(f"/ui/threads/{t.pk}/checkpoints/{v2.id}/")
    assert full.status_code == 302 and full["Location"].endswith(f"?at={v2.id}")
    assert as_operator.get(f"/ui/threads/{t.pk}/?at={v2.id}").context["selected"].version == 2
    assert (
        as_operator.get(f"/ui/threads/{t.pk}/checkpoints/nope/", HTTP_HX_REQUEST="true").status_code
        == 404
    )


def test_an_agent_transcript_shows_as_chat_bubbles_with_tool_calls(
    as_operator: Client, waiting_agent
) -> None:
    t = waiting_agent(text="refund order 9 of 3 EUR")
    html = as_operator.get(f"/ui/threads/{t.pk}/").content.decode()
    assert 'class="bubble b-human"' in html and "refund order 9 of 3 EUR" in html
    assert 'class="bubble b-ai"' in html and 'class="toolcall"' in html
    # The decision panel: the call, its args highlighted, and the three decisions.
    assert '<code class="tool">issue_refund</code>' in html
    assert (
        '<span class="j-k">&quot;order_id&quot;</span>: <span class="j-s">&quot;9&quot;</span>'
        in html
    )
    for button in ('name="approve"', 'name="reject"', 'name="edit"'):
        assert button in html


def test_a_long_timeline_is_paged_in_constant_queries(
    as_operator: Client, django_assert_max_num_queries
) -> None:
    from criogen import END, START, Workflow

    loop = Workflow(reducers={"log": "append"}, name="loop")
    loop.add_node("tick", lambda s: {"i": int(s.get("i") or 0) + 1, "log": [s.get("i") or 0]})
    loop.add_conditional_edges("tick", lambda s: END if s["i"] >= 300 else "tick")
    loop.add_edge(START, "tick")
    tid = new_thread_id("long")
    from criogen.registry import storage

    loop.compile(storage=storage()).thread(tid).run({"i": 0}, durability="sync")
    # Session, user, permissions (2), thread, head row, timeline, runs, the selected
    # checkpoint and its parent (2 each: row + values), the nav count.
    with django_assert_max_num_queries(13):
        response = as_operator.get(f"/ui/threads/{tid}/")
    entries = response.context["entries"]
    assert len(entries) == 100 and entries[0].version == 301
    older = as_operator.get(f"/ui/threads/{tid}/?before={response.context['older']}")
    assert older.context["entries"][0].version == entries[-1].version - 1


def test_the_audit_log_lists_and_filters_events(as_operator: Client, waiting_agent) -> None:
    from criogen.storage.models import AuditEvent

    t = waiting_agent()
    AuditEvent.objects.create(
        actor="olga", action="approve", thread_id=t.pk, details='{"note": "<i>ok</i>"}'
    )
    AuditEvent.objects.create(actor="oscar", action="reject", thread_id="other", details="{}")
    html = as_operator.get("/ui/audit/").content.decode()
    assert "olga" in html and "oscar" in html and "&lt;i&gt;ok&lt;/i&gt;" in html
    filtered = as_operator.get("/ui/audit/", {"actor": "osc"}).content.decode()
    assert "oscar" in filtered and ">olga<" not in filtered
    assert f'href="/ui/threads/{t.pk}/"' in html


def test_a_viewer_sees_only_audit_events_of_their_threads(
    as_viewer: Client, viewer, waiting_agent
) -> None:
    from criogen.storage.models import AuditEvent

    mine = waiting_agent(owner=viewer)
    AuditEvent.objects.create(actor="olga", action="approve", thread_id=mine.pk, details="{}")
    AuditEvent.objects.create(
        actor="olga", action="secret-action", thread_id="not-hers", details="{}"
    )
    html = as_viewer.get("/ui/audit/").content.decode()
    assert mine.pk in html and "secret-action" not in html


def test_a_deleted_threads_audit_events_are_not_shown_to_the_next_owner_of_its_id(
    as_viewer: Client, viewer, operator, waiting_agent
) -> None:
    from datetime import timedelta

    from django.utils import timezone

    from criogen.storage.models import AuditEvent, Thread

    reused = new_thread_id("reused")
    # Another user's thread with this id was rejected with a note, then deleted.
    earlier = timezone.now() - timedelta(minutes=5)
    AuditEvent.objects.create(
        actor="bob",
        action="reject",
        thread_id=reused,
        details='{"message": "bob-private-note"}',
        created_at=earlier,
    )
    AuditEvent.objects.create(
        actor="bob", action="delete", thread_id=reused, details="{}", created_at=earlier
    )
    mine = waiting_agent(owner=viewer, thread_id=reused)
    assert Thread.objects.get(pk=reused).created_at > earlier
    AuditEvent.objects.create(actor="olga", action="approve", thread_id=mine.pk, details="{}")
    html = as_viewer.get("/ui/audit/").content.decode()
    assert "approve" in html and mine.pk in html
    assert "bob-private-note" not in html and ">bob<" not in html
    filtered = as_viewer.get("/ui/audit/", {"thread": reused}).content.decode()
    assert "bob-private-note" not in filtered


def test_pages_answer_with_the_inbox_partial_for_htmx(as_operator: Client, waiting_agent) -> None:
    waiting_agent()
    response = as_operator.get("/ui/inbox/", HTTP_HX_REQUEST="true")
    html = response.content.decode()
    assert html.lstrip().startswith('<section id="inbox-list"')
    assert "<html" not in html


def test_operators_include_staff(db: None, waiting_agent) -> None:
    from django.contrib.auth.models import User

    staff = User.objects.create_user("stella", password="x", is_staff=True)
    t = waiting_agent()
    html = client_for(staff).get(f"/ui/threads/{t.pk}/").content.decode()
    assert 'name="approve"' in html


@pytest.mark.parametrize("thread_id", ["team/orders/42", "a~2Fb/~7E", "~"])
def test_a_thread_whose_id_has_slashes_or_tildes_opens_and_takes_decisions(
    as_operator: Client, suspended_workflow, thread_id: str
) -> None:
    from dashboard.converters import decode_thread_id, encode_thread_id

    assert decode_thread_id(encode_thread_id(thread_id)) == thread_id
    t = suspended_workflow(thread_id=thread_id)
    segment = encode_thread_id(thread_id)
    assert "/" not in segment
    # The threads list and the inbox link to the page that shows this thread.
    for listing in ("/ui/threads/", "/ui/inbox/"):
        assert f"/ui/threads/{segment}/" in as_operator.get(listing).content.decode()
    page = as_operator.get(f"/ui/threads/{segment}/")
    assert page.status_code == 200
    html = page.content.decode()
    assert f'ws-connect="/ws/ui/threads/{segment}/' in html
    assert f'action="/ui/threads/{segment}/act/"' in html
    response = as_operator.post(
        f"/ui/threads/{segment}/act/",
        {"resume": "", "value": '"yes"', "expected": t.head_id},
        HTTP_HX_REQUEST="true",
    )
    assert response.status_code == 200, response.content[:300]
    assert "Resumed" in response.content.decode()
    assert [r.command for r in t.runs.all()] == [{"resume": "yes"}]
