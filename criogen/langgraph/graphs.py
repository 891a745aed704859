"""LangGraph graphs in Criogen's registry: where they are named, and how they load.

A graph is named ``"package.module:attribute"`` or by a file path,
``"./agents/support.py:graph"`` (relative to the file that names it; the attribute
defaults to ``graph``). The object is a compiled graph, a ``StateGraph`` (compiled
here), or a factory: a function, plain or ``async``, taking no argument or a config,
that returns one of those. The registry calls a factory once per process.

Names come from ``settings.CRIOGEN_ASSISTANTS`` (next to Criogen's own graphs; file
paths relative to ``BASE_DIR``) and, for a project coming from LangGraph's server, from
the ``graphs`` of the ``langgraph.json`` that the environment variable
``CRIOGEN_LANGGRAPH_CONFIG`` names (paths relative to that file). This module imports
no LangGraph at load: it is what tells the registry that LangGraph is missing.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib
import importlib.util
import inspect
import json
import logging
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from criogen.engine.errors import GraphNotFound
from criogen.langgraph import INSTALL_HINT, langgraph_installed

__all__ = [
    "CONFIG_ENV",
    "LangGraphConfigError",
    "LangGraphGraph",
    "is_file_target",
    "is_langgraph_object",
    "load_langgraph",
    "load_object",
    "read_config",
]

CONFIG_ENV = "CRIOGEN_LANGGRAPH_CONFIG"
"""The environment variable naming a ``langgraph.json``."""
_IGNORED_KEYS = ("dependencies", "env")
_LANGGRAPH_MODULES = ("langgraph", "langchain_core", "langchain")

log = logging.getLogger(__name__)


class LangGraphConfigError(ValueError):
    """The ``langgraph.json`` named by ``CRIOGEN_LANGGRAPH_CONFIG`` cannot be used."""


@dataclass(frozen=True)
class Target:
    """Where a graph is: a module or a file, and the attribute in it."""

    module: str | None
    """``package.module``, for a module target."""
    path: Path | None
    """The absolute path of a ``.py`` file, for a file target."""
    attribute: str
    text: str
    """The target as written."""


def is_file_target(text: str) -> bool:
    """Whether ``text`` names a file (``./x.py:graph``, ``/abs/x.py``) rather than a
    module (``package.module:attribute``)."""
    location = text.rsplit(":", 1)[0] if text.count(":") else text
    return location.endswith(".py") or "/" in location or "\\" in location


def parse_target(text: str, base_dir: Path) -> Target:
    """``text`` split into its module or file (made absolute against ``base_dir``) and
    its attribute (``graph`` when none)."""
    if is_file_target(text):
        location, attribute = text, ""
        head, sep, tail = text.rpartition(":")
        if sep and head and not text.endswith(".py") and not any(c in tail for c in "/\\"):
            location, attribute = head, tail
        path = Path(location)
        if not path.is_absolute():
            path = (base_dir / path).resolve()
        return Target(module=None, path=path, attribute=attribute or "graph", text=text)
    module, _, attribute = text.partition(":")
    return Target(module=module, path=None, attribute=attribute or "graph", text=text)


def read_config(path: str | os.PathLike[str]) -> dict[str, str]:
    """The graphs of a ``langgraph.json``: graph id -> target, file paths made absolute
    against the file's folder. ``env`` and ``dependencies`` are not used (a log line
    says so): the server's environment and installed packages are Criogen's.

    Raises:
        LangGraphConfigError: the file is missing, not JSON, or its ``graphs`` is not an
            object of strings.
    """
    file = Path(path).expanduser().resolve()
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except OSError as exc:
        raise LangGraphConfigError(
            f"{CONFIG_ENV}={str(path)!r}: the file cannot be read ({exc.strerror or exc})."
        ) from exc
    except ValueError as exc:
        raise LangGraphConfigError(f"{CONFIG_ENV}={str(path)!r} is not JSON: {exc}.") from exc
    graphs = data.get("graphs") if isinstance(data, dict) else None
    if not isinstance(graphs, dict) or not all(
        isinstance(k, str) and isinstance(v, str) and v for k, v in graphs.items()
    ):
        raise LangGraphConfigError(
            f"{CONFIG_ENV}={str(path)!r}: 'graphs' must be an object of graph id -> "
            '"path/to/file.py:attribute" or "module:attribute".'
        )
    for key in _IGNORED_KEYS:
        if key in data:
            log.info(
                "%s: %r is not used by Criogen (it runs with its own environment and "
                "installed packages).",
                file,
                key,
            )
    out = {}
    for graph_id, text in graphs.items():
        if is_file_target(text):
            target = parse_target(text, file.parent)
            out[graph_id] = f"{target.path}:{target.attribute}"
        else:
            out[graph_id] = text
    return out


def load_object(graph_id: str, text: str, base_dir: Path) -> Any:
    """Import the object ``text`` names (a module's or a file's attribute).

    Raises:
        GraphNotFound: it cannot be imported; when LangGraph is what is missing, the
            message says what to install.
    """
    target = parse_target(text, base_dir)
    try:
        if target.path is not None:
            module = _import_file(target.path)
        else:
            module = importlib.import_module(target.module or "")
        return getattr(module, target.attribute)
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] in _LANGGRAPH_MODULES:
            raise GraphNotFound(
                f"graph {graph_id!r} ({text!r}) needs LangGraph: {INSTALL_HINT}.",
                graph_id=graph_id,
            ) from exc
        raise GraphNotFound(
            f"graph {graph_id!r} points at {text!r}, which cannot be loaded: {exc}.",
            graph_id=graph_id,
        ) from exc
    except (ImportError, AttributeError, OSError) as exc:
        raise GraphNotFound(
            f"graph {graph_id!r} points at {text!r}, which cannot be loaded: {exc}.",
            graph_id=graph_id,
        ) from exc


def _import_file(path: Path) -> Any:
    """The module of a ``.py`` file, imported once per process under a name of its own
    (its folder goes at the end of ``sys.path``, so that its sibling modules import and
    none of them hides an installed one)."""
    if not path.is_file():
        raise ImportError(f"no file {path}")
    name = "criogen_graph_" + hashlib.sha1(str(path).encode()).hexdigest()[:12]  # noqa: S324
    if name in sys.modules:
        return sys.modules[name]
    folder = str(path.parent)
    if folder not in sys.path:
        sys.path.append(folder)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{path} is not a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def is_langgraph_object(obj: Any) -> bool:
    """Whether ``obj`` is a LangGraph graph (compiled or not); False without LangGraph
    installed (then nothing can be one)."""
    if "langgraph" not in sys.modules:
        return False
    from langgraph.graph import StateGraph
    from langgraph.pregel import Pregel

    return isinstance(obj, Pregel | StateGraph)


def is_factory(obj: Any) -> bool:
    """Whether ``obj`` is a function that makes a graph (not a graph, nor a class)."""
    return (inspect.isfunction(obj) or inspect.ismethod(obj)) and not is_langgraph_object(obj)


@dataclass
class _Drawing:
    """The shape the REST API draws a graph from (nodes; edges and routes by source)."""

    nodes: list[str]
    edges: dict[str, list[str]] = field(default_factory=dict)
    routes: dict[str, list[tuple[None, dict[str, str]]]] = field(default_factory=dict)
    reducers: dict[str, str] = field(default_factory=dict)


class LangGraphGraph:
    """A LangGraph graph in the registry: compiled, with the Criogen checkpointer, and
    run by Criogen's runner through a bridge workflow (:mod:`criogen.langgraph.bridge`).

    Attributes:
        graph_id: its id in the registry.
        target: where it was loaded from, as written.
        compiled: the compiled LangGraph graph, whose checkpointer is a
            :class:`~criogen.langgraph.CriogenSaver` on the project's database.
        graph: its nodes and edges, in the shape the REST API draws.
        workflow: the bridge, a Criogen ``CompiledWorkflow`` (after :meth:`bind`); the
            runner and the thread verbs use it (:meth:`thread`, and any other
            attribute, are its).
    """

    kind = "langgraph"
    supports_should_stop = True
    """The runner may pass ``should_stop`` (the bridge stops between its steps)."""

    def __init__(self, graph_id: str, target: str, compiled: Any) -> None:
        self.graph_id = graph_id
        self.target = target
        self.compiled = compiled
        self.name = graph_id
        self.graph = _drawing(compiled)
        self.workflow: Any = None

    def bind(self, storage: Any, **options: Any) -> LangGraphGraph:
        """Compile the bridge workflow on ``storage`` (``options``: the runner's
        ``lease_seconds``, ``durability``); returns self."""
        from criogen.langgraph.bridge import bridge_workflow

        alias = getattr(storage, "alias", None)
        self.workflow = bridge_workflow(self.graph_id, self.compiled, alias).compile(
            storage=storage, **options
        )
        return self

    def thread(self, thread_id: str) -> Any:
        """The bridge workflow's thread ``thread_id`` (run, resume, state, history…)."""
        from criogen.engine.checkpoints import check_thread_id
        from criogen.langgraph.bridge import BridgeThread

        return BridgeThread(self._bound(), check_thread_id(thread_id))

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "workflow":
            raise AttributeError(name)
        return getattr(self._bound(), name)

    def _bound(self) -> Any:
        if self.workflow is None:
            raise RuntimeError(f"graph {self.graph_id!r} is not bound to a storage: bind() it")
        return self.workflow

    @property
    def checkpointer(self) -> Any:
        return self.compiled.checkpointer

    def __repr__(self) -> str:
        return f"<LangGraphGraph {self.graph_id!r} from {self.target!r}>"


def _drawing(compiled: Any) -> _Drawing:
    drawn = compiled.get_graph()
    ends = ("__start__", "__end__")
    drawing = _Drawing(nodes=[n for n in drawn.nodes if n not in ends])
    for edge in drawn.edges:
        if edge.conditional:
            routes = drawing.routes.setdefault(edge.source, [(None, {})])
            routes[0][1][edge.target] = edge.target
        else:
            drawing.edges.setdefault(edge.source, []).append(edge.target)
    return drawing


def load_langgraph(graph_id: str, target: str, obj: Any, saver: Any) -> LangGraphGraph:
    """``obj`` (a graph or a factory of one) compiled with ``saver`` as its checkpointer.

    Raises:
        GraphNotFound: LangGraph is not installed, or the factory does not make a graph.
    """
    if not langgraph_installed():
        raise GraphNotFound(f"graph {graph_id!r} ({target!r}): {INSTALL_HINT}.", graph_id=graph_id)
    from langgraph.graph import StateGraph

    if is_factory(obj):
        obj = _call_factory(graph_id, obj)
    if isinstance(obj, StateGraph):
        obj = obj.compile()
    if is_langgraph_object(obj):
        # As LangGraph's server: a graph left with LangGraph's default name is named
        # after its id (the root of its LangChain events, ``name`` in ``events``).
        update: dict[str, Any] = {"checkpointer": saver}
        if obj.name == "LangGraph":
            update["name"] = graph_id
        compiled = obj.copy(update=update)
    else:
        raise GraphNotFound(
            f"graph {graph_id!r} ({target!r}) is a {type(obj).__name__}, not a LangGraph "
            "graph, a StateGraph or a function returning one.",
            graph_id=graph_id,
        )
    return LangGraphGraph(graph_id, target, compiled)


def _call_factory(graph_id: str, factory: Any) -> Any:
    config = {"configurable": {"graph_id": graph_id}}
    wants_config = bool(inspect.signature(factory).parameters)
    made = factory(config) if wants_config else factory()
    if inspect.isawaitable(made):
        made = asyncio.run(_await(made))
    return made


async def _await(awaitable: Any) -> Any:
    return await awaitable
