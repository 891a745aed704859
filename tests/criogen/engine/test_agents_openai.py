"""An agent on OpenAIChat against a real local chat-completions server: tool calling,
approval across the pause, the transcript sent back, and token usage."""

from __future__ import annotations

import asyncio

from criogen import Agent, Storage, tool
from criogen.llms import OpenAIChat
from tests.criogen.test_llms import ChatServer, Reply, completion


@tool
def issue_refund(order_id: str, amount: float) -> str:
    """Refund an order."""
    return f"Refunded {amount} on {order_id}."


def test_an_openai_agent_suspends_for_approval_and_finishes_after_it(
    storage: Storage, thread_id: str
) -> None:
    call = {
        "id": "call_abc",
        "type": "function",
        "function": {"name": "issue_refund", "arguments": '{"order_id": "42", "amount": 10}'},
    }
    with (
        ChatServer() as server,
        OpenAIChat("gpt-test", base_url=server.url, api_key="sk-test", timeout=5.0) as model,
    ):
        server.queue(
            Reply(completion(None, [call], "tool_calls")),
            Reply(completion("Refunded order 42.")),
        )
        agent = Agent(
            model,
            instructions="You are a support agent.",
            tools=[issue_refund],
            approve=["issue_refund"],
            storage=storage,
        )
        t = agent.thread(thread_id)
        suspended = t.send("Refund order 42")
        assert suspended.status == "suspended"
        assert suspended.pending[0]["args"] == {"order_id": "42", "amount": 10}
        reply = t.approve(by="alice")
        assert reply.text == "Refunded order 42."
        assert reply.usage == {"input_tokens": 42, "output_tokens": 10}
        first, second = server.requests
    assert first.body["messages"][0] == {"role": "system", "content": "You are a support agent."}
    assert first.body["tools"][0]["function"]["name"] == "issue_refund"
    sent = second.body["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "tool"]
    assert sent[3] == {
        "role": "tool",
        "tool_call_id": "call_abc",
        "content": "Refunded 10.0 on 42.",
    }


async def test_agents_run_from_async_code(storage: Storage, thread_id: str) -> None:
    from criogen.llms import ScriptedModel

    agent = Agent(ScriptedModel(["one", "two"]), storage=storage)
    reply = await agent.arun("hi")
    assert reply.text == "one"
    second = await asyncio.wait_for(agent.thread(thread_id).asend("again"), 30)
    assert second.text == "two"
