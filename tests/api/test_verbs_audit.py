"""The REST API's verbs are audited once, with the token's owner as the actor and
``api`` as the door — for workflows as for agents, on SQLite and PostgreSQL — and the
dashboard's audit log shows them."""

from __future__ import annotations

import json
import re
import time
from typing import Any

import httpx
import pytest

from tests.api.conftest import Server, _manage
from tests.conftest import PASSWORD


def _events(server: Server, thread_id: str) -> list[dict[str, Any]]:
    """The thread's audit events, read from the server's own database, oldest first."""
    code = (
        "import json\n"
        "from criogen.storage.models import AuditEvent\n"
        f"qs = AuditEvent.objects.filter(thread_id={thread_id!r}).order_by('pk')\n"
        "print('EVENTS=' + json.dumps([[e.action, e.actor, e.door, e.before, e.after]"
        " for e in qs]))\n"
    )
    out = _manage(server.env, "shell", "-c", code)
    rows = json.loads(out.split("EVENTS=", 1)[1].strip())
    return [dict(zip(("action", "actor", "door", "before", "after"), r, strict=True)) for r in rows]


def _audit_page(server: Server, thread_id: str) -> str:
    """The dashboard's audit log for ``thread_id``, as olga (an operator) sees it."""
    with httpx.Client(base_url=server.url, timeout=30, follow_redirects=True) as web:
        form = web.get("/accounts/login/")
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form.text)
        assert token, form.text[:500]
        signed_in = web.post(
            "/accounts/login/",
            data={
                "username": "olga",
                "password": PASSWORD,
                "csrfmiddlewaretoken": token.group(1),
                "next": "/ui/",
            },
            headers={"Referer": server.url + "/accounts/login/"},
        )
        assert signed_in.status_code == 200
        page = web.get("/ui/audit/", params={"thread": thread_id})
        assert page.status_code == 200
        return page.text


def test_resume_update_state_and_delete_of_a_workflow_are_audited_as_the_token_owner(
    any_server: Server, alice: Any
) -> None:
    client = alice
    tid = client.threads.create()["thread_id"]
    waiting = client.runs.wait(tid, "hitl", input={"n": 0})
    assert "__interrupt__" in waiting
    suspended = client.threads.get_state(tid)["checkpoint"]["checkpoint_id"]

    final = client.runs.wait(tid, "hitl", command={"resume": "ok"})
    assert final["answer"] == "ok"
    client.threads.update_state(tid, {"n": 5}, as_node="ask")
    head = client.threads.get_state(tid)["checkpoint"]["checkpoint_id"]
    page = _audit_page(any_server, tid)
    client.threads.delete(tid)

    events = _events(any_server, tid)
    assert [(e["action"], e["actor"], e["door"]) for e in events] == [
        ("create", "alice", "api"),
        ("resume", "alice", "api"),
        ("update_state", "alice", "api"),
        ("delete", "alice", "api"),
    ]
    assert events[1]["before"] == suspended
    assert events[2]["after"] == head
    assert events[3]["before"] == head
    # The operator's audit page names the token's owner and the door for each.
    for action in ("resume", "update_state"):
        assert re.search(rf"<td>alice</td><td><code>{action}</code></td><td>api</td>", page), page[
            -3000:
        ]


def test_a_second_resume_of_the_same_suspension_is_already_decided(
    any_server: Server, alice: Any
) -> None:
    client = alice
    tid = client.threads.create()["thread_id"]
    client.runs.wait(tid, "hitl", input={"n": 0})
    client.runs.wait(tid, "hitl", command={"resume": "first"})
    with pytest.raises(httpx.HTTPStatusError) as caught:
        client.runs.wait(tid, "hitl", command={"resume": "second"})
    refused = caught.value.response
    assert refused.status_code == 409
    assert (refused.json()["code"], refused.json()["decided_by"]) == ("already_decided", "alice")
    assert client.threads.get_state(tid)["values"]["answer"] == "first"
    assert [e["action"] for e in _events(any_server, tid)] == ["create", "resume"]


def test_a_new_turn_of_an_agent_is_audited_with_its_actor(any_server: Server, alice: Any) -> None:
    tid = alice.threads.create()["thread_id"]
    ask = {"messages": [{"role": "user", "content": "Please refund order 42"}]}
    assert "__interrupt__" in alice.runs.wait(tid, "support", input=ask)
    events = _events(any_server, tid)
    assert [(e["action"], e["actor"], e["door"]) for e in events] == [
        ("create", "alice", "api"),
        ("input", "alice", "api"),
    ]


def test_a_stateless_runs_thread_deleted_on_completion_is_audited_as_its_caller(
    any_server: Server, alice: Any
) -> None:
    """``on_completion="delete"`` removes the run's own thread through the one delete
    verb: one ``delete`` event naming the token's owner, from the API."""
    run = alice.runs.create(None, "steps", input={"n": 0}, on_completion="delete")
    tid = run["thread_id"]
    deadline = time.monotonic() + 30
    while any(e["action"] == "delete" for e in _events(any_server, tid)) is False:
        assert time.monotonic() < deadline, _events(any_server, tid)
        time.sleep(0.2)
    with pytest.raises(httpx.HTTPStatusError) as gone:
        alice.threads.get(tid)
    assert gone.value.response.status_code == 404
    assert [(e["action"], e["actor"], e["door"]) for e in _events(any_server, tid)][-1:] == [
        ("delete", "alice", "api")
    ]
