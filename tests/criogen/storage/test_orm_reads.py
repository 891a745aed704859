"""The ORM storage's checkpoint reads decode JSON as ``json.loads`` does."""

from __future__ import annotations

import json

import pytest

from criogen.storage.orm.reads import _loads


@pytest.mark.parametrize(
    "text",
    [
        '{"n": 1, "items": [1, 2.5, "x", null, true], "nested": {"a": []}}',
        '"caf\\u00e9 \u00e9"',
        '{"a": 1, "a": 2}',
        "9223372036854775807",
        "-9223372036854775808",
        "18446744073709551616",  # past 64 bits: orjson would read a float
        "-9223372036854775809",
        '{"id": 123456789012345678901234567890}',
        "0.30000000000000004",
        "1e-400",
        "1e400",  # Python reads inf, orjson refuses
        "NaN",
        "-Infinity",
        '"\\ud800"',  # a lone surrogate
        '"\ud800"',
    ],
)
def test_it_decodes_every_text_as_json_loads_does(text: str) -> None:
    expected = json.loads(text)
    decoded = _loads(text)
    assert repr(decoded) == repr(expected)
    assert type(decoded) is type(expected)


def test_it_refuses_what_json_loads_refuses() -> None:
    with pytest.raises(json.JSONDecodeError):
        _loads("{not json")
