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
from django.db import connections

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
