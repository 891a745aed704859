"""Defect 6: a thread a person paused (rewound, or its state edited) is not a crash.
The thread page says who paused it and offers Continue; a run that died says so and
offers Retry."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from criogen import registry
from criogen.storage.models import Run, Thread
from tests.dashboard.conftest import TEST_ASSISTANTS, new_thread_id
from tests.dashboard.graphs_console import Crash

pytestmark = pytest.mark.django_db

HX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture(autouse=True)
def _console_graphs(settings: Any, _graphs: None) -> None:
    settings.CRIOGEN_ASSISTANTS = {
        **TEST_ASSISTANTS,
        "crashing": "tests.dashboard.graphs_console:crashing",
    }
    registry.reset()


def header_and_actions(client: Client, thread: Thread) -> str:
    html = client.get(f"/ui/threads/{thread.pk}/").content.decode()
    return html[html.index('id="thread-header"') : html.index('id="panel"')]


def test_a_rewound_completed_thread_is_paused_not_interrupted(as_operator: Client) -> None:
    tid = new_thread_id("steps")
    graph = registry.get_graph("steps").thread(tid)
    graph.run({"n": 0}, durability="sync")
    Thread.objects.filter(pk=tid).update(metadata={"graph_id": "steps"})
    v2 = next(c for c in graph.history() if c.version == 2)
    graph.rewind(v2.id, by="olga", door="ui")
    t = Thread.objects.get(pk=tid)
    assert t.head_status == "in_progress"
    html = header_and_actions(as_operator, t)
    assert "interrupted" not in html and "died" not in html
    assert "Retry" not in html
    assert 'data-stopped="paused">paused after a rewind to v2 by olga' in html
    assert 'name="continue"' in html and f"Continue from v{t.head_version}" in html
    response = as_operator.post(
        f"/ui/threads/{tid}/act/", {"continue": "", "expected": t.head_id}, **HX
    )
    assert "Continuing: run" in response.content.decode()
    assert Run.objects.filter(thread_id=tid, kwargs__action="retry").count() == 1


def test_a_run_that_died_is_a_crash_with_retry(as_operator: Client) -> None:
    tid = new_thread_id("crash")
    with pytest.raises(Crash):
        registry.get_graph("crashing").thread(tid).run({}, durability="sync")
    Thread.objects.filter(pk=tid).update(metadata={"graph_id": "crashing"})
    t = Thread.objects.get(pk=tid)
    html = header_and_actions(as_operator, t)
    assert 'data-stopped="crashed">stopped: its run died (no live run)' in html
    assert "paused" not in html
    assert f"Retry from v{t.head_version}" in html
