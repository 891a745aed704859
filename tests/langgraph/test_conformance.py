"""LangGraph's own checkpointer conformance suite (``langgraph-checkpoint-conformance``)
against CriogenSaver, on SQLite and PostgreSQL, with and without encryption at rest.

One test per capability and database, so a failure names what broke; the suite's own
messages (each failing check and why) are in the assertion.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES

from criogen import Storage
from criogen.engine.crypto import generate_key
from criogen.langgraph import CriogenSaver

CAPABILITIES = sorted(c.value for c in ALL_CAPABILITIES)
KEY = generate_key()


@pytest.fixture(params=["sqlite", "postgres"])
def database(request: pytest.FixtureRequest, django_db_blocker: object) -> Iterator[str]:
    """Each database in turn, as a URL, with database access allowed (the saver reaches
    it from asgiref's thread for synchronous work); set up (migrated) here, outside the
    event loop."""
    url = str(request.getfixturevalue(f"{request.param}_url"))
    with django_db_blocker.unblock():  # type: ignore[attr-defined]
        Storage(url, encryption_key=False)
        yield url


async def _run(storage: Storage, capability: str) -> None:
    @checkpointer_test(name=f"CriogenSaver[{storage.url}]")
    async def saver() -> AsyncIterator[CriogenSaver]:
        yield CriogenSaver(storage)

    report = await validate(saver, capabilities={capability})
    result = report.results[capability]
    assert result.detected, f"CriogenSaver does not implement {capability}"
    assert result.passed is True, "\n".join(result.failures)
    assert result.tests_passed > 0 and result.tests_failed == 0


@pytest.mark.parametrize("capability", CAPABILITIES)
async def test_it_passes_the_conformance_suite(database: str, capability: str) -> None:
    await _run(Storage(database, encryption_key=False), capability)


@pytest.mark.parametrize("capability", CAPABILITIES)
async def test_it_passes_the_conformance_suite_encrypted(database: str, capability: str) -> None:
    await _run(Storage(database, encryption_key=KEY), capability)
