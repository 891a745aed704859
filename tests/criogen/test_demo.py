"""``manage.py criogen_demo``: the data behind ``make demo`` (without the server)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client

from criogen import demo
from criogen.storage.models import Run, Thread

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("inprocess_runner")]


@pytest.fixture(autouse=True)
def credentials_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "demo-credentials.json"
    monkeypatch.setattr(demo, "CREDENTIALS", path)
    return path


def run_demo(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    call_command("criogen_demo", *args)
    return capsys.readouterr().out


def test_it_fills_the_inbox_and_the_operator_can_sign_in(
    capsys: pytest.CaptureFixture[str], credentials_file: Path
) -> None:
    out = run_demo(capsys)

    saved: dict[str, Any] = json.loads(credentials_file.read_text())
    assert saved["password"] in out and saved["token"] in out
    statuses = dict(Thread.objects.filter(pk__startswith="demo-").values_list("pk", "head_status"))
    assert statuses["demo-refund-1"] == "suspended"
    assert statuses["demo-review-1"] == "suspended"
    assert statuses["demo-failed-1"] == "failed"
    assert statuses["demo-done-1"] == "completed"
    assert statuses["demo-faq-1"] == "completed"

    browser = Client()
    assert browser.login(username="operator", password=saved["password"])
    inbox = browser.get("/ui/inbox/")
    assert inbox.status_code == 200
    assert b"demo-refund-1" in inbox.content and b"issue_refund" in inbox.content
    api = Client(headers={"authorization": f"Bearer {saved['token']}"})
    assert api.get("/threads/demo-refund-1").json()["status"] == "interrupted"


def test_running_it_again_duplicates_nothing(
    capsys: pytest.CaptureFixture[str], credentials_file: Path
) -> None:
    run_demo(capsys)
    threads, runs = Thread.objects.count(), Run.objects.count()
    first = json.loads(credentials_file.read_text())

    out = run_demo(capsys)

    assert (Thread.objects.count(), Run.objects.count()) == (threads, runs)
    assert "already there" in out
    assert json.loads(credentials_file.read_text()) == first


def test_reset_starts_the_demo_data_over(capsys: pytest.CaptureFixture[str]) -> None:
    run_demo(capsys)
    Thread.objects.create(id="not-demo")

    out = run_demo(capsys, "--reset")

    assert "Removed" in out
    assert Thread.objects.filter(pk="not-demo").exists()
    assert Thread.objects.get(pk="demo-refund-1").head_status == "suspended"
