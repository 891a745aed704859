"""History pages are bounded in bytes as well as in count: ``POST
/threads/{id}/history {"limit": 1000}`` on a thread of large states answers the newest
states up to ``CRIOGEN_MAX_HISTORY_BYTES`` and the client pages on with ``before``;
small states still come back all at once."""

from __future__ import annotations

from typing import Any

import pytest

from api import threads
from api.auth import LOCAL
from criogen import registry


@pytest.fixture
def big_thread(db: None, thread_id: str) -> str:
    graph = registry.get_graph("steps")
    t = graph.thread(thread_id)
    t.run({"n": 0}, durability="sync")
    for i in range(12):  # each update appends ~100 kB: states grow to ~1.2 MB
        t.update_state({"steps": [str(i % 10) * 100_000]}, as_node="a")
    return thread_id


def test_a_history_page_stops_at_the_byte_budget_and_pages_on(
    big_thread: str, settings: Any
) -> None:
    settings.CRIOGEN_MAX_HISTORY_BYTES = 2_500_000
    first = threads.history(LOCAL, big_thread, limit=1000)
    sizes = [len(str(s["values"])) for s in first]
    assert 1 < len(first) < 16  # cut short by the budget, not by the limit
    assert sum(sizes) <= 2_700_000
    versions = [s["metadata"]["version"] for s in first]
    assert versions == sorted(versions, reverse=True)
    seen = list(versions)
    page = first
    while page:
        page = threads.history(
            LOCAL, big_thread, limit=1000, before=page[-1]["checkpoint"]["checkpoint_id"]
        )
        seen += [s["metadata"]["version"] for s in page]
    assert seen == list(range(max(seen), 0, -1))  # every state, once, in order


def test_one_state_larger_than_the_budget_still_comes_back(big_thread: str, settings: Any) -> None:
    settings.CRIOGEN_MAX_HISTORY_BYTES = 1_000
    (only,) = threads.history(LOCAL, big_thread, limit=1000)
    assert only["metadata"]["version"] == registry.storage().head(big_thread).version


def test_small_states_come_back_whole(db: None, thread_id: str) -> None:
    registry.get_graph("steps").thread(thread_id).run({"n": 0}, durability="sync")
    assert len(threads.history(LOCAL, thread_id, limit=1000)) == 4
