"""Storage URLs, Django set-up for plain scripts, and the admin pages of the tables."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from criogen import START, Storage, Workflow
from criogen.engine.errors import UnknownStorageUrl
from criogen.engine.memory_store import MemoryStorage
from criogen.storage.setup import database_config, redact


@pytest.mark.parametrize(
    "url",
    [
        "mysql://user@host/db",
        "redis://127.0.0.1:6379/0",
        "ops.db",
        "sqlite:ops.db",
        "postgres:/host/db",
        "sqlite://",
        "sqlite://:memory:",
        "django://no-such-alias",
    ],
)
def test_it_refuses_a_url_it_cannot_serve(url: str, django_db_blocker: Any) -> None:
    with django_db_blocker.unblock(), pytest.raises(UnknownStorageUrl) as exc:
        Storage(url)

    assert exc.value.code == "unknown_storage_url"
    assert "url" in exc.value.details
    assert "sqlite://" in exc.value.message or "DATABASES" in exc.value.message


def test_an_unknown_url_error_does_not_show_the_password() -> None:
    with pytest.raises(UnknownStorageUrl) as exc:
        Storage("mysql://admin:s3cret@db.example.com/app")

    assert "s3cret" not in exc.value.message
    assert "s3cret" not in json.dumps(exc.value.to_dict())
    assert "admin:***@db.example.com" in exc.value.message


@pytest.mark.parametrize("url", [None, "", "memory://", ":memory:"])
def test_no_url_means_memory(url: str | None) -> None:
    assert isinstance(Storage(url), MemoryStorage)


def test_it_parses_database_urls_into_django_settings(tmp_path: Path) -> None:
    pg = database_config("postgres://bob:p%40ss@db.example.com:6543/criogen")
    assert {k: pg[k] for k in ("ENGINE", "NAME", "USER", "PASSWORD", "HOST", "PORT")} == {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": "criogen",
        "USER": "bob",
        "PASSWORD": "p@ss",
        "HOST": "db.example.com",
        "PORT": "6543",
    }
    assert database_config("postgresql://db/x")["NAME"] == "x"
    lite = database_config("sqlite://data/ops.db", base_dir=tmp_path)
    assert lite["ENGINE"] == "django.db.backends.sqlite3"
    assert lite["NAME"] == str(tmp_path / "data" / "ops.db")
    assert database_config(f"sqlite://{tmp_path}/abs.db")["NAME"] == f"{tmp_path}/abs.db"
    with pytest.raises(UnknownStorageUrl):
        database_config("ftp://files.example.com/db")
    assert redact("postgres://bob:secret@h/db") == "postgres://bob:***@h/db"
    assert redact("sqlite:///tmp/x.db") == "sqlite:///tmp/x.db"


def test_a_plain_script_configures_django_and_migrates_a_fresh_sqlite_file(
    tmp_path: Path,
) -> None:
    db = tmp_path / "new" / "dir" / "ops.db"  # neither the file nor its folder exists
    script = (
        "import json, sys\n"
        "from criogen import Storage, Workflow, START\n"
        "storage = Storage(sys.argv[1])\n"
        "wf = Workflow(reducers={'steps': 'append'})\n"
        "wf.add_node('a', lambda s: {'steps': ['a']})\n"
        "wf.add_edge(START, 'a')\n"
        "result = wf.compile(storage=storage).thread('script-thread').run({'x': 1})\n"
        "import django.conf\n"
        "from criogen.errors import UnknownStorageUrl\n"
        "try:\n"
        "    Storage.default()\n"
        "    default = 'no error'\n"
        "except UnknownStorageUrl as exc:\n"
        "    default = exc.code\n"
        "print(json.dumps({'state': result.state, 'default': default,\n"
        "                  'settings': django.conf.settings.SETTINGS_MODULE}))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}

    out = subprocess.run(
        [sys.executable, "-c", script, f"sqlite://{db}"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert out.returncode == 0, out.stderr
    answer = json.loads(out.stdout.strip().splitlines()[-1])
    assert answer == {
        "state": {"x": 1, "steps": ["a"]},
        "default": "unknown_storage_url",  # no Django project: say so, not a settings error
        "settings": None,
    }
    with sqlite3.connect(db) as conn:
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
        applied = {
            row[0]
            for row in conn.execute("SELECT name FROM django_migrations WHERE app = 'criogen'")
        }
        checkpoints = conn.execute(
            "SELECT count(*) FROM criogen_checkpoint WHERE thread_id = 'script-thread'"
        ).fetchone()[0]
    assert {"criogen_thread", "criogen_checkpoint", "criogen_value"} <= tables
    migrations = {
        p.stem for p in (Path(__file__).parents[3] / "criogen/storage/migrations").glob("0*.py")
    }
    assert applied == migrations
    assert checkpoints == 2


# -- admin ----------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_admin_lists_and_shows_threads_checkpoints_and_values(admin_client: Any) -> None:
    wf = Workflow(reducers={"steps": "append"})
    wf.add_node("a", lambda s: {"steps": ["a"], "note": "hello admin"})
    wf.add_edge(START, "a")
    app = wf.compile(storage=Storage.default(), durability="sync")
    result = app.thread("admin-thread").run({"x": 1})
    checkpoint_id = result.checkpoint.id

    from criogen.storage.models import Value

    value = Value.objects.filter(thread_id="admin-thread", state_key="note").get()
    pages = {
        "/admin/criogen/thread/": "admin-thread",
        "/admin/criogen/thread/?head_status__exact=completed": "admin-thread",
        "/admin/criogen/thread/?q=admin-thread": "admin-thread",
        "/admin/criogen/thread/admin-thread/change/": "completed",
        "/admin/criogen/checkpoint/": "admin-thread",
        "/admin/criogen/checkpoint/?source__exact=input": "admin-thread",
        f"/admin/criogen/checkpoint/{checkpoint_id}/change/": checkpoint_id,
        "/admin/criogen/value/": "note",
        "/admin/criogen/value/?q=note": "note",
        f"/admin/criogen/value/{value.pk}/change/": "hello admin",
    }
    for url, expected in pages.items():
        response = admin_client.get(url)
        assert response.status_code == 200, url
        assert expected in response.content.decode(), url
