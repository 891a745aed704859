"""The assistants registry: graph ids -> graphs bound to the project's database.

``settings.CRIOGEN_ASSISTANTS`` maps a graph id to ``"module.path:attribute"``, the
object being a :class:`~criogen.Workflow` (compiled here), a
:class:`~criogen.CompiledWorkflow` or an ``Agent`` (bound with ``with_storage``).
:func:`get_graph` loads each once per process and binds it to :func:`storage`, the
one :class:`~criogen.Storage` instance of the ``default`` database that the runner
and the live events share (engine listeners are per instance).
"""

from __future__ import annotations

import importlib
import threading
from typing import Any

from django.conf import settings

from criogen.engine.errors import GraphNotFound
from criogen.engine.store import Storage

__all__ = ["GraphNotFound", "get_graph", "graph_ids", "reset", "storage"]

_lock = threading.RLock()
_graphs: dict[str, Any] = {}
_storage: Storage | None = None


def storage() -> Storage:
    """The process's shared storage on the ``default`` database."""
    global _storage
    with _lock:
        if _storage is None:
            _storage = Storage.default()
        return _storage


def graph_ids() -> list[str]:
    """The registered graph ids, in settings order."""
    return list(settings.CRIOGEN_ASSISTANTS)


def get_graph(graph_id: str) -> Any:
    """The graph registered as ``graph_id``, bound to :func:`storage`.

    Raises:
        GraphNotFound: unknown id, or its ``module:attribute`` cannot be loaded.
    """
    with _lock:
        graph = _graphs.get(graph_id)
        if graph is None:
            graph = _graphs[graph_id] = _load(graph_id)
        return graph


def reset() -> None:
    """Forget the loaded graphs, so the next get_graph() reads the settings again
    (tests that change them). The shared storage, and its listeners, stay."""
    with _lock:
        _graphs.clear()


def _load(graph_id: str) -> Any:
    from criogen.engine.workflows import CompiledWorkflow, Workflow

    target = settings.CRIOGEN_ASSISTANTS.get(graph_id) if isinstance(graph_id, str) else None
    if target is None:
        known = ", ".join(sorted(settings.CRIOGEN_ASSISTANTS)) or "none"
        raise GraphNotFound(
            f"no graph {graph_id!r} is registered (known: {known}); add it to CRIOGEN_ASSISTANTS.",
            graph_id=graph_id,
        )
    module_name, _, attribute = target.partition(":")
    try:
        obj = getattr(importlib.import_module(module_name), attribute or "graph")
    except (ImportError, AttributeError) as exc:
        raise GraphNotFound(
            f"graph {graph_id!r} points at {target!r}, which cannot be loaded: {exc}.",
            graph_id=graph_id,
        ) from exc
    lease = float(settings.CRIOGEN_LEASE_SECONDS)
    durability = settings.CRIOGEN_CHECKPOINT_DURABILITY
    if isinstance(obj, Workflow):
        return obj.compile(storage=storage(), lease_seconds=lease, durability=durability)
    if isinstance(obj, CompiledWorkflow):
        return obj.with_storage(storage(), lease_seconds=lease, durability=durability)
    if hasattr(obj, "with_storage"):
        return obj.with_storage(storage())
    raise GraphNotFound(
        f"graph {graph_id!r} ({target!r}) is a {type(obj).__name__}, not a Workflow, "
        "CompiledWorkflow or Agent.",
        graph_id=graph_id,
    )
