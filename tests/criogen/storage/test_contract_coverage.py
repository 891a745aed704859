"""The storage contract calls every method of the protocol: a method added to
``Storage`` without a contract test (run on memory, SQLite and PostgreSQL) fails here."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from criogen.engine.store import Storage

CONTRACT = [
    Path(__file__).with_name("test_contract.py"),
    Path(__file__).with_name("test_agent_storage.py"),
]

# Called by the engine, not by the contract tests by name: what they are checked by.
INDIRECT = {
    "default": "needs a Django project; tests/criogen/storage/test_orm_setup.py",
    "notify": "called by every run: test_listeners_see_each_batch_after_it_is_committed",
}


def protocol_methods() -> list[str]:
    return sorted(
        name
        for name, value in vars(Storage).items()
        if not name.startswith("_")
        and (inspect.isfunction(value) or isinstance(value, classmethod))
    )


def test_every_protocol_method_has_a_contract_test() -> None:
    text = "\n".join(path.read_text() for path in CONTRACT)
    untested = [
        name
        for name in protocol_methods()
        if name not in INDIRECT and not re.search(rf"\.{name}\(", text)
    ]
    assert untested == [], f"Storage methods no contract test calls: {untested}"


def test_the_list_of_indirect_methods_is_current() -> None:
    assert set(INDIRECT) <= set(protocol_methods())
