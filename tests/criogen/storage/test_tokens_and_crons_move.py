"""ApiToken and Cron moved from the ``api`` app into the core (``criogen``) on their old
tables: a database migrated before the move keeps its tokens, crons and the permissions
given on them, ends with the schema a new database gets, and migrates back; on SQLite
and PostgreSQL."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.parametrize("backend", ["sqlite", "postgres"])

TABLES = ("api_apitoken", "api_cron")


@pytest.fixture
def own_url(backend: str, tmp_path: Path, django_db_blocker: Any) -> Iterator[str]:
    """A database of this test's own (it migrates backwards and forwards)."""
    from tests.conftest import own_database_url

    with own_database_url(backend, tmp_path, "criogen_move") as url, django_db_blocker.unblock():
        yield url


@pytest.fixture
def new_url(backend: str, request: pytest.FixtureRequest, django_db_blocker: Any) -> Iterator[str]:
    """The session's database of ``backend``, migrated from zero."""
    with django_db_blocker.unblock():
        yield str(request.getfixturevalue(f"{backend}_url"))


def the_move() -> dict[str, tuple[str, str]]:
    """Per app, (the migration before the move, the move), found by name so that
    renumbering the migrations does not break the test."""
    from django.db.migrations.loader import MigrationLoader

    disk = MigrationLoader(None, ignore_no_migrations=True).disk_migrations
    found = {}
    for label, suffix in (("api", "_move_tokens_and_crons_to_core"), ("criogen", "_from_api")):
        name = next(n for app, n in disk if app == label and n.endswith(suffix))
        before = next(n for app, n in disk[(label, name)].dependencies if app == label)
        found[label] = (before, name)
    return found


def migrate(alias: str, app: str | None = None, target: str | None = None) -> None:
    from django.core.management import call_command

    args = [a for a in (app, target) if a]
    call_command("migrate", *args, database=alias, verbosity=0, interactive=False)


def schema(alias: str) -> dict[str, Any]:
    """The two tables' columns and constraints, as the database describes them."""
    from django.db import connections

    connection = connections[alias]
    with connection.cursor() as cursor:
        return {
            table: (
                sorted(
                    (c.name, c.type_code, c.null_ok)
                    for c in connection.introspection.get_table_description(cursor, table)
                ),
                connection.introspection.get_constraints(cursor, table),
            )
            for table in TABLES
        }


def content_types(alias: str) -> set[tuple[str, str]]:
    from django.contrib.contenttypes.models import ContentType

    rows = ContentType.objects.using(alias).filter(model__in=["apitoken", "cron"])
    return {(ct.app_label, ct.model) for ct in rows}


def test_a_database_from_before_the_move_keeps_its_tokens_crons_and_permissions(
    own_url: str, new_url: str
) -> None:
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Permission
    from django.db import connections
    from django.db.migrations.loader import MigrationLoader
    from django.utils import timezone

    from criogen.storage.models import ApiToken, Cron
    from criogen.storage.models.tokens import new_token
    from criogen.storage.setup import database_alias

    move = the_move()
    alias = database_alias(own_url)  # migrated to the head
    # Back to the last state before the move: the models are the api app's again.
    migrate(alias, "criogen", move["criogen"][0])
    migrate(alias, "api", move["api"][0])
    assert content_types(alias) == {("api", "apitoken"), ("api", "cron")}
    old = MigrationLoader(connections[alias]).project_state(
        nodes=[("api", move["api"][0]), ("criogen", move["criogen"][0])], at_end=True
    )
    users = old.apps.get_model("auth", "User").objects.using(alias)
    name = f"olduser-{uuid.uuid4().hex[:6]}"
    user = users.create(username=name, is_active=True)
    token, digest, prefix = new_token()
    old.apps.get_model("api", "ApiToken").objects.using(alias).create(
        user=user, name="legacy", token_hash=digest, prefix=prefix, expires_at=None
    )
    thread = old.apps.get_model("criogen", "Thread").objects.using(alias).create(id=name)
    cron = (
        old.apps.get_model("api", "Cron")
        .objects.using(alias)
        .create(
            assistant_id=str(uuid.uuid4()),
            thread=thread,
            schedule="*/5 * * * *",
            payload={"input": {"n": 1}},
            user=user,
            next_run_date=timezone.now() + timedelta(minutes=5),
        )
    )
    grant = Permission.objects.using(alias).get(
        codename="view_apitoken", content_type__app_label="api"
    )
    get_user_model().objects.using(alias).get(pk=user.pk).user_permissions.add(grant)

    migrate(alias)  # the move, as an upgrade runs it

    assert content_types(alias) == {("criogen", "apitoken"), ("criogen", "cron")}
    owner = get_user_model().objects.using(alias).get(username=name)
    granted = Permission.objects.using(alias).filter(user=owner)
    assert [(p.content_type.app_label, p.codename) for p in granted] == [
        ("criogen", "view_apitoken")
    ]
    row = ApiToken.objects.using(alias).get(user=owner)
    assert row.matches(token) and row.name == "legacy" and list(owner.api_tokens.all()) == [row]
    moved = Cron.objects.using(alias).get(pk=cron.pk)
    assert (moved.thread_id, moved.user_id, moved.payload) == (name, owner.pk, {"input": {"n": 1}})
    assert list(owner.criogen_crons.all()) == [moved]
    _, digest, prefix = new_token()
    ApiToken.objects.using(alias).create(user=owner, token_hash=digest, prefix=prefix)
    assert schema(alias) == schema(database_alias(new_url))

    # And back: the rows stay, the content types are the api app's again.
    migrate(alias, "criogen", move["criogen"][0])
    migrate(alias, "api", move["api"][0])
    assert content_types(alias) == {("api", "apitoken"), ("api", "cron")}
    with connections[alias].cursor() as cursor:
        cursor.execute("SELECT name FROM api_apitoken ORDER BY id")
        assert [r[0] for r in cursor.fetchall()] == ["legacy", ""]
    migrate(alias)
    assert schema(alias) == schema(database_alias(new_url))


STANDALONE = """
import sys
from criogen import Storage
storage = Storage(sys.argv[1])
from criogen.storage.models import ApiToken, Cron, Thread
Thread.objects.using(storage.alias).create(id="with-a-cron")
Cron.objects.using(storage.alias).create(
    assistant_id="a", schedule="* * * * *", thread_id="with-a-cron"
)
assert ApiToken.objects.using(storage.alias).count() == 0
# The cron goes with its thread (a cascade that needs the cron table).
assert storage.delete_thread("with-a-cron")
assert not Cron.objects.using(storage.alias).exists()
print("ok")
"""


def test_a_plain_script_without_the_api_app_gets_the_tables_too(own_url: str) -> None:
    """Storage(url) outside a Django project installs the core app only: the move's
    migration makes the tables the api app's migrations make in the project."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    done = subprocess.run(
        [sys.executable, "-c", STANDALONE, own_url],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
