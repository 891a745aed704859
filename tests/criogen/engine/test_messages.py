from __future__ import annotations

import copy
import json
import types
import uuid
from typing import Any

import pytest

from criogen.engine import errors, messages
from criogen.engine.errors import InvalidMessage
from criogen.engine.messages import (
    ai,
    human,
    normalize_message,
    normalize_messages,
    system,
    to_openai,
    tool_result,
)


def is_uuid4(value: object) -> bool:
    return isinstance(value, str) and uuid.UUID(value).version == 4


# --- normalize_message: accepted shapes ------------------------------------------------------


def test_it_reads_a_plain_string_as_a_human_message() -> None:
    message = normalize_message("Refund order 42")

    assert message["type"] == "human"
    assert message["content"] == "Refund order 42"
    assert is_uuid4(message["id"])


def test_it_gives_every_message_an_id_and_keeps_an_existing_one() -> None:
    generated = normalize_message({"type": "human", "content": "hi"})
    kept = normalize_message({"type": "human", "content": "hi", "id": "m-1"})

    assert is_uuid4(generated["id"])
    assert kept["id"] == "m-1"


def test_it_reads_langchain_style_dicts() -> None:
    conversation = normalize_messages(
        [
            {"type": "system", "content": "Be brief."},
            {"type": "human", "content": "Refund order 42"},
            {
                "type": "ai",
                "content": "",
                "tool_calls": [
                    {"id": "call_1", "name": "issue_refund", "args": {"order_id": "42"}}
                ],
                "usage": {"input_tokens": 10, "output_tokens": 4},
            },
            {
                "type": "tool",
                "content": "Refunded.",
                "tool_call_id": "call_1",
                "name": "issue_refund",
                "status": "success",
            },
        ]
    )

    assert [m["type"] for m in conversation] == ["system", "human", "ai", "tool"]
    assert conversation[2]["tool_calls"] == [
        {"id": "call_1", "name": "issue_refund", "args": {"order_id": "42"}}
    ]
    assert conversation[2]["usage"] == {"input_tokens": 10, "output_tokens": 4}
    assert conversation[3]["tool_call_id"] == "call_1"
    assert conversation[3]["name"] == "issue_refund"
    assert conversation[3]["status"] == "success"


def test_it_reads_openai_style_dicts() -> None:
    conversation = normalize_messages(
        [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Refund order 42", "name": "alice"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "issue_refund", "arguments": '{"order_id": "42"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "Refunded."},
            {"role": "assistant", "content": "Done."},
        ]
    )

    assert [m["type"] for m in conversation] == ["system", "human", "ai", "tool", "ai"]
    assert conversation[1]["name"] == "alice"
    assert conversation[2]["content"] == ""
    assert conversation[2]["tool_calls"] == [
        {"id": "call_1", "name": "issue_refund", "args": {"order_id": "42"}}
    ]
    assert conversation[4]["tool_calls"] == []
    assert all("role" not in m for m in conversation)


def test_it_fills_a_tool_messages_name_from_the_call_it_answers() -> None:
    conversation = normalize_messages(
        [
            {"role": "assistant", "tool_calls": [{"id": "c1", "name": "lookup", "args": {}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "{}"},
            {"role": "tool", "tool_call_id": "unknown", "content": "{}"},
        ]
    )

    assert conversation[1]["name"] == "lookup"
    assert conversation[2]["name"] is None


@pytest.mark.parametrize(("alias", "kind"), [("user", "human"), ("assistant", "ai")])
def test_it_accepts_user_and_assistant_as_type_aliases(alias: str, kind: str) -> None:
    assert normalize_message({"type": alias, "content": "x"})["type"] == kind


def test_it_reads_a_developer_role_as_a_system_message() -> None:
    assert normalize_message({"role": "developer", "content": "x"})["type"] == "system"


def test_it_keeps_content_blocks_as_they_are() -> None:
    blocks = [
        {"type": "text", "text": "What is in this picture?"},
        {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
    ]

    message = normalize_message({"role": "user", "content": blocks})

    assert message["content"] == blocks
    assert json.loads(json.dumps(message))["content"] == blocks


def test_it_generates_missing_tool_call_ids_and_reads_empty_arguments_as_an_empty_object() -> None:
    message = normalize_message(
        {
            "type": "ai",
            "content": "",
            "tool_calls": [
                {"name": "now"},
                {"type": "function", "function": {"name": "now", "arguments": ""}},
            ],
        }
    )

    first, second = message["tool_calls"]
    assert first["id"].startswith("call_") and second["id"].startswith("call_")
    assert first["id"] != second["id"]
    assert first["args"] == second["args"] == {}


def test_it_reads_langchains_usage_metadata_as_usage() -> None:
    message = normalize_message(
        {
            "type": "ai",
            "content": "hi",
            "usage_metadata": {"input_tokens": 3, "output_tokens": 1, "total_tokens": 4},
        }
    )

    assert message["usage"] == {"input_tokens": 3, "output_tokens": 1}
    assert "usage_metadata" not in message


def test_it_keeps_extra_keys_and_does_not_modify_its_input() -> None:
    original: dict[str, Any] = {
        "role": "assistant",
        "content": "hi",
        "response_metadata": {"model": "m"},
        "tool_calls": [{"id": "c1", "function": {"name": "f", "arguments": '{"a": 1}'}}],
    }
    snapshot = copy.deepcopy(original)

    message = normalize_message(original)

    assert original == snapshot
    assert message["response_metadata"] == {"model": "m"}
    message["tool_calls"][0]["args"]["a"] = 2
    assert original == snapshot


def test_a_normalized_message_is_plain_json() -> None:
    message = normalize_message(
        {"role": "assistant", "content": None, "tool_calls": [{"name": "f", "args": {"x": [1]}}]}
    )

    assert json.loads(json.dumps(message)) == message


def test_normalizing_twice_changes_nothing() -> None:
    once = normalize_messages(["hi", ai("", [{"name": "f", "args": {}}]), system("s")])

    assert normalize_messages(once) == once


def test_it_accepts_a_single_string_or_dict_where_a_list_is_expected() -> None:
    assert normalize_messages("hi")[0]["content"] == "hi"
    assert normalize_messages({"role": "user", "content": "hi"})[0]["type"] == "human"


# --- normalize_message: errors ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("obj", "field"),
    [
        (42, "message"),
        (None, "message"),
        ({"content": "no type"}, "type"),
        ({"type": "text", "text": "a content block, not a message"}, "type"),
        ({"role": "function", "content": "x"}, "role"),
        ({"type": "human", "role": "assistant", "content": "x"}, "type"),
        ({"type": "human"}, "content"),
        ({"type": "human", "content": 42}, "content"),
        ({"type": "human", "content": [42]}, "content[0]"),
        ({"type": "human", "content": "x", "id": 7}, "id"),
        ({"type": "human", "content": "x", "name": 7}, "name"),
        ({"type": "tool", "content": "x"}, "tool_call_id"),
        ({"type": "tool", "content": "x", "tool_call_id": "c", "status": "ok"}, "status"),
        ({"type": "ai", "content": "", "tool_calls": "f"}, "tool_calls"),
        ({"type": "ai", "content": "", "tool_calls": ["f"]}, "tool_calls[0]"),
        ({"type": "ai", "content": "", "tool_calls": [{"args": {}}]}, "tool_calls[0].name"),
        (
            {"type": "ai", "content": "", "tool_calls": [{"name": "f", "args": [1]}]},
            "tool_calls[0].args",
        ),
        ({"type": "ai", "content": "", "tool_calls": [{"name": "f", "id": 1}]}, "tool_calls[0].id"),
        (
            {
                "role": "assistant",
                "tool_calls": [{"function": {"name": "f", "arguments": "{oops"}}],
            },
            "tool_calls[0].function.arguments",
        ),
        ({"type": "ai", "content": "", "usage": {"input_tokens": -1}}, "usage.input_tokens"),
        ({"role": "assistant", "content": "", "function_call": {"name": "f"}}, "function_call"),
    ],
)
def test_it_rejects_a_bad_message_naming_the_field(obj: object, field: str) -> None:
    with pytest.raises(InvalidMessage) as caught:
        normalize_message(obj)

    assert caught.value.code == "invalid_message"
    assert caught.value.details["field"] == field


def test_it_names_the_position_of_a_bad_message_in_a_list() -> None:
    with pytest.raises(InvalidMessage, match=r"messages\[1\]") as caught:
        normalize_messages(["fine", {"type": "human", "content": 42}])

    assert caught.value.details["field"] == "messages[1].content"


def test_it_rejects_messages_that_are_not_a_list() -> None:
    with pytest.raises(InvalidMessage) as caught:
        normalize_messages(42)

    assert caught.value.details["field"] == "messages"


# --- constructors ----------------------------------------------------------------------------


def test_human_keeps_extra_keys() -> None:
    message = human("hi", name="alice", id="m-1")

    assert message == {"type": "human", "content": "hi", "id": "m-1", "name": "alice"}


def test_ai_builds_tool_calls_and_usage() -> None:
    message = ai(
        "Let me check.",
        tool_calls=[{"name": "lookup", "args": {"order_id": "42"}}, {"id": "c2", "name": "now"}],
        usage={"input_tokens": 12, "output_tokens": 5},
    )

    assert message["type"] == "ai"
    assert message["content"] == "Let me check."
    assert message["tool_calls"][0]["name"] == "lookup"
    assert message["tool_calls"][0]["id"].startswith("call_")
    assert message["tool_calls"][1] == {"id": "c2", "name": "now", "args": {}}
    assert message["usage"] == {"input_tokens": 12, "output_tokens": 5}
    assert is_uuid4(message["id"])


def test_ai_without_tool_calls_has_an_empty_list_and_no_usage() -> None:
    message = ai("Done.")

    assert message["tool_calls"] == []
    assert "usage" not in message


def test_tool_result_keeps_string_content_and_serializes_other_json() -> None:
    text = tool_result("c1", "lookup", "Found it.")
    data = tool_result("c1", "lookup", {"status": "shipped", "eta": None})

    assert text["content"] == "Found it."
    assert json.loads(data["content"]) == {"status": "shipped", "eta": None}
    assert data["tool_call_id"] == "c1"
    assert data["name"] == "lookup"
    assert data["status"] == "success"


def test_tool_result_can_report_an_error() -> None:
    message = tool_result("c1", "lookup", "Order 99 does not exist.", status="error")

    assert message["status"] == "error"


@pytest.mark.parametrize(
    ("call_id", "content", "status", "field"),
    [
        ("", "x", "success", "tool_call_id"),
        ("c1", {1, 2}, "success", "content"),
        ("c1", float("nan"), "success", "content"),
        ("c1", "x", "failed", "status"),
    ],
)
def test_tool_result_rejects_bad_input(
    call_id: str, content: object, status: Any, field: str
) -> None:
    with pytest.raises(InvalidMessage) as caught:
        tool_result(call_id, "lookup", content, status=status)

    assert caught.value.details["field"] == field


def test_system_builds_a_system_message() -> None:
    message = system("You are a support agent.")

    assert message["type"] == "system"
    assert message["content"] == "You are a support agent."


def test_call_ids_and_message_ids_are_unique() -> None:
    assert len({messages.new_call_id() for _ in range(100)}) == 100
    assert len({messages.new_message_id() for _ in range(100)}) == 100


# --- to_openai -------------------------------------------------------------------------------


def test_it_converts_the_transcript_to_chat_completions_messages() -> None:
    transcript = [
        system("Be brief."),
        human("Refund order 42", name="alice"),
        ai(
            "",
            [{"id": "call_1", "name": "issue_refund", "args": {"order_id": "42", "amount": 10.0}}],
        ),
        tool_result("call_1", "issue_refund", "Refunded.", status="error"),
        ai("Refunded order 42.", usage={"input_tokens": 1, "output_tokens": 1}),
    ]

    assert to_openai(transcript) == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Refund order 42", "name": "alice"},
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
        {"role": "assistant", "content": "Refunded order 42."},
    ]


def test_it_keeps_text_that_comes_with_tool_calls() -> None:
    [entry] = to_openai([ai("Let me look.", [{"id": "c", "name": "f", "args": {}}])])

    assert entry["content"] == "Let me look."


def test_to_openai_and_normalize_round_trip() -> None:
    transcript = [
        system("s"),
        human("h"),
        ai("", [{"id": "c1", "name": "f", "args": {"n": 1}}]),
        tool_result("c1", "f", "r"),
        ai("done"),
    ]

    back = normalize_messages(to_openai(transcript))

    def strip(m: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in m.items() if k not in ("id", "usage")}

    assert [strip(m) for m in back] == [strip(m) for m in transcript]


def test_to_openai_rejects_a_malformed_transcript() -> None:
    with pytest.raises(InvalidMessage):
        to_openai([{"type": "tool", "content": "x"}])


@pytest.mark.parametrize("module", [messages, errors])
def test_it_exports_exactly_what_all_lists(module: types.ModuleType) -> None:
    defined_here = {
        name
        for name, value in vars(module).items()
        if not name.startswith("_") and getattr(value, "__module__", None) == module.__name__
    }

    assert all(hasattr(module, name) for name in module.__all__)
    assert defined_here <= set(module.__all__)
