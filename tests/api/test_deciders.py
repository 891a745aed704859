"""Who may answer a suspension is checked in the one answering service, so every door
obeys it: operators always; a thread's owner (or a named group) only when the
assistant allows it. A refusal is a 403 ``not_allowed_to_decide``, changes nothing and
is audited; over the SDK on SQLite and PostgreSQL, and in-process for the defaults."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.api.conftest import Server, _manage

ASK = {"messages": [{"role": "user", "content": "Please refund order 42"}]}
DECISIONS = {
    "approve": {"type": "approve"},
    "edit": {
        "type": "edit",
        "edited_action": {"name": "issue_refund", "args": {"order_id": "42", "amount": 99999}},
    },
    "reject": {"type": "reject", "message": "no"},
    "respond": {"type": "respond", "message": "done by hand"},
}


def _audit(server: Server, thread_id: str) -> list[tuple[str, str, str]]:
    code = (
        "import json\n"
        "from criogen.storage.models import AuditEvent\n"
        f"qs = AuditEvent.objects.filter(thread_id={thread_id!r}).order_by('pk')\n"
        "print('EVENTS=' + json.dumps([[e.action, e.actor, e.door] for e in qs]))\n"
    )
    out = _manage(server.env, "shell", "-c", code)
    return [tuple(e) for e in json.loads(out.split("EVENTS=", 1)[1].strip())]


@pytest.fixture
def clients(any_server: Server) -> Iterator[tuple[Any, Any]]:
    """(alice, olga): a thread's owner and an operator."""
    alice, olga = any_server.sync_client("alice"), any_server.sync_client("olga")
    yield alice, olga
    alice.close()
    olga.close()


def _assistant(olga: Any, deciders: list[str]) -> str:
    made = olga.assistants.create("support", metadata={"deciders": deciders})
    return str(made["assistant_id"])


def _suspended(alice: Any, assistant_id: str) -> str:
    tid = alice.threads.create()["thread_id"]
    result = alice.runs.wait(tid, assistant_id, input=ASK)
    assert result["__interrupt__"][0]["value"]["action_requests"][0]["name"] == "issue_refund"
    return str(tid)


def test_the_owner_cannot_decide_unless_the_assistant_allows_it_an_operator_can(
    any_server: Server, clients: tuple[Any, Any]
) -> None:
    alice, olga = clients
    strict = _assistant(olga, [])  # operators only: the default of an assistant
    tid = _suspended(alice, strict)
    head = alice.threads.get_state(tid)["checkpoint"]["checkpoint_id"]
    for kind, decision in DECISIONS.items():
        with pytest.raises(httpx.HTTPStatusError) as caught:
            # Naming a more permissive assistant does not help: the one whose run
            # suspended is the one that counts.
            alice.runs.wait(tid, "support", command={"resume": {"decisions": [decision]}})
        refused = caught.value.response
        assert refused.status_code == 403, kind
        assert refused.json()["code"] == "not_allowed_to_decide", kind
    state = alice.threads.get_state(tid)
    assert state["checkpoint"]["checkpoint_id"] == head  # nothing changed
    assert len(alice.runs.list(tid)) == 1  # no run was created for a refused answer

    final = olga.runs.wait(tid, strict, command={"resume": {"decisions": [DECISIONS["approve"]]}})
    results = [m["content"] for m in final["messages"] if m["type"] == "tool"]
    assert results.count("Refunded 10.00 EUR on order 42.") == 1
    assert not any("99999" in str(r) for r in results)

    events = _audit(any_server, tid)
    assert events.count(("decide_refused", "alice", "api")) == 4
    assert ("decide", "olga", "api") in events


def test_an_assistant_can_let_its_threads_owners_decide(
    any_server: Server, clients: tuple[Any, Any]
) -> None:
    alice, olga = clients
    chat = _assistant(olga, ["owners"])
    tid = _suspended(alice, chat)
    final = alice.runs.wait(tid, chat, command={"resume": {"decisions": [DECISIONS["edit"]]}})
    results = [m["content"] for m in final["messages"] if m["type"] == "tool"]
    assert any("99999" in str(r) for r in results)
    assert ("decide", "alice", "api") in _audit(any_server, tid)


@pytest.mark.django_db
def test_by_default_only_operators_decide_and_groups_can_be_named(settings: Any) -> None:
    from django.contrib.auth.models import Group, User

    from criogen.services.runs import Decider, may_decide
    from criogen.storage.models import Assistant, Thread

    settings.CRIOGEN_DECIDERS = {}
    alice = User.objects.create(username="alice-d")
    lead = User.objects.create(username="lead-d")
    Group.objects.create(name="leads").user_set.add(lead)
    thread = Thread.objects.create(id="t-deciders", owner=alice)
    plain = Assistant.objects.create(graph_id="support", metadata={})
    grouped = Assistant.objects.create(graph_id="support", metadata={"deciders": ["group:leads"]})

    assert may_decide(Decider(None, True), thread, plain)  # auth off: an operator
    assert not may_decide(Decider(alice, False), thread, plain)
    assert not may_decide(Decider(lead, False), thread, plain)
    assert may_decide(Decider(lead, False), thread, grouped)
    assert not may_decide(Decider(alice, False), thread, grouped)
    settings.CRIOGEN_DECIDERS = {"support": ["owners"]}
    assert may_decide(Decider(alice, False), thread, plain)
    assert not may_decide(Decider(lead, False), thread, plain)
    alice.is_active = False
    assert not may_decide(Decider(alice, False), thread, plain)
