"""A LangChain agent's HITL approval decided in the dashboard, in headless Chromium: the
thread page shows the call with only the decisions its review config allows, and the
operator's approval (or edit) reaches LangGraph as ``{"decisions": [...]}``; the gated
tool runs once. A real Daphne server with the in-process runner, on SQLite."""

from __future__ import annotations

import json
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from tests.dashboard import live_server
from tests.dashboard.test_browser import wait_live

pytestmark = [pytest.mark.browser, pytest.mark.slow]

AGENTS = Path(__file__).parent / "agents"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Path]]:
    """The dashboard with the agent registered (from a langgraph.json) as
    ``lc_refunds`` (approve, edit, reject) and ``lc_refunds_strict`` (approve, reject),
    and ``lc_rate``, a graph whose interrupt declares a ``response_schema``."""
    tmp = tmp_path_factory.mktemp("lc-dashboard")
    (tmp / "agents").mkdir()
    for name in ("support.py", "rate.py"):
        shutil.copy(AGENTS / name, tmp / "agents" / name)
    config = tmp / "langgraph.json"
    config.write_text(
        json.dumps(
            {
                "graphs": {
                    "lc_refunds": "./agents/support.py:graph",
                    "lc_refunds_strict": "./agents/support.py:strict_graph",
                    "lc_rate": "./agents/rate.py:graph",
                }
            }
        )
    )
    ledger = tmp / "ledger.jsonl"
    server = live_server.start(
        f"sqlite://{tmp / 'dashboard.db'}",
        tmp,
        CRIOGEN_LANGGRAPH_CONFIG=str(config),
        SUPPORT_LEDGER=str(ledger),
    )
    yield server, ledger
    live_server.stop(server)


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    """Headless Debian Chromium (module-scoped, closed before other modules run)."""
    yield from live_server.headless_chromium()


def _start(server: Any, graph_id: str, text: str, values: Any = None) -> str:
    """A run of ``graph_id`` on a new thread; the thread id once it waits."""
    thread_id = f"lc-{uuid.uuid4().hex[:10]}"
    message = {"type": "human", "content": text, "id": "h1"}

    def go(client: Any) -> None:
        client.threads.create(thread_id=thread_id)
        start = values if values is not None else {"messages": [message]}
        run = client.runs.create(thread_id, graph_id, input=start)
        client.runs.join(thread_id, run["run_id"])

    server.call(go)
    return thread_id


def _refunds(ledger: Path) -> list[dict[str, Any]]:
    if not ledger.exists():
        return []
    entries = [json.loads(line) for line in ledger.read_text().splitlines()]
    return [e for e in entries if e["tool"] == "issue_refund"]


def _open(chromium: Any, server: Any, thread_id: str) -> Any:
    page = live_server.sign_in(chromium, server, "olga")
    page.set_default_timeout(15_000)
    page.goto(f"/ui/threads/{thread_id}/")
    expect(page.locator("#thread-header [data-status]")).to_have_attribute(
        "data-status", "suspended"
    )
    # The live socket's first push re-renders the decision panel: acting before it is
    # applied races it (a click whose press and release straddle the swap is lost).
    wait_live(page)
    return page


def test_an_operator_approves_a_strict_tool_call_with_only_its_buttons(
    served: tuple[Any, Path], chromium: Any
) -> None:
    server, ledger = served
    tid = _start(server, "lc_refunds_strict", "refund order 11 by 4")
    page = _open(chromium, server, tid)
    try:
        form = page.locator("#actions form.decision")
        expect(form.locator("legend")).to_contain_text("issue_refund")
        expect(form.locator("[data-args]")).to_contain_text('"amount"')
        # approve and reject only: no edit button, no argument editor.
        expect(form.locator("button[name=approve]")).to_be_visible()
        expect(form.locator("button[name=reject]")).to_be_visible()
        expect(form.locator("button[name=edit]")).to_have_count(0)
        expect(form.locator("details.edit")).to_have_count(0)
        before = len(_refunds(ledger))

        form.locator("button[name=approve]").click()

        expect(page.locator("#thread-header [data-status]")).to_have_attribute(
            "data-status", "completed"
        )
    finally:
        page.context.close()
    assert _refunds(ledger)[before:] == [{"tool": "issue_refund", "order_id": 11, "amount": 4}]
    state = server.call(lambda c: c.threads.get_state(tid))
    assert state["values"]["messages"][-1]["content"] == "done: refunded 4 EUR on order 11"


def test_an_operator_edits_the_arguments_before_the_tool_runs(
    served: tuple[Any, Path], chromium: Any
) -> None:
    server, ledger = served
    tid = _start(server, "lc_refunds", "refund order 12 by 40")
    page = _open(chromium, server, tid)
    try:
        form = page.locator("#actions form.decision")
        expect(form.locator("button[name=reject]")).to_be_visible()
        form.locator("details.edit summary").click()
        form.locator("textarea[data-edit]").fill('{"order_id": 12, "amount": 25}')
        before = len(_refunds(ledger))

        form.locator("button[name=edit]").click()

        expect(page.locator("#thread-header [data-status]")).to_have_attribute(
            "data-status", "completed"
        )
    finally:
        page.context.close()
    assert _refunds(ledger)[before:] == [{"tool": "issue_refund", "order_id": 12, "amount": 25}]
    state = server.call(lambda c: c.threads.get_state(tid))
    assert state["values"]["messages"][-1]["content"].endswith("refunded 25 EUR on order 12")


def test_an_interrupts_response_schema_is_answered_with_a_form(
    served: tuple[Any, Path], chromium: Any
) -> None:
    server, _ = served
    tid = _start(server, "lc_rate", "", {"topic": "kelp", "note": {}})
    page = _open(chromium, server, tid)
    try:
        form = page.locator("#actions form.typed")
        form.locator("[name='answer.text']").fill("salty")
        form.locator("[name='answer.stars']").fill("9")
        form.locator("button[name=resume]").click()
        # Refused by name next to the field; the thread still waits.
        expect(
            page.locator("#actions [data-field-name='answer.stars'] .field-error")
        ).to_be_visible()
        page.locator("#actions form.typed [name='answer.stars']").fill("4")
        page.locator("#actions form.typed button[name=resume]").click()
        expect(page.locator("#thread-header [data-status]")).to_have_attribute(
            "data-status", "completed"
        )
    finally:
        page.context.close()
    state = server.call(lambda c: c.threads.get_state(tid))
    assert state["values"]["note"] == {"text": "salty", "stars": 4}


def test_the_thread_page_lists_langgraphs_own_steps_with_their_nodes(
    served: tuple[Any, Path], chromium: Any
) -> None:
    server, _ = served
    tid = _start(server, "lc_refunds_strict", "refund order 13 by 2")
    history = server.call(lambda c: c.threads.get_history(tid, limit=50))
    page = _open(chromium, server, tid)
    try:
        steps = page.locator("#langgraph-steps tbody tr")
        # One row per LangGraph checkpoint, newest first, as the REST history has them.
        expect(steps).to_have_count(len(history))
        newest = steps.first
        expect(newest).to_have_attribute("data-step", str(history[0]["metadata"]["step"]))
        expect(newest).to_contain_text("HumanInTheLoopMiddleware.after_model")
        expect(newest).to_contain_text("waiting")
        # The model's step names the node that ran.
        expect(steps.nth(1)).to_contain_text("model")
        expect(steps.last).to_contain_text("input")
        short = history[0]["checkpoint"]["checkpoint_id"][:8]
        expect(newest.locator("code")).to_have_text(short)
    finally:
        page.context.close()
