"""criogen.selectors: who may see a thread, runs of a thread, run by id, derived thread
status."""

from __future__ import annotations

import os
import time
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.core.serializers.json import DjangoJSONEncoder

from criogen import START, Workflow
from criogen.engine.errors import ThreadNotFound
from criogen.selectors import (
    RunNotFound,
    check_thread_for,
    get_run,
    refresh_run,
    runs_for_thread,
    thread_exists_for,
    thread_for,
    thread_status,
    thread_statuses,
    viewer,
    visible_history,
    visible_threads,
    with_status,
)
from criogen.selectors.visibility import Viewer
from criogen.services.assistants import resolve_assistant
from criogen.storage.models import Run, Thread

pytestmark = pytest.mark.django_db


def add_run(thread: Thread, status: str) -> Run:
    return Run.objects.create(
        thread=thread,
        assistant=resolve_assistant(assistant_id="steps"),
        graph_id="steps",
        status=status,
    )


@pytest.mark.parametrize(
    ("head_status", "run_status", "lease", "expected"),
    [
        ("", None, False, "idle"),
        ("completed", "success", False, "idle"),
        ("completed", "pending", False, "busy"),
        ("suspended", "running", False, "busy"),
        ("completed", None, True, "busy"),
        ("suspended", "interrupted", False, "interrupted"),
        ("failed", "error", False, "error"),
        ("in_progress", "interrupted", False, "idle"),
    ],
)
def test_it_derives_the_thread_status(
    thread_id: str, head_status: str, run_status: str | None, lease: bool, expected: str
) -> None:
    thread = Thread.objects.create(
        id=thread_id,
        head_status=head_status,
        lease_id="r" if lease else None,
        lease_expires=time.time() + 30 if lease else 0,
    )
    if run_status:
        add_run(thread, run_status)

    assert thread_status(thread) == expected
    assert thread_statuses([thread]) == {thread_id: expected}
    # thread_for(status=True) runs the with_status query compiled once: the same row.
    operator = Viewer(user=None, is_operator=True)
    row = thread_for(operator, thread_id, status=True)
    orm = with_status(Thread.objects.filter(pk=thread_id)).get()
    assert row.rest_status == orm.rest_status == expected  # type: ignore[attr-defined]
    assert [getattr(row, f.attname) for f in Thread._meta.concrete_fields] == [
        getattr(orm, f.attname) for f in Thread._meta.concrete_fields
    ]


def test_it_lists_a_threads_runs_newest_first_and_finds_one(thread_id: str) -> None:
    thread = Thread.objects.create(id=thread_id)
    runs = [add_run(thread, s) for s in ("success", "error", "pending")]

    assert [r.pk for r in runs_for_thread(thread_id=thread_id)] == [r.pk for r in runs[::-1]]
    assert [r.status for r in runs_for_thread(thread_id=thread_id, status="error")] == ["error"]
    assert get_run(run_id=str(runs[0].pk), thread_id=thread_id).pk == runs[0].pk


@pytest.mark.parametrize("run_id", ["nope", "0b6f2a4e-9d1c-4f5a-8e3b-7c2d1a0f9e84"])
def test_an_unknown_run_is_run_not_found(thread_id: str, run_id: str) -> None:
    with pytest.raises(RunNotFound) as caught:
        get_run(run_id=run_id)
    assert caught.value.code == "run_not_found"


def test_a_run_on_another_thread_is_not_found(thread_id: str) -> None:
    run = add_run(Thread.objects.create(id=thread_id), "success")
    Thread.objects.create(id="other")

    with pytest.raises(RunNotFound):
        get_run(run_id=str(run.pk), thread_id="other")


# -- who may see or act on a thread: one rule for every door --------------------------------


@pytest.fixture
def people(django_user_model: Any) -> dict[str, Any]:
    operate = Permission.objects.get(content_type__app_label="criogen", codename="operate")
    olga = django_user_model.objects.create_user("olga-sel")  # operator by permission
    olga.user_permissions.add(operate)
    return {
        "olga": olga,
        "sam": django_user_model.objects.create_user("sam-sel", is_staff=True),  # staff
        "alice": django_user_model.objects.create_user("alice-sel"),  # owns a thread
        "bob": django_user_model.objects.create_user("bob-sel"),  # owns nothing
    }


def test_operators_see_every_thread_and_others_only_their_own(
    people: dict[str, Any], thread_id: str
) -> None:
    Thread.objects.create(id=thread_id, owner=people["alice"])
    seen = {name: viewer(user) for name, user in people.items()}

    for name in ("olga", "sam", "alice"):
        assert thread_for(seen[name], thread_id).pk == thread_id, name
        check_thread_for(seen[name], thread_id)
        assert thread_exists_for(seen[name], thread_id) is True
        assert list(visible_threads(seen[name]).values_list("pk", flat=True)) == [thread_id]
    assert thread_for(seen["olga"], thread_id, status=True).rest_status == "idle"  # type: ignore[attr-defined]
    assert thread_for(seen["olga"], thread_id, owner=True).owner == people["alice"]


def test_another_users_thread_is_not_found_exactly_like_a_missing_one(
    people: dict[str, Any], thread_id: str
) -> None:
    Thread.objects.create(id=thread_id, owner=people["alice"])
    bob = viewer(people["bob"])

    for tid in (thread_id, "no-such-thread"):
        with pytest.raises(ThreadNotFound) as caught:
            thread_for(bob, tid, write=True)
        assert caught.value.code == "thread_not_found"
        assert caught.value.message == f"thread {tid!r} not found."
        with pytest.raises(ThreadNotFound):
            check_thread_for(bob, tid)
    with pytest.raises(ThreadNotFound):
        thread_exists_for(bob, thread_id)
    assert thread_exists_for(bob, "no-such-thread") is False  # free: a run may create it
    assert not visible_threads(bob).exists()


def test_the_status_row_of_an_owner_is_the_orms_and_others_get_404(
    people: dict[str, Any], thread_id: str
) -> None:
    Thread.objects.create(id=thread_id, owner=people["alice"], head_status="suspended")
    row = thread_for(viewer(people["alice"]), thread_id, status=True)
    assert row.rest_status == "interrupted"  # type: ignore[attr-defined]
    assert row.owner_id == people["alice"].pk
    for tid in (thread_id, "no-such-thread"):
        with pytest.raises(ThreadNotFound) as caught:
            thread_for(viewer(people["bob"]), tid, status=True)
        assert caught.value.message == f"thread {tid!r} not found."


def test_visible_history_reads_checkpoints_only_for_those_who_may_see_the_thread(
    people: dict[str, Any], thread_id: str
) -> None:
    from criogen.registry import storage

    empty = f"{thread_id}-empty"
    Thread.objects.create(id=thread_id, owner=people["alice"])
    Thread.objects.create(id=empty, owner=people["alice"])
    store = storage()
    wf = Workflow()
    wf.add_node("count", lambda s: {"n": s.get("n", -1) + 1})
    wf.add_edge(START, "count")
    app = wf.compile(storage=store, durability="sync")
    for _ in range(3):
        app.thread(thread_id).run({})
    newest = [cp.version for cp in store.history(thread_id)]
    assert len(newest) >= 3
    head_state = store.head(thread_id).state  # type: ignore[union-attr]

    for name in ("olga", "sam", "alice"):
        who = viewer(people[name])
        assert [cp.version for cp in visible_history(who, thread_id)] == newest, name
        assert [cp.state for cp in visible_history(who, thread_id, limit=1)] == [head_state]
        assert visible_history(who, thread_id, limit=5, before=newest[-1]) == []
        assert visible_history(who, empty) == []
    for tid in (thread_id, empty, "no-such-thread"):
        with pytest.raises(ThreadNotFound) as caught:
            visible_history(viewer(people["bob"]), tid)
        assert caught.value.message == f"thread {tid!r} not found."


def test_a_signed_out_user_sees_no_thread(thread_id: str) -> None:
    from django.contrib.auth.models import AnonymousUser

    Thread.objects.create(id=thread_id)  # no owner: not everyone's
    nobody = viewer(AnonymousUser())
    assert nobody.is_operator is False
    assert not visible_threads(nobody).exists()
    with pytest.raises(ThreadNotFound):
        thread_for(nobody, thread_id)
    with pytest.raises(ThreadNotFound):
        check_thread_for(nobody, thread_id)


def test_with_auth_off_the_anonymous_operator_sees_every_thread(
    people: dict[str, Any], thread_id: str
) -> None:
    from api.auth import LOCAL  # user None, an operator

    Thread.objects.create(id=thread_id, owner=people["alice"])
    check_thread_for(LOCAL, thread_id)
    with pytest.raises(ThreadNotFound):
        check_thread_for(LOCAL, "no-such-thread")


def test_a_runs_columns_are_read_as_the_orm_reads_them(thread_id: str) -> None:
    """``get_run(fields=…)`` and ``refresh_run`` read a few columns in a hand-written
    statement: the values are the ORM's (JSON decoded, times aware)."""
    thread = Thread.objects.create(id=thread_id)
    run = add_run(thread, "pending")
    Run.objects.filter(pk=run.pk).update(status="error", error={"type": "E", "n": [1]})
    loaded = Run.objects.get(pk=run.pk)

    some = get_run(run_id=str(run.pk), thread_id=thread_id, fields=("status", "error"))
    assert (some.pk, some.thread_id, some.status, some.error) == (
        run.pk,
        thread_id,
        "error",
        {"type": "E", "n": [1]},
    )
    with pytest.raises(RunNotFound):
        get_run(run_id=str(run.pk), thread_id="t-other", fields=("status",))
    with pytest.raises(RunNotFound):
        get_run(run_id=str(uuid.uuid4()), fields=("status",))

    refresh_run(run, ["status", "error", "updated_at"])
    assert (run.status, run.error, run.updated_at) == (
        loaded.status,
        loaded.error,
        loaded.updated_at,
    )
    Run.objects.filter(pk=run.pk).delete()
    with pytest.raises(Run.DoesNotExist):
        refresh_run(run, ["status"])


def test_an_assistant_is_read_as_the_orm_reads_it() -> None:
    from criogen.storage.models import Assistant

    first = resolve_assistant(assistant_id="steps")  # created on first use
    again = resolve_assistant(assistant_id="steps")
    by_id = resolve_assistant(assistant_id=str(first.assistant_id))
    loaded = Assistant.objects.get(pk=first.pk)
    fields = [f.attname for f in Assistant._meta.concrete_fields]
    for found in (again, by_id):
        assert {f: getattr(found, f) for f in fields} == {f: getattr(loaded, f) for f in fields}
        assert not found._state.adding


# -- search: the prepared statement answers what the ORM's path answers ------------------


def _orm_page(who: Any, **search: Any) -> tuple[list[Any], int]:
    """The ORM's path of ``search_page`` (what SQLite and the rarer shapes take): the
    function itself, with the prepared statement's path turned off."""
    from unittest import mock

    from criogen.selectors import search as searching

    with mock.patch.object(searching, "_fast_page", return_value=None):
        return searching.search_page(who, **search)


def _page_rows(found: list[Any]) -> list[tuple[Any, ...]]:
    return [
        (
            row.id,
            row.rest_status,
            row.created_at,
            row.updated_at,
            row.metadata,
            row.head_version,
            row.ttl_minutes,
            row.ttl_strategy,
            row.expires_at,
            head.id if head is not None else None,
        )
        for row, head in found
    ]


INNER = "CRIOGEN_SEARCH_SHAPES_ON_POSTGRESQL"
"""Set in the inner pytest that runs the search shapes on PostgreSQL."""


@pytest.mark.postgres
@pytest.mark.skipif(bool(os.environ.get(INNER)), reason="the inner run itself")
def test_every_search_shape_on_postgresql() -> None:
    """The comparison below needs PostgreSQL as the test database (on SQLite both sides
    are the ORM's path): it runs in a pytest of its own on a PostgreSQL database."""
    from tests.servers import run_module_on_postgresql

    node = f"{__file__}::test_every_search_shape_answers_as_the_orm_does"
    done = run_module_on_postgresql(node, {INNER: "1"})
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert "1 passed" in done.stdout, done.stdout[-2000:]


@pytest.mark.skipif(not os.environ.get(INNER), reason="only the inner run, on PostgreSQL")
def test_every_search_shape_answers_as_the_orm_does(
    people: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """On PostgreSQL a search page is one prepared statement (criogen.selectors.search):
    its rows, their statuses and the total match the ORM's path on every shape, for
    owners and operators (a signed-out caller's count: none)."""
    from django.contrib.auth.models import AnonymousUser
    from django.db import connection

    from criogen.selectors import count_threads
    from criogen.selectors import search as searching

    now = time.time()
    shapes = [
        ("", None, False, {"team": "a", "n": 1}),
        ("completed", "running", False, {"team": "a", "n": 2, "tags": ["x"]}),
        ("suspended", None, False, {"team": "b", "n": None}),
        ("failed", None, False, {"team": "a", "nested": {"k": 1}}),
        ("completed", None, True, {"team": "b", "n": 2}),
        ("suspended", "pending", False, {"team": "a"}),
        ("completed", "success", False, {}),
    ]
    # Times the JSON text writes differently: whole seconds (no fraction), a fraction
    # under a millisecond (".000"), one just under the next millisecond (cut, not rounded).
    base = datetime(2026, 5, 4, 3, 2, 1, tzinfo=UTC)
    times = [base, base.replace(microsecond=400), base.replace(microsecond=123999)]
    made: list[str] = []
    for i in range(28):
        head_status, run_status, lease, metadata = shapes[i % len(shapes)]
        owner = people["alice"] if i % 3 else people["bob"]
        thread = Thread.objects.create(
            id=f"search-{i:02d}-{uuid.uuid4().hex[:6]}",
            owner=owner,
            head_status=head_status,
            metadata=metadata,
            lease_id="lease" if lease else None,
            lease_expires=now + 600 if lease else 0,
            ttl_minutes=30 if i % 5 == 0 else None,
            **(
                {"created_at": times[i % 3], "updated_at": times[(i + 1) % 3]} if i % 4 == 0 else {}
            ),
        )
        if run_status:
            add_run(thread, run_status)
        made.append(thread.id)
    callers = [viewer(people[name]) for name in ("alice", "bob", "olga")]
    assert count_threads(viewer(AnonymousUser())) == 0
    assert connection.vendor == "postgresql"
    assert searching._fast_page(callers[0], limit=3) is not None  # the statement's path
    filters: list[dict[str, Any]] = [
        {},
        {"metadata": {"team": "a"}},
        {"metadata": {"team": "a", "n": 2}},
        {"metadata": {"n": None}},
        {"metadata": {"nested": {"k": 1}}},
        {"metadata": {"tags": "x"}},
        {"metadata": {"0": "x"}},
        {"ids": made[::4]},
    ]
    windows = [(None, 0), (3, 0), (3, 5), (2, 2), (5, 40)]
    # The metadata window as it is, then one row per row wanted: most windows then end
    # before the matches do, and both paths fall back to the metadata index. The second
    # time, every page at an offset walks the list for ids first (DEEP_OFFSET), and
    # every statement that may is written in from its first search (REPEATS_WRITTEN_IN).
    passes = ((searching.WINDOW_PER_ROW, searching.DEEP_OFFSET, 1000), (1, 1, 1))
    for per_row, deep, repeats in passes:
        monkeypatch.setattr(searching, "WINDOW_PER_ROW", per_row)
        monkeypatch.setattr(searching, "DEEP_OFFSET", deep)
        monkeypatch.setattr(searching, "REPEATS_WRITTEN_IN", repeats)
        _compare_every_shape(callers, filters, windows)
    for who in callers:
        for where in filters:
            for status in (None, "idle", "busy", "interrupted", "error"):
                count = count_threads(who, status=status, **where)
                assert count == searching._search(who, **where, status=status)[1].count(), where


def _compare_every_shape(
    callers: list[Any], filters: list[dict[str, Any]], windows: list[tuple[int | None, int]]
) -> None:
    """Each caller, filter and status once, with a sort and a window in turn (four sorts
    and five windows: each status meets every window and every sort across the 120
    searches)."""
    from criogen.selectors import search_page

    sorts = [(None, None), ("thread_id", "asc"), ("updated_at", "desc"), ("status", "asc")]
    searches = [
        (who, where, status)
        for who in callers
        for where in filters
        for status in (None, "idle", "busy", "interrupted", "error")
    ]
    for k, (who, where, status) in enumerate(searches):
        sort_by, sort_order = sorts[k % len(sorts)]
        limit, offset = windows[(k + k // 5) % len(windows)]
        search = {
            **where,
            "status": status,
            "limit": limit,
            "offset": offset,
            "sort_by": sort_by,
            "sort_order": sort_order,
        }
        found, total = search_page(who, **search)
        expected, expected_total = _orm_page(who, **search)
        assert (_page_rows(found), total) == (_page_rows(expected), expected_total), search
        # The times' JSON text, written by the database, is DjangoJSONEncoder's.
        written = [getattr(row, "json_times", None) for row, _ in found]
        encoded = [(_encoded(row.created_at), _encoded(row.updated_at)) for row, _ in expected]
        if sort_by != "status":  # the ORM's path: no text
            assert written == encoded, search


def _encoded(value: datetime) -> str:
    return str(DjangoJSONEncoder().default(value))


def test_a_search_statement_writes_in_an_integer_owner_and_binds_any_other() -> None:
    """The shapes that keep a generic plan have the owner, the limit and the offset in
    their text (criogen.selectors.search._written_in); an owner key that is not an
    integer (a custom user model's) stays a bound parameter, as metadata does."""
    from criogen.selectors import search as searching

    shape = searching._Shape(True, "idle", False, (), "created_at", True, False)
    assert searching._generic(shape)
    key = (shape, False, 7, 20, 40)
    assert [searching._repeated(key) for _ in range(3)] == [False, False, True]
    sql, names = searching._written_in(shape, False, 7, 20, 40)
    assert names == ["now", "now", "now"]
    # The page is read with the row after it (search_page's X-Pagination-Total).
    assert '"owner_id" = 7 ' in sql and "LIMIT 21 OFFSET 40" in sql
    sql, names = searching._written_in(shape, True, None, 20, 4000)
    assert names.count("owner") == 3 and "LIMIT 21 OFFSET 4000" in sql
    assert sql.count("%s") == len(names)
    assert not searching._generic(searching._Shape(True, None, False, (True,), "id", True, True))
