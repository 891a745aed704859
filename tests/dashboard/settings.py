"""Settings of the browser tests' server: the project's, plus the test graphs."""

from __future__ import annotations

from criogen.settings import *  # noqa: F403 - the project's settings, extended below
from criogen.settings import CRIOGEN_ASSISTANTS

CRIOGEN_ASSISTANTS = {
    **CRIOGEN_ASSISTANTS,
    "refunds": "tests.dashboard.graphs:agent",
    "flaky": "tests.dashboard.graphs:flaky",
}
