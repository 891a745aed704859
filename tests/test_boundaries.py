"""The engine is usable without Django: importing it loads no Django module."""

from __future__ import annotations

import os
import subprocess
import sys
import types

import criogen


def test_it_imports_the_engine_without_django_settings() -> None:
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    code = (
        "import sys\n"
        "from criogen import Workflow, Storage, START, END, suspend\n"
        "import criogen.engine, criogen.engine.memory_store\n"
        "from criogen.engine.errors import ThreadSuspended, ThreadInterrupted, ThreadBusy\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('django', 'channels', 'celery', 'ninja'))\n"
        "assert not bad, bad\n"
        "print('ok')\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_it_exports_exactly_what_all_lists() -> None:
    public = {name for name in dir(criogen) if not name.startswith("_")}
    # Submodules (engine, storage, runner, services…) appear once something imports them.
    modules = {name for name in public if isinstance(getattr(criogen, name), types.ModuleType)}
    assert public - modules - {"annotations"} == set(criogen.__all__) - {"__version__"}
