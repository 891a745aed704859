"""One tree of errors: every class defined in criogen.engine.errors, exported by
criogen.errors, drawn in the module docstring, each with the code it has always had."""

from __future__ import annotations

import importlib
import re

import pytest

import criogen.engine.errors as engine_errors
from criogen import errors

# Codes are a public contract (the REST API's problem+json ``code``, the dashboard, and
# callers that branch on them): a class may move, its code never changes.
CODES = {
    "CriogenError": "criogen_error",
    "ThreadError": "thread_error",
    "ThreadSuspended": "thread_suspended",
    "ThreadInterrupted": "thread_interrupted",
    "ThreadBusy": "thread_busy",
    "ThreadNotFound": "thread_not_found",
    "NotSuspended": "not_suspended",
    "NothingToRetry": "nothing_to_retry",
    "LeaseLost": "lease_lost",
    "AlreadyDecided": "already_decided",
    "StaleDecision": "stale_decision",
    "StaleHead": "stale_head",
    "NotAllowedToDecide": "not_allowed_to_decide",
    "StateTooLarge": "state_too_large",
    "TooManyStreams": "too_many_streams",
    "CheckpointNotFound": "checkpoint_not_found",
    "RunNotFound": "run_not_found",
    "GraphNotFound": "graph_not_found",
    "FactNotFound": "fact_not_found",
    "DocumentNotFound": "document_not_found",
    "NotFound": "not_found",
    "Conflict": "conflict",
    "TokenExpired": "token_expired",
    "InvalidState": "invalid_state",
    "InvalidSnapshot": "invalid_snapshot",
    "InvalidGraph": "invalid_graph",
    "InvalidArgument": "invalid_argument",
    "InvalidMessage": "invalid_message",
    "InvalidTool": "invalid_tool",
    "InvalidToolCall": "invalid_tool_call",
    "ModelError": "model_error",
    "ScriptExhausted": "script_exhausted",
    "UnknownStorageUrl": "unknown_storage_url",
    "StorageError": "storage_error",
    "EncryptionKeyInvalid": "encryption_key_invalid",
    "OutboundRefused": "outbound_refused",
    "MaxStepsExceeded": "max_steps_exceeded",
    "RunCancelled": "run_cancelled",
    "RunFailed": "run_failed",
}

# Where each error was defined before it joined the tree: those modules re-export it.
OLD_HOMES = [
    ("criogen.engine.agent_errors", "InvalidMessage"),
    ("criogen.engine.agent_errors", "InvalidTool"),
    ("criogen.engine.agent_errors", "InvalidToolCall"),
    ("criogen.engine.agent_errors", "ModelError"),
    ("criogen.engine.agent_errors", "ScriptExhausted"),
    ("criogen.engine.agents", "StaleDecision"),
    ("criogen.engine.crypto", "EncryptionKeyInvalid"),
    ("criogen.engine.memory", "FactNotFound"),
    ("criogen.engine.memory", "DocumentNotFound"),
    ("criogen.selectors", "RunNotFound"),
    ("criogen.registry", "GraphNotFound"),
    ("criogen.outbound", "OutboundRefused"),
    ("api.errors", "NotFound"),
    ("api.errors", "Conflict"),
    ("api.errors", "TokenExpired"),
]

_TREE_LINE = re.compile(
    r"^    (?P<indent>(?:│   |    )*)(?P<branch>[├└]── )?(?P<name>[A-Z]\w+) +(?P<code>[a-z_]+)\b"
)


def test_every_error_is_importable_from_criogen_errors_with_its_own_code() -> None:
    assert errors.__all__ == engine_errors.__all__
    classes = [getattr(errors, name) for name in errors.__all__]
    assert all(cls is getattr(engine_errors, cls.__name__) for cls in classes)
    assert all(issubclass(cls, errors.CriogenError) for cls in classes)
    assert {cls.__name__: cls.code for cls in classes} == CODES


def test_the_errors_module_defines_exactly_what_all_lists() -> None:
    defined_here = {
        name
        for name, value in vars(engine_errors).items()
        if isinstance(value, type)
        and issubclass(value, Exception)
        and value.__module__ == engine_errors.__name__
    }

    assert defined_here == set(engine_errors.__all__)


def test_no_other_module_defines_a_criogen_error() -> None:
    def subclasses(cls: type) -> set[type]:
        return {sub for direct in cls.__subclasses__() for sub in {direct, *subclasses(direct)}}

    # Import every module that used to define one, so their classes would show up here.
    for module, _ in OLD_HOMES:
        importlib.import_module(module)
    outside = {
        f"{cls.__module__}.{cls.__qualname__}"
        for cls in subclasses(errors.CriogenError)
        if cls.__module__.split(".")[0] in ("criogen", "api", "dashboard")
        and cls.__module__ != engine_errors.__name__
    }

    assert outside == set()


def test_the_module_docstring_draws_the_tree_with_each_code() -> None:
    drawn: dict[str, tuple[str | None, str]] = {}
    parents: list[str] = []
    for line in (engine_errors.__doc__ or "").splitlines():
        match = _TREE_LINE.match(line)
        if not match:
            continue
        depth = len(match["indent"]) // 4 + (1 if match["branch"] else 0)
        del parents[depth:]
        drawn[match["name"]] = (parents[-1] if parents else None, match["code"])
        parents.append(match["name"])

    assert set(drawn) == set(engine_errors.__all__)
    for name, (parent, code) in drawn.items():
        cls = getattr(engine_errors, name)
        assert cls.code == code, name
        assert cls.__bases__ == ((getattr(engine_errors, parent),) if parent else (Exception,))


@pytest.mark.parametrize(("module", "name"), OLD_HOMES)
def test_the_module_that_raises_an_error_still_exports_it(module: str, name: str) -> None:
    old_home = importlib.import_module(module)

    assert getattr(old_home, name) is getattr(engine_errors, name)
    assert name in old_home.__all__
