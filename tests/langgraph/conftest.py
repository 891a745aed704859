"""LangGraph tests need the ``langgraph`` extra (in the dev extras, so ``make test`` has
it); without it they are skipped, or fail in CI."""

from __future__ import annotations

import pytest

from criogen.langgraph import INSTALL_HINT, langgraph_installed
from tests.conftest import IN_CI

if not langgraph_installed():
    if IN_CI:
        raise RuntimeError(f"CI=true and {INSTALL_HINT} (it is in the dev extras)")
    pytest.skip(INSTALL_HINT, allow_module_level=True)
