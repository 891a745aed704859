"""Properties of state merging and of the delta storage format (Hypothesis).

- Composing the deltas of several updates and applying the result once gives the same
  state as applying the updates one by one.
- Rebuilding a state from stored value rows (``build_state``) gives the state the
  engine merged in memory, at every version of a line with appends, sets and forks.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from criogen.engine.checkpoints import Checkpoint, CheckpointId, CheckpointWrite, ThreadId
from criogen.engine.errors import InvalidState
from criogen.engine.state import Delta, apply_update, compose, encode
from criogen.engine.store import ValueRow, build_state, value_rows_for

REDUCERS = {"log": "append", "items": "append"}
KEYS = ["a", "b", "log", "items"]

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53), max_value=2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=6),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=8,
)
updates = st.lists(st.dictionaries(st.sampled_from(KEYS), json_values, max_size=4), max_size=8)

SETTINGS = settings(max_examples=100, deadline=None, database=None)


def apply_delta(state: dict[str, Any], delta: Delta) -> dict[str, Any]:
    """What storage does with a delta: set the value, or extend the list."""
    out = dict(state)
    for key, change in delta.items():
        if change.op == "append":
            out[key] = [*out.get(key, []), *change.value]
        else:
            out[key] = change.value
    return out


@SETTINGS
@given(start=st.dictionaries(st.sampled_from(KEYS), json_values, max_size=4), steps=updates)
def test_composed_deltas_equal_applying_updates_one_by_one(
    start: dict[str, Any], steps: list[dict[str, Any]]
) -> None:
    base, _ = apply_update({}, start, REDUCERS, origin="input")
    state, total = base, {}  # type: ignore[var-annotated]
    for update in steps:
        state, delta = apply_update(state, update, REDUCERS, origin="node")
        total = compose(total, delta)

    assert apply_delta(base, total) == state
    # Only keys some update touched are in the delta.
    assert set(total) == {key for update in steps for key in update}


@SETTINGS
@given(steps=updates)
def test_each_delta_takes_the_previous_state_to_the_next(steps: list[dict[str, Any]]) -> None:
    state: dict[str, Any] = {}
    for update in steps:
        new_state, delta = apply_update(state, update, REDUCERS, origin="node")
        assert apply_delta(state, delta) == new_state
        state = new_state


@SETTINGS
@given(
    plan=st.lists(
        st.one_of(
            st.tuples(
                st.just("update"), st.dictionaries(st.sampled_from(KEYS), json_values, max_size=3)
            ),
            st.tuples(st.just("fork"), st.integers(min_value=0, max_value=1000)),
        ),
        min_size=1,
        max_size=12,
    )
)
def test_build_state_rebuilds_every_version_of_a_line_with_forks(
    plan: list[tuple[str, Any]],
) -> None:
    rows: dict[tuple[str, int], ValueRow] = {}
    versions: dict[int, tuple[dict[str, int], dict[str, Any]]] = {}  # v -> (pointers, state)
    tip_values: dict[str, int] = {}
    state: dict[str, Any] = {}
    for version, (kind, arg) in enumerate(plan, start=1):
        prev: dict[str, int] = {}
        if kind == "fork" and versions:
            # Rewind: copy an earlier checkpoint's pointers; no value rows are written.
            tip_values, state = versions[1 + arg % len(versions)]
            delta: Delta = {}
            values = dict(tip_values)
        else:
            update = arg if kind == "update" else {}  # a fork before any checkpoint
            state, delta = apply_update(state, update, REDUCERS, origin="node")
            values = dict(tip_values)
            for key, change in delta.items():
                if change.op == "append" and key in values:
                    prev[key] = values[key]
                values[key] = version
        checkpoint = Checkpoint(
            id=CheckpointId(f"cp-{version}"),
            thread_id=ThreadId("t"),
            run_id=None,
            version=version,
            source="step",
            status="in_progress",
            state=state,
            value_versions=values,
        )
        for key, v, row_kind, data, row_prev in value_rows_for(
            CheckpointWrite(checkpoint, delta, version - 1, prev)
        ):
            rows[(key, v)] = ValueRow(row_kind, data, row_prev)
        tip_values = values
        versions[version] = (values, state)

    for pointers, expected in versions.values():
        assert build_state(pointers, rows) == expected


@SETTINGS
@given(steps=updates)
def test_the_text_a_merge_keeps_for_storage_is_the_encoding_of_its_value(
    steps: list[dict[str, Any]],
) -> None:
    # Storage writes Change.text as is, so it must always say what Change.value says.
    state: dict[str, Any] = {}
    for update in steps:
        state, delta = apply_update(state, update, REDUCERS, origin="node")
        for change in delta.values():
            if change.text is not None:
                assert change.text == encode(change.value)


@pytest.mark.parametrize(
    ("update", "key"),
    [
        ({"a": (1, 2)}, "state['a']"),
        ({"a": {"x": [1, {2: "two"}]}}, "state['a']['x'][1]"),
        ({"a": [float("nan")]}, "state['a'][0]"),
        ({"a": {"s": {1, 2}}}, "state['a']['s']"),
    ],
)
def test_a_value_that_is_not_plain_json_is_refused_naming_where(
    update: dict[str, Any], key: str
) -> None:
    with pytest.raises(InvalidState) as exc:
        apply_update({}, update, {}, origin="node")
    assert exc.value.details["key"] == key


def test_the_merged_state_does_not_share_objects_with_the_update() -> None:
    items = [{"n": 1}]
    update = {"a": items, "log": items}
    state, _ = apply_update({}, update, REDUCERS, origin="node")
    items[0]["n"] = 2
    items.append({"n": 3})
    assert state == {"a": [{"n": 1}], "log": [{"n": 1}]}


any_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


@SETTINGS
@given(any_json)
def test_encode_writes_what_json_dumps_writes(value: Any) -> None:
    """``encode`` skips json.dumps's per-call Python; its text is json.dumps's."""
    import json

    from criogen.engine.state import json_copy

    expected = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    assert encode(value) == expected
    copy, text = json_copy(value, "state['x']")
    assert text == expected
    assert copy == value


@SETTINGS
@given(st.dictionaries(st.sampled_from(["a", "b", "c"]), json_values), updates)
def test_the_state_size_counted_key_by_key_is_that_of_its_json(
    head: dict[str, Any], steps: list[dict[str, Any]]
) -> None:
    """``json_size`` takes the text of the values a delta set from the delta; the sum
    is the byte length of the whole state's JSON."""
    from criogen.engine.threads import json_size

    state = head
    for update in steps:
        state, delta = apply_update(state, update, REDUCERS, origin="test")
        assert json_size(state, delta) == len(encode(state).encode()) == json_size(state)


def test_new_ids_are_random_uuid4_strings() -> None:
    import uuid

    from criogen.engine.checkpoints import new_id

    ids = {new_id() for _ in range(2000)}
    assert len(ids) == 2000
    for text in ids:
        parsed = uuid.UUID(text)
        assert str(parsed) == text
        assert parsed.version == 4
        assert parsed.variant == uuid.RFC_4122
