from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
import types
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from criogen import llms
from criogen.engine.errors import InvalidMessage, ModelError, ScriptExhausted
from criogen.engine.messages import ai, human, system, tool_result
from criogen.engine.tools import tool
from criogen.llms import ChatModel, OpenAIChat, ScriptedModel

REPO_ROOT = Path(__file__).resolve().parents[2]


@tool
def issue_refund(order_id: str, amount: float) -> str:
    """Refund an order.

    Args:
        order_id: The order to refund.
        amount: Amount in euros.
    """
    return "ok"


# --- ScriptedModel ---------------------------------------------------------------------------


def test_scripted_model_plays_its_script_in_order() -> None:
    model = ScriptedModel(
        [
            {"tool_calls": [{"name": "issue_refund", "args": {"order_id": "42", "amount": 10.0}}]},
            "Refunded order 42.",
        ]
    )

    first = model.complete([human("Refund order 42")], [issue_refund])
    second = model.complete([human("Refund order 42")], [issue_refund])

    assert first["type"] == "ai"
    assert first["content"] == ""
    [call] = first["tool_calls"]
    assert call["name"] == "issue_refund"
    assert call["args"] == {"order_id": "42", "amount": 10.0}
    assert call["id"].startswith("call_")
    assert second["content"] == "Refunded order 42."
    assert second["tool_calls"] == []
    assert model.remaining == 0


def test_scripted_model_keeps_given_call_ids_and_usage() -> None:
    model = ScriptedModel(
        [
            {
                "content": "Checking.",
                "tool_calls": [{"id": "call_fixed", "name": "lookup", "args": {}}],
                "usage": {"input_tokens": 7, "output_tokens": 2},
            }
        ]
    )

    reply = model.complete([human("hi")])

    assert reply["tool_calls"][0]["id"] == "call_fixed"
    assert reply["content"] == "Checking."
    assert reply["usage"] == {"input_tokens": 7, "output_tokens": 2}


def test_scripted_model_calls_callables_with_the_messages_and_optionally_the_tools() -> None:
    seen: list[Any] = []

    def echo(messages: list[dict[str, Any]]) -> str:
        return f"You said: {messages[-1]['content']}"

    def list_tools(messages: list[dict[str, Any]], tools: list[Any]) -> dict[str, Any]:
        seen.extend(tools)
        return {"content": ", ".join(t.name for t in tools)}

    model = ScriptedModel([echo, list_tools])

    assert model.complete([human("hello")])["content"] == "You said: hello"
    assert model.complete([human("x")], [issue_refund])["content"] == "issue_refund"
    assert seen == [issue_refund]


def test_scripted_model_records_its_calls_and_resets() -> None:
    model = ScriptedModel(["one", "two"])
    transcript = [system("Be brief."), human("hi")]

    model.complete(transcript, [issue_refund])
    assert model.calls[0].messages == transcript
    assert model.calls[0].tools == [issue_refund]

    model.reset()

    assert model.calls == []
    assert model.complete([human("hi")])["content"] == "one"


def test_scripted_model_says_how_long_its_script_was_when_it_runs_out() -> None:
    model = ScriptedModel(["only reply"])
    model.complete([human("hi")])

    with pytest.raises(ScriptExhausted, match=r"1 item\(s\) and this is call 2") as caught:
        model.complete([human("again")])

    assert caught.value.code == "script_exhausted"
    assert caught.value.details == {"items": 1, "call": 2}


def test_an_empty_script_runs_out_on_the_first_call() -> None:
    with pytest.raises(ScriptExhausted, match="0 item"):
        ScriptedModel([]).complete([human("hi")])


def test_scripted_model_is_thread_safe() -> None:
    count = 200
    model = ScriptedModel([f"reply {i}" for i in range(count)])
    replies: list[str] = []
    lock = threading.Lock()
    start = threading.Barrier(8)

    def worker() -> None:
        start.wait()
        for _ in range(count // 8):
            content = model.complete([human("hi")])["content"]
            with lock:
                replies.append(content)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sorted(replies) == sorted(f"reply {i}" for i in range(count))
    assert len(model.calls) == count


@pytest.mark.parametrize(
    ("item", "problem"),
    [
        (42, "Script item 0 is a int"),
        ({"text": "hi"}, "unknown keys"),
        ({"tool_calls": [{"args": {}}]}, "name"),
        ({"tool_calls": [{"name": "f", "args": "not json"}]}, "args"),
    ],
)
def test_scripted_model_rejects_a_bad_script_item_up_front(item: Any, problem: str) -> None:
    with pytest.raises(InvalidMessage, match=problem):
        ScriptedModel([item])


def test_scripted_model_rejects_a_bad_reply_from_a_callable() -> None:
    model = ScriptedModel([lambda messages: 42])

    with pytest.raises(InvalidMessage, match="Script item 0"):
        model.complete([human("hi")])


def test_the_shipped_models_are_chat_models() -> None:
    assert isinstance(ScriptedModel([]), ChatModel)
    assert isinstance(OpenAIChat(), ChatModel)


# --- OpenAIChat against a real local chat-completions server ---------------------------------


@dataclass
class Reply:
    """One queued answer of the fake server."""

    body: dict[str, Any] | str
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0


@dataclass
class Received:
    """One request the fake server got."""

    method: str
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


class ChatServer:
    """A chat-completions server on 127.0.0.1 that answers from a queue and records requests."""

    def __init__(self) -> None:
        self.replies: deque[Reply] = deque()
        self.requests: list[Received] = []
        self.stopping = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # the name http.server dispatches POST requests to
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length) or b"{}")
                server.requests.append(
                    Received(
                        "POST", self.path, {k.lower(): v for k, v in self.headers.items()}, body
                    )
                )
                reply = (
                    server.replies.popleft()
                    if server.replies
                    else Reply(
                        {"error": {"message": "no reply queued"}}, 599, {"x-should-retry": "false"}
                    )
                )
                if reply.delay:
                    server.stopping.wait(reply.delay)
                payload = reply.body if isinstance(reply.body, str) else json.dumps(reply.body)
                data = payload.encode()
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for name, value in reply.headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:
                    pass  # the client gave up (timeout test)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.01,), daemon=True)

    def queue(self, *replies: Reply) -> None:
        self.replies.extend(replies)

    def __enter__(self) -> ChatServer:
        self.thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stopping.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join()


def completion(
    content: str | None = "Hello!",
    tool_calls: list[dict[str, Any]] | None = None,
    finish_reason: str = "stop",
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls is not None:
        message["tool_calls"] = tool_calls
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": "gpt-test",
        "choices": [
            {"index": 0, "message": message, "finish_reason": finish_reason, "logprobs": None}
        ],
        "usage": {"prompt_tokens": 21, "completion_tokens": 5, "total_tokens": 26},
    }


def error(status: int, message: str, headers: dict[str, str] | None = None) -> Reply:
    body = {"error": {"message": message, "type": "test", "param": None, "code": None}}
    return Reply(body, status, headers or {})


@pytest.fixture
def server() -> Iterator[ChatServer]:
    with ChatServer() as chat_server:
        yield chat_server


@pytest.fixture
def make_model(server: ChatServer) -> Iterator[Any]:
    created: list[OpenAIChat] = []

    def make(**options: Any) -> OpenAIChat:
        settings: dict[str, Any] = {"base_url": server.url, "api_key": "sk-test", "timeout": 5.0}
        model = OpenAIChat(**(settings | options))
        created.append(model)
        return model

    yield make
    for model in created:
        model.close()


TRANSCRIPT = [
    system("You are a support agent."),
    human("Refund order 42"),
    ai("", [{"id": "call_1", "name": "issue_refund", "args": {"order_id": "42", "amount": 10.0}}]),
    tool_result("call_1", "issue_refund", "Refunded."),
]


def test_it_sends_the_transcript_and_tool_specs_and_reads_a_text_reply(
    server: ChatServer, make_model: Any
) -> None:
    server.queue(Reply(completion("Refunded order 42.")))
    model = make_model(model="gpt-test", temperature=0.2, max_tokens=100)

    reply = model.complete(TRANSCRIPT, [issue_refund])

    [request] = server.requests
    assert request.path == "/v1/chat/completions"
    assert request.headers["authorization"] == "Bearer sk-test"
    assert request.body["model"] == "gpt-test"
    assert request.body["temperature"] == 0.2
    assert request.body["max_tokens"] == 100
    assert request.body["messages"] == [
        {"role": "system", "content": "You are a support agent."},
        {"role": "user", "content": "Refund order 42"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {
                        "name": "issue_refund",
                        "arguments": '{"order_id": "42", "amount": 10.0}',
                    },
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "Refunded."},
    ]
    assert request.body["tools"] == [issue_refund.spec()]
    assert reply["type"] == "ai"
    assert reply["content"] == "Refunded order 42."
    assert reply["tool_calls"] == []
    assert reply["usage"] == {"input_tokens": 21, "output_tokens": 5}
    assert reply["response_metadata"] == {"model": "gpt-test", "finish_reason": "stop"}


def test_it_sends_no_tools_key_without_tools(server: ChatServer, make_model: Any) -> None:
    server.queue(Reply(completion()))

    make_model().complete([human("hi")])

    [request] = server.requests
    assert request.body["model"] == "gpt-4o-mini"
    assert "tools" not in request.body
    assert "temperature" not in request.body


def test_it_reads_tool_calls_with_json_arguments(server: ChatServer, make_model: Any) -> None:
    server.queue(
        Reply(
            completion(
                None,
                [
                    {
                        "id": "call_abc",
                        "type": "function",
                        "function": {
                            "name": "issue_refund",
                            "arguments": '{"order_id": "42", "amount": 10}',
                        },
                    }
                ],
                finish_reason="tool_calls",
            )
        )
    )

    reply = make_model().complete([human("Refund order 42")], [issue_refund])

    assert reply["content"] == ""
    assert reply["tool_calls"] == [
        {"id": "call_abc", "name": "issue_refund", "args": {"order_id": "42", "amount": 10}}
    ]


def test_it_retries_a_server_error_and_then_succeeds(server: ChatServer, make_model: Any) -> None:
    server.queue(error(500, "boom"), Reply(completion("Recovered.")))

    reply = make_model(max_retries=2).complete([human("hi")])

    assert reply["content"] == "Recovered."
    assert len(server.requests) == 2
    assert server.requests[0].body == server.requests[1].body


def test_it_waits_as_a_rate_limit_asks_and_retries(server: ChatServer, make_model: Any) -> None:
    server.queue(error(429, "slow down", {"retry-after-ms": "50"}), Reply(completion("Fine.")))

    started = time.monotonic()
    reply = make_model(max_retries=1).complete([human("hi")])

    assert reply["content"] == "Fine."
    assert len(server.requests) == 2
    assert time.monotonic() - started >= 0.05


def test_it_gives_up_on_a_rate_limit_after_its_retries(server: ChatServer, make_model: Any) -> None:
    server.queue(*[error(429, "quota exceeded", {"retry-after-ms": "10"}) for _ in range(3)])

    with pytest.raises(ModelError, match="rate limited") as caught:
        make_model(max_retries=2).complete([human("hi")])

    assert caught.value.code == "model_error"
    assert caught.value.details["retryable"] is True
    assert caught.value.details["status_code"] == 429
    assert "after 3 attempt(s)" in caught.value.message
    assert len(server.requests) == 3


def test_it_does_not_retry_a_bad_request(server: ChatServer, make_model: Any) -> None:
    server.queue(error(400, "context_length_exceeded"))

    with pytest.raises(ModelError, match="HTTP 400") as caught:
        make_model(max_retries=3).complete([human("hi")])

    assert caught.value.details["retryable"] is False
    assert "context_length_exceeded" in caught.value.message
    assert len(server.requests) == 1


def test_it_points_at_the_api_key_when_refused(server: ChatServer, make_model: Any) -> None:
    server.queue(error(401, "invalid api key"))

    with pytest.raises(ModelError, match="OPENAI_API_KEY") as caught:
        make_model().complete([human("hi")])

    assert caught.value.details["retryable"] is False


def test_it_times_out_a_slow_reply(server: ChatServer, make_model: Any) -> None:
    server.queue(Reply(completion("Too late."), delay=5.0))

    started = time.monotonic()
    with pytest.raises(ModelError, match="timed out") as caught:
        make_model(timeout=0.3, max_retries=0).complete([human("hi")])

    assert time.monotonic() - started < 3
    assert caught.value.details["retryable"] is True
    assert len(server.requests) == 1


def test_it_reports_an_endpoint_it_cannot_reach() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    # Nothing listens on the port any more.
    with (
        OpenAIChat(
            base_url=f"http://127.0.0.1:{port}/v1", api_key="sk-test", max_retries=0
        ) as model,
        pytest.raises(ModelError, match="could not connect") as caught,
    ):
        model.complete([human("hi")])

    assert caught.value.details["retryable"] is True


def test_it_rejects_malformed_tool_call_arguments(server: ChatServer, make_model: Any) -> None:
    bad_call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "issue_refund", "arguments": '{"order_id": "42", '},
    }
    server.queue(Reply(completion(None, [bad_call])))

    with pytest.raises(ModelError, match="not a JSON object") as caught:
        make_model().complete([human("hi")], [issue_refund])

    assert "issue_refund" in caught.value.message


def test_it_rejects_a_reply_without_choices(server: ChatServer, make_model: Any) -> None:
    server.queue(Reply(completion() | {"choices": []}))

    with pytest.raises(ModelError, match="no choices"):
        make_model().complete([human("hi")])


@pytest.mark.parametrize("body", ["<html>Bad gateway</html>", '"just a string"'])
def test_it_rejects_a_reply_that_is_not_a_completion(
    server: ChatServer, make_model: Any, body: str
) -> None:
    server.queue(Reply(body))

    with pytest.raises(ModelError, match="could not be read") as caught:
        make_model().complete([human("hi")])

    assert caught.value.details["retryable"] is False


def test_it_reads_the_key_and_endpoint_from_the_environment(
    server: ChatServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    monkeypatch.setenv("OPENAI_BASE_URL", server.url)
    server.queue(Reply(completion("From env.")))

    with OpenAIChat() as model:
        reply = model.complete([human("hi")])

    assert reply["content"] == "From env."
    assert server.requests[0].headers["authorization"] == "Bearer sk-from-env"


def test_it_asks_for_an_api_key_when_there_is_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_ADMIN_KEY", raising=False)

    with pytest.raises(ModelError, match="OPENAI_API_KEY") as caught:
        OpenAIChat().complete([human("hi")])

    assert caught.value.details["retryable"] is False


def test_it_does_not_show_the_api_key() -> None:
    model = OpenAIChat("gpt-test", api_key="sk-secret", base_url="http://127.0.0.1:1/v1")

    assert "sk-secret" not in repr(model)
    assert "gpt-test" in repr(model)


def test_importing_the_llms_module_does_not_import_openai() -> None:
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    code = "import sys, criogen.llms; assert 'openai' not in sys.modules, 'openai imported'"

    result = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False
    )

    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("module", [llms])
def test_it_exports_exactly_what_all_lists(module: types.ModuleType) -> None:
    defined_here = {
        name
        for name, value in vars(module).items()
        if not name.startswith("_") and getattr(value, "__module__", None) == module.__name__
    }

    assert all(hasattr(module, name) for name in module.__all__)
    assert defined_here <= set(module.__all__)


def test_the_old_models_path_still_imports_with_a_deprecation_warning() -> None:
    import criogen

    # Import it afresh so that its module-level warning fires here, then leave
    # sys.modules as it was.
    saved = sys.modules.pop("criogen.models", None)
    try:
        with pytest.warns(
            DeprecationWarning, match=r"removed in the next release.*criogen\.llms"
        ) as record:
            from criogen.models import OpenAIChat as OldOpenAIChat  # noqa: TID251
            from criogen.models import ScriptedModel as OldScriptedModel  # noqa: TID251
    finally:
        sys.modules.pop("criogen.models", None)
        vars(criogen).pop("models", None)
        if saved is not None:
            sys.modules["criogen.models"] = saved

    assert OldOpenAIChat is OpenAIChat
    assert OldScriptedModel is ScriptedModel
    # The warning names the line that imports the old path, not the alias module.
    assert [w.filename for w in record] == [__file__]
