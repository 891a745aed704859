"""The separate environments the comparison scripts install the other engine into.

``bench/.venvs/<name>`` (gitignored) is created on first use and re-installed only when
the requirements change (their hash is kept next to it), so the project's own
environment never holds the other engine's dependencies.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

VENVS = Path(__file__).resolve().parent / ".venvs"


def ensure_venv(name: str, requirements: Sequence[str], log: Callable[[str], None]) -> Path:
    """The Python of the venv ``name`` with ``requirements`` installed."""
    venv = VENVS / name
    python = venv / "bin" / "python"
    marker = venv / ".requirements"
    wanted = hashlib.sha1("\n".join(requirements).encode()).hexdigest()  # noqa: S324
    if python.exists() and marker.exists() and marker.read_text().strip() == wanted:
        return python
    if not python.exists():
        log(f"creating {venv}")
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    log("installing " + ", ".join(requirements))
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", *requirements],
        check=True,
        stdout=sys.stderr,
    )
    marker.write_text(wanted + "\n")
    return python
