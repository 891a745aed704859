"""What the assistants endpoints say about a LangGraph graph, from the compiled graph
itself, as LangGraph's server says it: its JSON schemas (input, output, state, config,
context), its drawing (with ``xray`` into subgraphs) and its subgraphs by namespace."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable
from typing import Any

from criogen.langgraph.bridge import jsonable

__all__ = ["graph_drawing", "graph_schemas", "graph_subgraphs"]

log = logging.getLogger(__name__)

_PRIVATE_CONFIG = ("__pregel_resuming", "__pregel_checkpoint_id")
"""Keys LangGraph keeps in a config for itself, not offered to clients."""


def _schema(name: str, compiled: Any, make: Callable[[], Any]) -> dict[str, Any] | None:
    """``make()``'s schema, or None (logged) when LangGraph cannot describe it."""
    try:
        made = make()
    except Exception as error:  # noqa: BLE001 - a type pydantic cannot describe: no schema
        log.warning("graph %r: no %s schema (%s)", compiled.get_name(), name, error)
        return None
    return jsonable(made) if made is not None else None


def _state_schema(compiled: Any, name: str) -> dict[str, Any]:
    """An object with one property per channel the graph outputs, typed by the updates
    its channel takes (any value when pydantic cannot describe that type), titled after
    the graph ``name`` as LangGraph titles it."""
    from pydantic import TypeAdapter, create_model

    fields: dict[str, Any] = {}
    for channel in compiled.stream_channels_list:
        kind = getattr(compiled.channels[channel], "UpdateType", Any)
        try:
            TypeAdapter(kind).json_schema()
        except Exception:  # noqa: BLE001 - an update type pydantic cannot describe
            kind = Any
        fields[channel] = (kind, None)
    title = f"{name}State" if name[:1].isupper() else f"{name}_state"
    model = create_model(title, **fields)
    return model.model_json_schema()  # type: ignore[no-any-return]


def _config_schema(compiled: Any) -> dict[str, Any]:
    """The schema of the config's ``configurable`` part ({} when the graph declares
    none)."""
    from pydantic import TypeAdapter

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # config_schema is deprecated for context
        declared = compiled.config_schema()
    fields = getattr(declared, "model_fields", None) or {}
    if "configurable" not in fields:
        return {}
    schema: dict[str, Any] = TypeAdapter(fields["configurable"].annotation).json_schema()
    for key in _PRIVATE_CONFIG:
        schema.get("properties", {}).pop(key, None)
    named = getattr(compiled, "config_type", None)
    if named is not None and hasattr(named, "__name__"):
        schema["title"] = named.__name__
    return schema


def graph_schemas(compiled: Any, name: str | None = None) -> dict[str, Any]:
    """The graph's ``input_schema``, ``output_schema``, ``state_schema``,
    ``config_schema`` and ``context_schema`` (each None when LangGraph cannot make it).
    ``name``: the graph's id (LangGraph's server names a graph after it), default
    the compiled graph's name."""
    title = name or compiled.get_name()
    return {
        "input_schema": _schema("input", compiled, compiled.get_input_jsonschema),
        "output_schema": _schema("output", compiled, compiled.get_output_jsonschema),
        "state_schema": _schema("state", compiled, lambda: _state_schema(compiled, title)),
        "config_schema": _schema("config", compiled, lambda: _config_schema(compiled)),
        "context_schema": _schema("context", compiled, compiled.get_context_jsonschema),
    }


def graph_drawing(compiled: Any, xray: int | bool = False) -> dict[str, Any]:
    """LangGraph's drawing of the graph (``xray``: into subgraphs, that many levels, or
    all with True): ``nodes`` (``id``, ``type``, ``data``) and ``edges`` (``source``,
    ``target``, ``conditional``…), as its ``to_json``, without each node's class path."""
    drawn = compiled.get_graph(xray=xray).to_json()
    for node in drawn.get("nodes", []):
        data = node.get("data")
        if isinstance(data, dict):
            data.pop("id", None)
    return jsonable(drawn)  # type: ignore[no-any-return]


def graph_subgraphs(
    compiled: Any, namespace: str | None = None, *, recurse: bool = False
) -> dict[str, dict[str, Any]]:
    """The graph's subgraphs by namespace (``recurse``: theirs too; ``namespace``: only
    that one), each with its schemas."""
    return {
        ns: graph_schemas(subgraph, subgraph.get_name())
        for ns, subgraph in compiled.get_subgraphs(namespace=namespace, recurse=recurse)
    }
