"""The thread verbs on a LangGraph thread, from Python (the dashboard's door): rewind
forks LangGraph's own history from one of its checkpoints and the next run goes on from
there; each verb checks the head the caller saw, refuses a busy thread and writes one
audit event; TTL keep_latest compacts LangGraph's checkpoints too."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from criogen.engine.errors import CheckpointNotFound, StaleHead
from criogen.langgraph.states import langgraph_config
from criogen.registry import get_graph
from criogen.services.runs import create_run, wait_run
from criogen.services.threads import compact_thread, rewind_thread, update_thread_state
from criogen.storage.models import AuditEvent
from criogen.storage.models.langgraph import LangGraphCheckpoint
from tests.langgraph.agents import review

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("inprocess_runner")]
START = {"topic": "otters", "notes": [], "approved": False}


@pytest.fixture
def helpdesk(settings: Any) -> Iterator[Any]:
    from criogen import registry

    settings.CRIOGEN_ASSISTANTS = {
        **settings.CRIOGEN_ASSISTANTS,
        "helpdesk": "tests.langgraph.agents.review:graph",
    }
    registry.reset()
    yield get_graph("helpdesk").compiled
    registry.reset()
    # The saver's database threads hold connections to the test database.
    from criogen.langgraph.saver import close_database_threads

    close_database_threads()


def _run(thread_id: str, **kwargs: Any) -> Any:
    run = create_run(thread_id=thread_id, assistant_id="helpdesk", if_not_exists="create", **kwargs)
    done = wait_run(run=run, timeout=30)
    assert done.status in ("success", "interrupted"), done.error
    return done


def _actions(thread_id: str, action: str) -> list[Any]:
    return list(AuditEvent.objects.filter(thread_id=thread_id, action=action))


def test_rewind_forks_langgraphs_history_and_the_next_run_goes_on_from_it(
    helpdesk: Any, thread_id: str
) -> None:
    _run(thread_id, input=START, durability="sync")
    _run(thread_id, command={"resume": "no"}, durability="sync")
    history = list(helpdesk.get_state_history(langgraph_config(thread_id)))
    [before_review] = [s for s in history if s.next == ("review",)]
    head = get_graph("helpdesk").thread(thread_id).head

    # The head the caller saw is checked; a checkpoint LangGraph lacks is a 404.
    with pytest.raises(StaleHead):
        rewind_thread(
            thread_id=thread_id,
            checkpoint_id=before_review.config["configurable"]["checkpoint_id"],
            by="olga",
            door="ui",
            expected="00000000-0000-4000-8000-000000000000",
        )
    with pytest.raises(CheckpointNotFound):
        rewind_thread(
            thread_id=thread_id,
            checkpoint_id="1f000000-0000-6000-8000-000000000000",
            by="olga",
            door="ui",
        )
    fork = rewind_thread(
        thread_id=thread_id,
        checkpoint_id=before_review.config["configurable"]["checkpoint_id"],
        by="olga",
        door="ui",
        expected=head.id,
    )

    now = helpdesk.get_state(langgraph_config(thread_id))
    assert now.metadata["source"] == "fork"
    assert now.next == ("review",) and now.values == before_review.values
    assert fork.source == "fork" and fork.status == "completed"
    assert fork.state == {"topic": "otters", "notes": ["draft about otters"], "approved": False}
    [event] = _actions(thread_id, "rewind")
    assert (event.actor, event.door) == ("olga", "ui")
    # The next run goes on from the fork: the review asks again, answered differently.
    waiting = _run(thread_id, input=None, durability="sync")
    assert waiting.status == "interrupted"
    _run(thread_id, command={"resume": "yes"}, durability="sync")
    final = helpdesk.get_state(langgraph_config(thread_id)).values
    # As LangGraph itself does with the same fork.
    graph = review.builder().compile(checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "reference"}}
    graph.invoke(START, config)
    graph.invoke(Command(resume="no"), config)
    [again] = [s for s in graph.get_state_history(config) if s.next == ("review",)]
    forked = graph.update_state(again.config, None, as_node="__copy__")
    graph.invoke(None, forked)
    graph.invoke(Command(resume="yes"), config)
    assert final == graph.get_state(config).values
    assert final["notes"] == ["draft about otters", "reviewed: yes", "published"]


def test_update_state_from_python_is_audited_once_and_checks_the_head(
    helpdesk: Any, thread_id: str
) -> None:
    _run(thread_id, input=START, durability="sync")
    _run(thread_id, command={"resume": "no"}, durability="sync")
    head = get_graph("helpdesk").thread(thread_id).head

    with pytest.raises(StaleHead):
        update_thread_state(
            thread_id=thread_id,
            values={"topic": "seals"},
            by="olga",
            door="ui",
            expected="00000000-0000-4000-8000-000000000000",
        )
    made = update_thread_state(
        thread_id=thread_id, values={"topic": "seals"}, by="olga", door="ui", expected=head.id
    )

    assert made.state["topic"] == "seals"
    now = helpdesk.get_state(langgraph_config(thread_id))
    assert now.values["topic"] == "seals" and now.metadata["source"] == "update"
    assert made.metadata["langgraph_checkpoint_id"] == now.config["configurable"]["checkpoint_id"]
    assert len(_actions(thread_id, "update_state")) == 1


def test_keep_latest_compacts_langgraphs_checkpoints_too(helpdesk: Any, thread_id: str) -> None:
    _run(thread_id, input=START, durability="sync")
    _run(thread_id, command={"resume": "yes"}, durability="sync")
    latest = helpdesk.get_state(langgraph_config(thread_id))
    assert LangGraphCheckpoint.objects.filter(thread_id=thread_id).count() > 2

    assert compact_thread(thread_id=thread_id, by="olga", door="ui")

    assert LangGraphCheckpoint.objects.filter(thread_id=thread_id).count() == 1
    kept = helpdesk.get_state(langgraph_config(thread_id))
    assert kept.config == latest.config and kept.values == latest.values


def test_rewind_to_a_checkpoint_of_the_dashboards_timeline(helpdesk: Any, thread_id: str) -> None:
    """The dashboard's timeline lists the bridge's checkpoints: rewinding to one forks
    LangGraph's history from its newest checkpoint when that one was written."""
    _run(thread_id, input=START, durability="sync")
    _run(thread_id, command={"resume": "no"}, durability="sync")
    thread = get_graph("helpdesk").thread(thread_id)
    [suspended] = [cp for cp in thread.history() if cp.status == "suspended"]

    fork = rewind_thread(thread_id=thread_id, checkpoint_id=suspended.id, by="olga", door="ui")

    now = helpdesk.get_state(langgraph_config(thread_id))
    assert now.metadata["source"] == "fork" and now.next == ("review",)
    assert fork.state == suspended.state
    # The review asks again, and this time the draft is published.
    assert _run(thread_id, input=None, durability="sync").status == "interrupted"
    _run(thread_id, command={"resume": "yes"}, durability="sync")
    final = helpdesk.get_state(langgraph_config(thread_id)).values
    assert final["notes"] == ["draft about otters", "reviewed: yes", "published"]
    [event] = _actions(thread_id, "rewind")
    assert json.loads(event.details)["checkpoint_id"] == suspended.id
