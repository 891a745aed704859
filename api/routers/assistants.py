"""``/assistants``: the graphs the deployment serves and their configured assistants.

Every graph in ``CRIOGEN_ASSISTANTS`` has a default assistant (id
``uuid5(NAMESPACE_URL, "criogen:assistant:" + graph_id)``, created on demand); more
can be created with their own config, context and metadata. Anywhere an assistant id
is expected, a graph id names its default assistant. Everyone signed in may read
assistants; creating, changing and deleting them is for operators (403 otherwise),
because they are shared by all users.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from django.core.exceptions import PermissionDenied
from django.http import HttpRequest
from ninja import Router, Schema, Status
from pydantic import Field

from api.aio import db
from api.auth import Principal, principal
from api.schemas import MAX_OFFSET, ErrorOut, In, JsonObject
from criogen import selectors
from criogen.engine.errors import InvalidArgument
from criogen.services import assistants as services

if TYPE_CHECKING:
    from criogen.storage.models import Assistant

router = Router(tags=["assistants"])

ERRORS: dict[int, Any] = {403: ErrorOut, 404: ErrorOut, 409: ErrorOut, 422: ErrorOut}
SORT_FIELDS = ("assistant_id", "graph_id", "name", "created_at", "updated_at")


class AssistantCreateIn(In):
    """POST /assistants."""

    graph_id: str
    assistant_id: str | None = Field(None, description="A UUID; omitted: a new one.")
    config: JsonObject | None = None
    context: JsonObject | None = None
    metadata: JsonObject | None = None
    if_exists: Literal["raise", "do_nothing"] | None = None
    name: str | None = None
    description: str | None = None


class AssistantPatchIn(In):
    """PATCH /assistants/{assistant_id}: each field given replaces the old one and the
    version goes up by one."""

    graph_id: str | None = None
    config: JsonObject | None = None
    context: JsonObject | None = None
    metadata: JsonObject | None = None
    name: str | None = None
    description: str | None = None


class AssistantSearchIn(In):
    """POST /assistants/search."""

    metadata: JsonObject | None = None
    graph_id: str | None = None
    name: str | None = None
    limit: int = Field(10, ge=1, le=1000)
    offset: int = Field(0, ge=0, le=MAX_OFFSET)
    sort_by: Literal["assistant_id", "graph_id", "name", "created_at", "updated_at"] | None = None
    sort_order: Literal["asc", "desc"] | None = None
    select: list[str] | None = None


class AssistantCountIn(In):
    """POST /assistants/count."""

    metadata: JsonObject | None = None
    graph_id: str | None = None
    name: str | None = None


class VersionsIn(In):
    """POST /assistants/{assistant_id}/versions."""

    metadata: JsonObject | None = None
    limit: int = Field(10, ge=1, le=1000)
    offset: int = Field(0, ge=0, le=MAX_OFFSET)


class LatestIn(In):
    """POST /assistants/{assistant_id}/latest."""

    version: int


class AssistantOut(Schema):
    """An assistant (LangGraph ``Assistant``). With ``select`` (search) only the chosen
    fields are present."""

    assistant_id: str
    graph_id: str = None  # type: ignore[assignment]
    config: JsonObject = None  # type: ignore[assignment]
    context: JsonObject = None  # type: ignore[assignment]
    metadata: JsonObject = None  # type: ignore[assignment]
    version: int = None  # type: ignore[assignment]
    name: str = None  # type: ignore[assignment]
    description: str | None = None
    created_at: datetime = None  # type: ignore[assignment]
    updated_at: datetime = None  # type: ignore[assignment]


class GraphOut(Schema):
    """The graph's nodes and edges, as LangGraph draws them."""

    nodes: list[JsonObject]
    edges: list[JsonObject]


class SchemasOut(Schema):
    """JSON Schemas of the graph's state, input, output, config and context."""

    graph_id: str
    input_schema: JsonObject | None = None
    output_schema: JsonObject | None = None
    state_schema: JsonObject | None = None
    config_schema: JsonObject | None = None
    context_schema: JsonObject | None = None


def assistant_out(a: Assistant) -> dict[str, Any]:
    """An assistant row as JSON."""
    return {
        "assistant_id": str(a.assistant_id),
        "graph_id": a.graph_id,
        "config": a.config or {},
        "context": a.context or {},
        "metadata": a.metadata or {},
        "version": a.version,
        "name": a.name or a.graph_id,
        "description": a.description or None,
        "created_at": a.created_at,
        "updated_at": a.updated_at,
    }


def _load(assistant_id: str) -> Assistant:
    return services.resolve_assistant(assistant_id=assistant_id)


def _operator(who: Principal) -> None:
    if not who.is_operator:
        raise PermissionDenied("only operators (staff) may create, change or delete assistants.")


@router.post(
    "",
    response={200: AssistantOut, **ERRORS},
    operation_id="create_assistant",
    summary="Create an assistant",
)
def create_assistant(request: HttpRequest, payload: AssistantCreateIn) -> dict[str, Any]:
    """A new assistant for a registered graph (operators only)."""
    who = principal(request)
    _operator(who)
    row = services.create_assistant(
        graph_id=payload.graph_id,
        assistant_id=payload.assistant_id,
        name=payload.name,
        description=payload.description,
        config=payload.config,
        context=payload.context,
        metadata=payload.metadata,
        if_exists=payload.if_exists,
        by=who.name,
    )
    return assistant_out(row)


@router.post(
    "/search",
    response={200: list[AssistantOut], **ERRORS},
    exclude_unset=True,
    operation_id="search_assistants",
    summary="Search assistants",
)
async def search_assistants(
    request: HttpRequest, payload: AssistantSearchIn
) -> list[dict[str, Any]]:
    """Assistants by metadata, graph id and name; newest first by default."""
    return await db(_search_assistants, payload)


def _search_assistants(payload: AssistantSearchIn) -> list[dict[str, Any]]:
    services.ensure_default_assistants()
    found = selectors.search_assistants(
        metadata=payload.metadata,
        graph_id=payload.graph_id,
        name=payload.name,
        sort_by=payload.sort_by,
        sort_order=payload.sort_order,
        limit=payload.limit,
        offset=payload.offset,
    )
    rows = [assistant_out(a) for a in found]
    if payload.select:
        unknown = [f for f in payload.select if f not in AssistantOut.model_fields]
        if unknown:
            raise InvalidArgument(
                f"select has {unknown[0]!r}; use {', '.join(AssistantOut.model_fields)}.",
                field="select",
            )
        keep = {*payload.select, "assistant_id"}
        rows = [{k: v for k, v in row.items() if k in keep} for row in rows]
    return rows


@router.post(
    "/count",
    response={200: int, **ERRORS},
    operation_id="count_assistants",
    summary="Count assistants",
)
async def count_assistants(request: HttpRequest, payload: AssistantCountIn) -> int:
    """How many assistants match."""
    return await db(_count_assistants, payload)


def _count_assistants(payload: AssistantCountIn) -> int:
    services.ensure_default_assistants()
    return selectors.count_assistants(
        metadata=payload.metadata, graph_id=payload.graph_id, name=payload.name
    )


@router.get(
    "/{assistant_id}",
    response={200: AssistantOut, **ERRORS},
    operation_id="get_assistant",
    summary="Get an assistant",
)
async def get_assistant(request: HttpRequest, assistant_id: str) -> dict[str, Any]:
    """One assistant, by its UUID or by a graph id (the graph's default assistant)."""
    return assistant_out(await db(_load, assistant_id))


@router.patch(
    "/{assistant_id}",
    response={200: AssistantOut, **ERRORS},
    operation_id="patch_assistant",
    summary="Update an assistant",
)
def patch_assistant(
    request: HttpRequest, assistant_id: str, payload: AssistantPatchIn
) -> dict[str, Any]:
    """Replace the given fields; the version goes up by one (operators only)."""
    _operator(principal(request))
    fields = {name: getattr(payload, name) for name in services.EDITABLE}
    return assistant_out(services.update_assistant(assistant_id=assistant_id, **fields))


@router.delete(
    "/{assistant_id}",
    response={204: None, **ERRORS},
    operation_id="delete_assistant",
    summary="Delete an assistant",
)
def delete_assistant(
    request: HttpRequest, assistant_id: str, delete_threads: bool = False
) -> Status[None]:
    """Delete an assistant and its runs; ``delete_threads`` also deletes the threads
    whose last assistant it was (operators only)."""
    who = principal(request)
    _operator(who)
    services.delete_assistant(
        assistant_id=assistant_id, delete_threads=delete_threads, by=who.name or "api", door="api"
    )
    return Status(204, None)


@router.get(
    "/{assistant_id}/graph",
    response={200: GraphOut, **ERRORS},
    operation_id="get_assistant_graph",
    summary="Get the assistant's graph",
)
def get_graph(request: HttpRequest, assistant_id: str, xray: int | bool = False) -> dict[str, Any]:
    """Nodes and edges (``__start__`` and ``__end__`` included); a LangGraph graph's
    as LangGraph draws it (``xray``: into its subgraphs)."""
    from criogen.registry import get_graph as load

    graph = load(_load(assistant_id).graph_id)
    if (compiled := langgraph_of(graph)) is not None:
        from criogen.langgraph.schemas import graph_drawing

        return graph_drawing(compiled, xray)
    return graph_json(graph)


@router.get(
    "/{assistant_id}/schemas",
    response={200: SchemasOut, **ERRORS},
    operation_id="get_assistant_schemas",
    summary="Get the assistant's schemas",
)
def get_schemas(request: HttpRequest, assistant_id: str) -> dict[str, Any]:
    """JSON Schemas: a workflow's declared ``state_schema`` when it has one, else an
    object whose keys with the append reducer are arrays; input and output are the
    state."""
    from criogen.registry import get_graph as load
    from criogen.registry import state_declaration

    a = _load(assistant_id)
    graph = load(a.graph_id)
    if (compiled := langgraph_of(graph)) is not None:
        from criogen.langgraph.schemas import graph_schemas

        return {"graph_id": a.graph_id, **graph_schemas(compiled, a.graph_id)}
    declared = state_declaration(a.graph_id)
    state = declared[0] if declared else None
    if state is None:
        workflow = getattr(graph, "graph", None)
        reducers = getattr(workflow, "reducers", {}) or {}
        properties = {key: {"type": "array"} for key, r in reducers.items() if r == "append"}
        state = {"type": "object", "properties": properties, "additionalProperties": True}
    return {
        "graph_id": a.graph_id,
        "input_schema": state,
        "output_schema": state,
        "state_schema": state,
        "config_schema": {"type": "object"},
        "context_schema": {"type": "object"},
    }


@router.get(
    "/{assistant_id}/subgraphs",
    response={200: JsonObject, **ERRORS},
    operation_id="get_assistant_subgraphs",
    summary="Get the assistant's subgraphs",
)
def get_subgraphs(request: HttpRequest, assistant_id: str, recurse: bool = False) -> dict[str, Any]:
    """A LangGraph graph's subgraphs by namespace, each with its schemas (``recurse``:
    theirs too). Criogen's own graphs have none: ``{}``."""
    return _subgraphs(assistant_id, None, recurse)


@router.get(
    "/{assistant_id}/subgraphs/{namespace}",
    response={200: JsonObject, **ERRORS},
    operation_id="get_assistant_subgraphs_by_namespace",
    summary="Get the assistant's subgraphs in a namespace",
)
def get_subgraphs_in(
    request: HttpRequest, assistant_id: str, namespace: str, recurse: bool = False
) -> dict[str, Any]:
    """The subgraph at ``namespace`` (and, with ``recurse``, those inside it)."""
    return _subgraphs(assistant_id, namespace, recurse)


def _subgraphs(assistant_id: str, namespace: str | None, recurse: bool) -> dict[str, Any]:
    from criogen.registry import get_graph as load

    compiled = langgraph_of(load(_load(assistant_id).graph_id))
    if compiled is None:
        return {}
    from criogen.langgraph.schemas import graph_subgraphs

    return graph_subgraphs(compiled, namespace, recurse=recurse)


def langgraph_of(graph: Any) -> Any | None:
    """The compiled LangGraph graph of a registered LangGraph graph (None for
    Criogen's own workflows and agents)."""
    return graph.compiled if getattr(graph, "kind", None) == "langgraph" else None


@router.post(
    "/{assistant_id}/versions",
    response={200: list[AssistantOut], **ERRORS},
    operation_id="get_assistant_versions",
    summary="List the assistant's versions",
)
def get_versions(
    request: HttpRequest, assistant_id: str, payload: VersionsIn
) -> list[dict[str, Any]]:
    """Criogen keeps only the current version of an assistant: a list of one."""
    row = assistant_out(_load(assistant_id))
    meta = payload.metadata or {}
    if any(row["metadata"].get(k) != v for k, v in meta.items()) or payload.offset:
        return []
    return [row]


@router.post(
    "/{assistant_id}/latest",
    response={200: AssistantOut, **ERRORS},
    operation_id="set_assistant_latest",
    summary="Set the assistant's latest version",
)
def set_latest(request: HttpRequest, assistant_id: str, payload: LatestIn) -> dict[str, Any]:
    """Only the current version exists; naming another is a 404."""
    _operator(principal(request))
    row = _load(assistant_id)
    if payload.version != row.version:
        from api.errors import NotFound

        raise NotFound(
            f"assistant {row.assistant_id} has only version {row.version} (older versions "
            "are not kept).",
            field="version",
        )
    return assistant_out(row)


def graph_json(graph: Any) -> dict[str, Any]:
    """A compiled workflow (or agent) as ``{"nodes": [...], "edges": [...]}``."""
    from criogen.engine.workflows import END, START

    workflow = getattr(graph, "graph", None)
    if workflow is None or not hasattr(workflow, "nodes"):
        name = getattr(graph, "name", "agent")
        nodes = [START, str(name), END]
        return {
            "nodes": [{"id": n, "type": "runnable", "data": n} for n in nodes],
            "edges": [
                {"source": START, "target": str(name), "conditional": False},
                {"source": str(name), "target": END, "conditional": False},
            ],
        }
    nodes = [START, *workflow.nodes, END]
    edges = []
    for source, targets in workflow.edges.items():
        for target in targets:
            edges.append({"source": source, "target": target, "conditional": False})
    for source, routes in workflow.routes.items():
        for _route, path_map in routes:
            targets = list((path_map or {}).values()) or [n for n in nodes if n != START]
            for target in targets:
                edges.append({"source": source, "target": target, "conditional": True})
    return {
        "nodes": [
            {"id": n, "type": "schema" if n in (START, END) else "runnable", "data": n}
            for n in nodes
        ],
        "edges": edges,
    }
