"""The indexes a checkpoint write pays for (migration 0020).

Each index of criogen_checkpoint, and on PostgreSQL each index of criogen_thread (whose
row every write moves), is one more entry written per checkpoint. The thread's and
the owner's own foreign-key indexes were prefixes of other indexes, and the LIKE
twins of the checkpoint's id and run_id served no query; lookups by thread and by
owner still find an index that begins with the column.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connections, transaction
from django.utils import timezone

from criogen import Storage


@pytest.fixture(params=["sqlite", "postgres"])
def indexes(request: pytest.FixtureRequest, django_db_blocker: Any) -> Any:
    """A function: table name -> {index name: its columns} on each SQL backend."""
    url = request.getfixturevalue(f"{request.param}_url")
    with django_db_blocker.unblock():
        alias = Storage(url).alias
        connection = connections[alias]

        def read(table: str) -> dict[str, list[str]]:
            with connection.cursor() as cursor:
                found = connection.introspection.get_constraints(cursor, table)
            return {
                name: list(c["columns"])
                for name, c in found.items()
                if c["index"] or c["unique"] or c["primary_key"]
            }

        yield read


def test_a_checkpoint_row_keeps_only_the_indexes_its_reads_use(indexes: Any) -> None:
    checkpoint = indexes("criogen_checkpoint")
    assert ["thread_id"] not in checkpoint.values()
    assert ["thread_id", "version"] in checkpoint.values()
    assert ["run_id"] in checkpoint.values()
    assert not [name for name in checkpoint if name.endswith("_like")]


def test_the_owner_has_no_index_of_its_own_but_its_lists_begin_with_it(indexes: Any) -> None:
    thread = indexes("criogen_thread")
    assert ["owner_id"] not in thread.values()
    assert ["owner_id", "created_at", "id"] in thread.values()


@pytest.fixture(params=["sqlite", "postgres"])
def plan(request: pytest.FixtureRequest, django_db_blocker: Any) -> Any:
    """A function: queryset of criogen_thread -> its plan, on each SQL backend (on
    PostgreSQL with sequential scans off, so the plan shows whether an index can serve
    the query at all, whatever the few rows of a test database would favour)."""
    from criogen.storage.models import Thread

    url = request.getfixturevalue(f"{request.param}_url")
    with django_db_blocker.unblock():
        alias = Storage(url).alias
        connection = connections[alias]

        def explain(build: Any) -> str:
            with transaction.atomic(using=alias):
                if connection.vendor == "postgresql":
                    with connection.cursor() as cursor:
                        cursor.execute("SET LOCAL enable_seqscan = off")
                return str(build(Thread.objects.using(alias)).explain())

        yield explain


def test_the_owners_lists_and_the_ttl_sweep_keep_their_partial_indexes(plan: Any) -> None:
    # Partial (migration 0024): only owned threads and threads with a time to live have
    # an entry; a query by owner or by expiry implies the condition, so it still uses it.
    # (Each of these is the one index that matches both the filter and the order, so
    # the plan does not depend on what the other tests left in the table.)
    newest = plan(lambda threads: threads.filter(owner_id=1).order_by("-created_at", "-id")[:20])
    recent = plan(lambda threads: threads.filter(owner_id=1).order_by("-updated_at", "-id")[:20])
    due = plan(
        lambda threads: threads.filter(expires_at__lte=timezone.now()).order_by("expires_at")[:50]
    )
    assert "criogen_thread_owner_new_idx" in newest
    assert "criogen_thread_owner_upd_idx" in recent
    assert "criogen_thread_expires_idx" in due


def test_the_ttl_sweep_has_its_index_and_the_thread_id_no_prefix_twin(indexes: Any) -> None:
    thread = indexes("criogen_thread")
    assert ["expires_at"] in thread.values()
    assert not [name for name in thread if name.endswith("_like")]
