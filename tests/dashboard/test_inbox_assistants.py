"""The inbox's assistant choices: a suspended thread's ``graph_id``, or its
``assistant_id`` when it has no ``graph_id`` (or a JSON value read as false), for the
threads the viewer may see; on PostgreSQL an operator's list is read from the index of
migration 0022. The same answers on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest


def scenario(prefix: str, operator_name: str) -> dict[str, Any]:
    """Make the threads, then what the operator and their owner see (names that start
    with ``prefix`` only: the PostgreSQL server is shared with other tests), what each
    should see, and on PostgreSQL the plan of the operator's statement."""
    from django.contrib.auth import get_user_model
    from django.db import connection

    from criogen.selectors import inbox_assistants, viewer
    from criogen.selectors.inbox import _PG_NAMES
    from criogen.storage.models import Thread

    users = get_user_model()
    operator = users.objects.get(username=operator_name)
    owner = users.objects.create(username=f"{prefix}-owner")
    other = users.objects.create(username=f"{prefix}-other")
    shapes: list[tuple[dict[str, Any], str, Any]] = [
        ({"graph_id": f"{prefix}-g1"}, "suspended", owner),
        ({"graph_id": f"{prefix}-g1", "tenant": "x"}, "suspended", owner),
        ({"assistant_id": f"{prefix}-a1"}, "suspended", owner),
        ({"graph_id": "", "assistant_id": f"{prefix}-a2"}, "suspended", owner),
        ({"graph_id": None, "assistant_id": f"{prefix}-a3"}, "suspended", owner),
        ({"graph_id": 0, "assistant_id": f"{prefix}-a4"}, "suspended", owner),
        ({"graph_id": f"{prefix}-g2", "assistant_id": f"{prefix}-behind"}, "suspended", owner),
        ({"graph_id": f"{prefix}-done"}, "completed", owner),
        ({"graph_id": f"{prefix}-theirs"}, "suspended", other),
        ({"tenant": "no name"}, "suspended", owner),
    ]
    for i, (metadata, status, who) in enumerate(shapes):
        Thread.objects.create(id=f"{prefix}-{i}", metadata=metadata, head_status=status, owner=who)

    def mine(names: list[str]) -> list[str]:
        return [name for name in names if name.startswith(prefix)]

    plan = ""
    if connection.vendor == "postgresql":
        with connection.cursor() as cur:
            cur.execute("EXPLAIN " + _PG_NAMES)
            plan = "\n".join(row[0] for row in cur.fetchall())
    names = [f"{prefix}-{n}" for n in ("a1", "a2", "a3", "a4", "g1", "g2")]
    got = {
        "operator": mine(inbox_assistants(viewer(operator))),
        "owner": mine(inbox_assistants(viewer(owner))),
    }
    Thread.objects.filter(id__startswith=prefix).delete()
    return {
        "got": got,
        "want": {"operator": sorted([*names, f"{prefix}-theirs"]), "owner": names},
        "plan": plan,
    }


@pytest.mark.django_db
def test_the_assistant_choices_on_sqlite(operator: Any) -> None:
    out = scenario(f"as-{uuid.uuid4().hex[:8]}", operator.username)
    assert out["got"] == out["want"]


@pytest.mark.postgres
def test_the_assistant_choices_on_postgresql_come_from_the_index(
    pg_dashboard_server: Any,
) -> None:
    prefix = f"as-{uuid.uuid4().hex[:8]}"
    code = (
        "import json\n"
        "from tests.dashboard.test_inbox_assistants import scenario\n"
        f"print('OUT=' + json.dumps(scenario({prefix!r}, 'olga')))\n"
    )
    out = json.loads(pg_dashboard_server.manage("shell", "-c", code).split("OUT=", 1)[1])
    assert out["got"] == out["want"]
    assert "criogen_thread_wait_name_idx" in out["plan"]
