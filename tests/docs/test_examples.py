"""Every code sample marked runnable in the README and docs/ runs as written.

A sample is runnable when its fence is ```` ```python runnable ````. Each one runs as
a plain script (no Django settings) in a fresh interpreter and an empty directory,
so it must be self-contained, as a reader pasting it would run it. The one change: a
sample naming the local PostgreSQL's shared ``test`` database runs on a fresh one.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path

import pytest

from tests.conftest import fresh_postgres_database

ROOT = Path(__file__).resolve().parents[2]
SHARED_PG = "postgres://postgres@127.0.0.1:5432/test"
FENCE = re.compile(r"^```python runnable[^\n]*\n(.*?)^```", re.DOTALL | re.MULTILINE)


def runnable_samples() -> list[tuple[str, str]]:
    samples = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = doc.read_text()
        for match in FENCE.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            samples.append((f"{doc.relative_to(ROOT)}:{line}", match.group(1)))
    return samples


SAMPLES = runnable_samples()


def test_the_docs_have_runnable_samples() -> None:
    assert len(SAMPLES) >= 5, [where for where, _ in SAMPLES]


@pytest.mark.parametrize(("where", "code"), SAMPLES, ids=[w for w, _ in SAMPLES])
def test_the_sample_runs(where: str, code: str, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    env["PYTHONPATH"] = str(ROOT)
    with ExitStack() as stack:
        if SHARED_PG in code:
            # The sample names the machine's shared `test` database, as a reader's would;
            # here it gets a fresh one, so that tables other checkouts migrated into the
            # shared one (another migration history) cannot fail it.
            url = stack.enter_context(fresh_postgres_database("criogen_docs"))
            code = code.replace(SHARED_PG, url)
        done = subprocess.run(
            [sys.executable, "-c", code],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert done.returncode == 0, f"{where} failed:\n{done.stderr[-3000:]}"
