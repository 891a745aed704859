"""The assistants registry: graph ids -> graphs bound to the project's database.

``settings.CRIOGEN_ASSISTANTS`` maps a graph id to ``"module.path:attribute"`` or to a
file, ``"./agents/support.py:graph"`` (relative to ``BASE_DIR``), the object being a
:class:`~criogen.Workflow` (compiled here), a :class:`~criogen.CompiledWorkflow`, an
``Agent`` (bound with ``with_storage``), or a LangGraph graph: compiled, a
``StateGraph``, or a function making one (see :mod:`criogen.langgraph.graphs`). The
``graphs`` of the ``langgraph.json`` named by ``$CRIOGEN_LANGGRAPH_CONFIG`` are added
after them (a settings entry wins over one there of the same id).

:func:`get_graph` loads each once per process and binds it to :func:`storage`, the
one :class:`~criogen.Storage` instance of the ``default`` database that the runner
and the live events share (engine listeners are per instance); LangGraph graphs get
:func:`langgraph_saver`, the checkpointer on that database.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from criogen.engine.errors import GraphNotFound
from criogen.engine.store import Storage

__all__ = [
    "GraphNotFound",
    "check_configuration",
    "get_graph",
    "graph_ids",
    "langgraph_saver",
    "reset",
    "serves_langgraph",
    "state_declaration",
    "storage",
]

_lock = threading.RLock()
_graphs: dict[str, Any] = {}
_storage: Storage | None = None
_saver: Any = None
_langgraph_graphs: dict[str, str] | None = None
_serves_langgraph: bool | None = None


def storage() -> Storage:
    """The process's shared storage on the ``default`` database."""
    global _storage
    with _lock:
        if _storage is None:
            _storage = Storage.default()
        return _storage


def langgraph_saver() -> Any:
    """The process's LangGraph checkpointer (:class:`criogen.langgraph.CriogenSaver`)
    on :func:`storage`'s database and encryption key. Needs the ``langgraph`` extra."""
    global _saver
    with _lock:
        if _saver is None:
            from criogen.langgraph import CriogenSaver

            _saver = CriogenSaver(storage())
        return _saver


def graph_ids() -> list[str]:
    """The registered graph ids: settings order, then ``langgraph.json``'s."""
    return list(_targets())


def _targets() -> dict[str, str]:
    """Graph id -> where it is: ``CRIOGEN_ASSISTANTS``, then the ``langgraph.json``
    graphs (read once; :func:`reset` reads it again)."""
    targets = dict(settings.CRIOGEN_ASSISTANTS)
    for graph_id, target in _langgraph_json().items():
        targets.setdefault(graph_id, target)
    return targets


def _langgraph_json() -> dict[str, str]:
    global _langgraph_graphs
    with _lock:
        if _langgraph_graphs is None:
            from criogen.langgraph.graphs import CONFIG_ENV, LangGraphConfigError, read_config

            path = os.environ.get(CONFIG_ENV, "").strip()
            try:
                _langgraph_graphs = read_config(path) if path else {}
            except LangGraphConfigError as exc:
                raise ImproperlyConfigured(str(exc)) from exc
        return _langgraph_graphs


def check_configuration() -> None:
    """Start-up check of the graphs' configuration; the app calls it when it starts.

    Raises:
        ImproperlyConfigured: the ``langgraph.json`` named by ``CRIOGEN_LANGGRAPH_CONFIG``
            cannot be read, or LangGraph graphs are configured and LangGraph is not
            installed (the message says what to install).
    """
    from criogen.langgraph import INSTALL_HINT, langgraph_installed

    from_json = _langgraph_json()
    if langgraph_installed():
        return
    if from_json:
        raise ImproperlyConfigured(
            f"the langgraph.json in $CRIOGEN_LANGGRAPH_CONFIG names LangGraph graphs "
            f"({', '.join(sorted(from_json))}): {INSTALL_HINT}."
        )
    # Without LangGraph, a settings entry that is a LangGraph graph does not import:
    # try them now, so the server does not start with graphs it cannot run.
    for graph_id in settings.CRIOGEN_ASSISTANTS:
        try:
            get_graph(graph_id)
        except GraphNotFound as exc:
            if INSTALL_HINT in str(exc):
                raise ImproperlyConfigured(str(exc)) from exc
            # Other faults are reported when the graph is used, as before.


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


def serves_langgraph() -> bool:
    """Whether any registered graph is a LangGraph graph (loaded once, until
    :func:`reset`): readers of a thread skip looking up its graph when none is."""
    global _serves_langgraph
    with _lock:
        if _serves_langgraph is None:
            found = False
            for graph_id in graph_ids():
                try:
                    graph = get_graph(graph_id)
                except GraphNotFound:
                    continue  # reported where the graph is used
                if getattr(graph, "kind", None) == "langgraph":
                    found = True
                    break
            _serves_langgraph = found
        return _serves_langgraph


def state_declaration(graph_id: str) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """``(state_schema, reducers)`` of a Criogen workflow registered as ``graph_id`` that
    declares its state (``Workflow(state_schema=...)``); None for one that declares
    none, an agent, a LangGraph graph or an unknown id."""
    try:
        graph = get_graph(graph_id)
    except GraphNotFound:
        return None
    from criogen.engine.workflows import CompiledWorkflow

    if not isinstance(graph, CompiledWorkflow) or graph.graph.state_schema is None:
        return None
    return graph.graph.state_schema, dict(graph.graph.reducers)


def reset() -> None:
    """Forget the loaded graphs, so the next get_graph() reads the settings again
    (tests that change them). The shared storage, and its listeners, stay."""
    global _langgraph_graphs, _serves_langgraph
    with _lock:
        _graphs.clear()
        _langgraph_graphs = None
        _serves_langgraph = None


def _load(graph_id: str) -> Any:
    from criogen.engine.workflows import CompiledWorkflow, Workflow
    from criogen.langgraph import graphs as langgraph_graphs

    targets = _targets() if isinstance(graph_id, str) else {}
    target = targets.get(graph_id)
    if target is None:
        known = ", ".join(sorted(targets)) or "none"
        raise GraphNotFound(
            f"no graph {graph_id!r} is registered (known: {known}); add it to "
            "CRIOGEN_ASSISTANTS (or to the langgraph.json in $CRIOGEN_LANGGRAPH_CONFIG).",
            graph_id=graph_id,
        )
    # File targets are relative to the project (BASE_DIR); langgraph.json's are absolute.
    base_dir = Path(getattr(settings, "BASE_DIR", None) or Path.cwd())
    obj = langgraph_graphs.load_object(graph_id, target, base_dir)
    lease = float(settings.CRIOGEN_LEASE_SECONDS)
    durability = settings.CRIOGEN_CHECKPOINT_DURABILITY
    if isinstance(obj, Workflow):
        return obj.compile(storage=storage(), lease_seconds=lease, durability=durability)
    if isinstance(obj, CompiledWorkflow):
        return obj.with_storage(storage(), lease_seconds=lease, durability=durability)
    if hasattr(obj, "with_storage"):
        return obj.with_storage(storage())
    if langgraph_graphs.is_langgraph_object(obj) or langgraph_graphs.is_factory(obj):
        loaded = langgraph_graphs.load_langgraph(graph_id, target, obj, langgraph_saver())
        return loaded.bind(storage(), lease_seconds=lease, durability=durability)
    raise GraphNotFound(
        f"graph {graph_id!r} ({target!r}) is a {type(obj).__name__}, not a Workflow, "
        "CompiledWorkflow, Agent or LangGraph graph.",
        graph_id=graph_id,
    )
