"""Workflows: a graph of nodes over a JSON state, run durably, that may pause for a person.

::

    wf = Workflow(reducers={"steps": "append"})
    wf.add_node("fetch", fetch)                 # fn(state) -> dict of changed keys
    wf.add_edge(START, "fetch")
    wf.add_conditional_edges("fetch", route)    # route(state) -> node name, list, or END
    app = wf.compile(storage=Storage("sqlite://ops.db"))
    result = app.thread("ticket-7").run({"order": 42})

A run goes in *steps*: every node named in ``next`` runs (async nodes of one step run
concurrently), their updates are merged in order, and the edges of the nodes that ran
give the next ``next``. A checkpoint is written after every step. Inside a node,
``suspend(reason, payload)`` pauses the run; ``resume(value)`` runs that node again and
``suspend`` returns ``value`` this time.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, NoReturn, cast

from criogen.engine.active_run import (
    DEFAULT_BUSY_TIMEOUT,
    DEFAULT_LEASE_SECONDS,
    ActiveRun,
    Durability,
    OnBusy,
    check_durability,
    check_on_busy,
)
from criogen.engine.answers import (
    check_declaration,
    check_schema,
    check_typed_answers,
    first_problem,
)
from criogen.engine.checkpoints import (
    Checkpoint,
    CheckpointWrite,
    Status,
    ThreadId,
    check_thread_id,
    from_snapshot,
    new_id,
    to_snapshot,
)
from criogen.engine.errors import (
    CriogenError,
    InvalidArgument,
    InvalidGraph,
    InvalidSnapshot,
    InvalidState,
    MaxStepsExceeded,
    NothingToRetry,
    NotSuspended,
    RunCancelled,
    RunFailed,
    ThreadInterrupted,
    ThreadSuspended,
)
from criogen.engine.records import Interrupt, RunError
from criogen.engine.state import (
    Change,
    Delta,
    Reducers,
    apply_update,
    check_json,
    check_reducers,
    check_update,
    compose,
)
from criogen.engine.store import Storage
from criogen.engine.threads import (
    ThreadBase,
    check_answered,
    check_door,
    check_expected,
    check_state_size,
)

__all__ = [
    "END",
    "START",
    "CompiledWorkflow",
    "NodeContext",
    "RunResult",
    "Workflow",
    "WorkflowThread",
    "check_state_values",
    "read_state_schema",
    "suspend",
]

START = "__start__"
"""The virtual node a run starts from: ``add_edge(START, "first")``."""
END = "__end__"
"""The virtual node that ends a run: a route returns ``END`` to stop."""

Node = Callable[..., Mapping[str, Any] | None | Awaitable[Mapping[str, Any] | None]]
Route = Callable[[dict[str, Any]], str | Sequence[str]]


# -- suspend ---------------------------------------------------------------------------


class _Suspend(BaseException):
    """Raised by suspend() to stop the node; BaseException so ``except Exception`` in
    user code does not swallow it."""

    def __init__(self, reason: str, payload: Any, extra: dict[str, Any]) -> None:
        super().__init__(reason)
        self.reason, self.payload, self.extra = reason, payload, extra


@dataclass
class NodeContext:
    """What a node may know about the run it is part of (its optional 2nd argument)."""

    thread_id: str
    """The thread the run is on."""
    run_id: str
    """The run."""
    node: str
    """The node being run."""
    step: int
    """The step number within the thread (the version of the checkpoint it follows)."""
    resumes: list[Any] = field(default_factory=list)
    """Values given by resume() to this node's suspend() calls, in order."""
    calls: int = 0
    """How many times suspend() was called in this execution of the node."""


_current: contextvars.ContextVar[NodeContext | None] = contextvars.ContextVar(
    "criogen_node", default=None
)


def suspend(
    reason: str,
    payload: Any = None,
    *,
    choices: list[Any] | Mapping[str, Any] | None = None,
    schema: Mapping[str, Any] | None = None,
    **extra: Any,
) -> Any:
    """Pause the run for a person; return the value they resume it with.

    The first time a node calls ``suspend`` the run stops with a ``suspend``
    checkpoint. ``thread.resume(value)`` runs the node again from its start, and this
    call returns ``value``. A node may call ``suspend`` several times; each call gets
    the value of its own resume, in order. Code before ``suspend`` runs again on resume,
    so keep side effects after it.

    Args:
        reason: short text shown to operators ("approve refund").
        payload: JSON shown with it (what to approve, a question…).
        choices: the answers the step takes, a list of values or ``{label: value}``
            (the dashboard shows one button each).
        schema: a JSON Schema the answer must fit (criogen.engine.answers lists the
            keywords checked; the dashboard renders it as a form). With both, an
            answer fits when it is a choice or fits the schema; any other answer is
            refused before a run is created (InvalidArgument naming the field).
        extra: more JSON kept on the interrupt (``deadline``, ``default``…).
    """
    ctx = _current.get()
    if ctx is None:
        raise InvalidArgument(
            "suspend() was called outside a workflow node; call it only inside a node.",
            field="suspend",
        )
    index = ctx.calls
    ctx.calls += 1
    if index < len(ctx.resumes):
        return ctx.resumes[index]
    check_json(payload, "suspend payload")
    check_declaration(choices, schema)
    if choices is not None:
        extra["choices"] = choices
    if schema is not None:
        extra["schema"] = schema
    check_json(extra, "suspend options")
    raise _Suspend(reason, payload, extra)


# -- results ---------------------------------------------------------------------------


@dataclass(frozen=True)
class RunResult:
    """How a run ended, when it did not fail (a failure raises RunFailed)."""

    status: Literal["completed", "suspended"]
    """``completed``, or ``suspended`` waiting for resume()."""
    state: dict[str, Any]
    """The state at the end of the run."""
    checkpoint: Checkpoint
    """The last checkpoint written (the thread's head)."""
    thread_id: str
    """The thread the run was on."""
    run_id: str
    """The run's id (also on its checkpoints)."""

    @property
    def interrupts(self) -> list[dict[str, Any]]:
        """The pending suspensions: ``{"id", "node", "reason", "payload", …}``."""
        return list(self.checkpoint.interrupts)

    @property
    def snapshot(self) -> dict[str, Any]:
        """The final checkpoint as plain JSON; ``app.resume(snapshot, value)`` continues it."""
        return to_snapshot(self.checkpoint)


# -- the graph -------------------------------------------------------------------------


@dataclass
class _NodeSpec:
    name: str
    fn: Node
    is_async: bool
    takes_context: bool


class Workflow:
    """A graph of nodes to compile and run. Build it once, at import time."""

    def __init__(
        self,
        *,
        reducers: Reducers | None = None,
        name: str = "workflow",
        state_schema: Any = None,
    ) -> None:
        """``state_schema`` (optional) declares the state's keys: a JSON Schema object
        (the subset ``criogen.engine.answers`` checks), or a pydantic model class or
        TypedDict, read as one. A person's state update is checked against it, and
        the dashboard shows it as a form."""
        self.name = name
        self.reducers = check_reducers(reducers or {})
        self.state_schema = read_state_schema(state_schema)
        self.nodes: dict[str, _NodeSpec] = {}
        self.edges: dict[str, list[str]] = {}
        self.routes: dict[str, list[tuple[Route, dict[str, str] | None]]] = {}

    def add_node(self, name: str, fn: Node) -> Workflow:
        """Add a node: ``fn(state)`` or ``fn(state, ctx)``, sync or async, returning
        a dict of the keys it changes (or None)."""
        if not isinstance(name, str) or not name or name in (START, END):
            raise InvalidGraph(f"node name {name!r} is not allowed.", node=name)
        if name in self.nodes:
            raise InvalidGraph(f"node {name!r} is already in the workflow.", node=name)
        if not callable(fn):
            raise InvalidGraph(f"node {name!r} must be a function.", node=name)
        try:
            params = [
                p
                for p in inspect.signature(fn).parameters.values()
                if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
            ]
        except (TypeError, ValueError):
            params = []
        self.nodes[name] = _NodeSpec(
            name, fn, inspect.iscoroutinefunction(fn), takes_context=len(params) >= 2
        )
        return self

    def add_edge(self, source: str, target: str) -> Workflow:
        """After ``source`` runs, ``target`` runs (in the next step)."""
        self.edges.setdefault(source, []).append(target)
        return self

    def add_conditional_edges(
        self, source: str, route: Route, path_map: Mapping[str, str] | None = None
    ) -> Workflow:
        """After ``source`` runs, ``route(state)`` names what runs next: a node, a list
        of nodes, or ``END``. ``path_map`` translates route values to node names."""
        if not callable(route):
            raise InvalidGraph(f"the route of {source!r} must be a function.", node=source)
        self.routes.setdefault(source, []).append((route, dict(path_map or {}) or None))
        return self

    def set_entry_point(self, node: str) -> Workflow:
        """Same as ``add_edge(START, node)``."""
        return self.add_edge(START, node)

    def compile(
        self,
        *,
        storage: Any = None,
        durability: Durability = "async",
        on_busy: OnBusy = "wait",
        busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        max_steps: int = 1000,
    ) -> CompiledWorkflow:
        """Check the graph and bind it to a storage (default: its own in-memory one)."""
        self._check()
        for name, value, low, strict in (
            ("busy_timeout", busy_timeout, 0, False),
            # A lease of 0 would make the heartbeat renew in a busy loop.
            ("lease_seconds", lease_seconds, 0, True),
            ("max_steps", max_steps, 1, False),
        ):
            number = isinstance(value, int | float) and not isinstance(value, bool)
            if not number or value < low or (strict and value <= low):
                bound = f"more than {low}" if strict else f"at least {low}"
                raise InvalidArgument(f"{name} is {value!r}; use {bound}.", field=name)
        if storage is None:
            from criogen.engine.memory_store import MemoryStorage

            storage = MemoryStorage()
        return CompiledWorkflow(
            self,
            storage=storage,
            durability=check_durability(durability),
            on_busy=check_on_busy(on_busy),
            busy_timeout=busy_timeout,
            lease_seconds=lease_seconds,
            max_steps=max_steps,
        )

    def _check(self) -> None:
        if not self.nodes:
            raise InvalidGraph("the workflow has no nodes; add_node() first.")
        if START not in self.edges and START not in self.routes:
            raise InvalidGraph("nothing starts the workflow: add_edge(START, 'first_node').")
        for source, targets in self.edges.items():
            if source != START and source not in self.nodes:
                raise InvalidGraph(f"edge from unknown node {source!r}.", node=source)
            for target in targets:
                if target != END and target not in self.nodes:
                    raise InvalidGraph(f"edge from {source!r} to unknown node {target!r}.")
        for source in self.routes:
            if source != START and source not in self.nodes:
                raise InvalidGraph(f"conditional edges from unknown node {source!r}.")

    def successors(self, source: str, state: dict[str, Any]) -> list[str]:
        """The nodes that run after ``source`` given the merged state (END dropped)."""
        routes = self.routes.get(source)
        if not routes:  # plain edges only: nothing to call or check
            return [t for t in self.edges.get(source, ()) if t != END]
        out = list(self.edges.get(source, ()))
        for route, path_map in routes:
            chosen = route(state)
            names = [chosen] if isinstance(chosen, str) else list(chosen)
            for name in names:
                target = path_map.get(name, name) if path_map else name
                if target != END and target not in self.nodes:
                    raise InvalidGraph(
                        f"the route after {source!r} returned {name!r}, which is not a node.",
                        node=source,
                    )
                out.append(target)
        return [t for t in out if t != END]


def read_state_schema(declared: Any) -> dict[str, Any] | None:
    """A workflow's ``state_schema`` as a JSON Schema object (None: not declared).

    A class (pydantic model, TypedDict, dataclass) is read by pydantic's TypeAdapter.
    Raises InvalidArgument when the schema is not an object schema or uses keywords
    Criogen does not check (``$ref``, ``anyOf``… : nothing is silently skipped)."""
    if declared is None:
        return None
    who = "Workflow(state_schema=...)"
    schema: Any = declared
    if isinstance(declared, type):
        try:
            from pydantic import PydanticSchemaGenerationError, PydanticUserError, TypeAdapter
        except ImportError:  # pragma: no cover - pydantic comes with the server
            raise InvalidArgument(
                f"{who}: reading a class needs pydantic; pass a JSON Schema dict.",
                field="state_schema",
            ) from None
        try:
            schema = TypeAdapter(declared).json_schema()
        except (PydanticSchemaGenerationError, PydanticUserError) as exc:
            raise InvalidArgument(
                f"{who}: {declared.__name__} cannot be read as a JSON Schema ({exc}).",
                field="state_schema",
            ) from None
    check_schema(schema, "state_schema", who)
    if schema.get("type", "object") != "object":
        raise InvalidArgument(
            f'{who}: the state is a JSON object; state_schema.type must be "object".',
            field="state_schema.type",
        )
    return dict(schema)


def check_state_values(
    schema: Mapping[str, Any] | None, state: Mapping[str, Any], keys: Any
) -> None:
    """Check the ``keys`` a person changed, as merged into ``state``, against the
    workflow's declared ``schema`` (InvalidArgument naming ``values.<key>``). Keys not
    changed are not checked, nor are required keys the update does not name."""
    if not schema:
        return
    changed = {key: state[key] for key in keys if key in state}
    problem = first_problem(changed, {**schema, "required": []}, "values")
    if problem is not None:
        where, message = problem
        raise InvalidArgument(f"{where} {message}.", field=where)


# -- running ---------------------------------------------------------------------------


class CompiledWorkflow:
    """A workflow bound to a storage: runs threads of it."""

    def __init__(
        self,
        graph: Workflow,
        *,
        storage: Any,
        durability: Durability,
        on_busy: OnBusy,
        busy_timeout: float,
        lease_seconds: float,
        max_steps: int,
    ) -> None:
        self.graph = graph
        self.storage: Storage = storage
        self.durability = durability
        self.on_busy = on_busy
        self.busy_timeout = busy_timeout
        self.lease_seconds = lease_seconds
        self.max_steps = max_steps

    @property
    def name(self) -> str:
        """The workflow's name."""
        return self.graph.name

    def with_storage(self, storage: Any, **overrides: Any) -> CompiledWorkflow:
        """The same workflow on another storage (the server binds assistants to its
        database this way); ``overrides`` change durability, on_busy…"""
        options = {
            "durability": self.durability,
            "on_busy": self.on_busy,
            "busy_timeout": self.busy_timeout,
            "lease_seconds": self.lease_seconds,
            "max_steps": self.max_steps,
            **overrides,
        }
        return CompiledWorkflow(self.graph, storage=storage, **options)

    def thread(self, thread_id: str) -> WorkflowThread:
        """The thread with this id (created by its first run)."""
        return WorkflowThread(self, check_thread_id(thread_id))

    def run(self, input: Mapping[str, Any] | None = None, **options: Any) -> RunResult:
        """Run once on a fresh thread (a new UUID). Options as for WorkflowThread.run."""
        # A new UUID is a valid thread id: no check_thread_id (thread()) needed. Nobody
        # else knows it yet, so the run's first write creates the thread (no lease
        # statement before the run).
        return WorkflowThread(self, ThreadId(new_id()), new=True).run(input, **options)

    def resume(self, snapshot: dict[str, Any], value: Any = None, **options: Any) -> RunResult:
        """Continue the run a snapshot was taken of: resume it with ``value`` if it is
        suspended, retry it if it failed or was interrupted.

        The snapshot's thread is created in this workflow's storage if it is not there;
        if it is there it must not have moved on since the snapshot was taken.
        """
        checkpoint = from_snapshot(snapshot)
        thread = self.thread(checkpoint.thread_id)
        mode: Literal["resume", "retry"] = "resume" if checkpoint.status == "suspended" else "retry"
        if checkpoint.status == "completed":
            raise InvalidSnapshot(
                "the snapshot is of a completed run; start a new one with run().",
                field="checkpoint.status",
            )
        # Checked before the snapshot is imported: a snapshot of another workflow must
        # not leave a thread behind that this one cannot run.
        unknown = [n for n in checkpoint.next if n not in self.graph.nodes]
        if unknown:
            raise InvalidSnapshot(
                f"the snapshot's next nodes {unknown} are not nodes of {self.name!r}; "
                "resume it with the workflow that took it.",
                field="checkpoint.next",
            )
        check_json(value, "resume value")
        return thread._go(mode, value=value, snapshot=checkpoint, **options)

    async def arun(self, input: Mapping[str, Any] | None = None, **options: Any) -> RunResult:
        """``run`` from async code (the run goes on a worker thread)."""
        return await asyncio.to_thread(self.run, input, **options)


class WorkflowThread(ThreadBase):
    """One thread of a workflow: its runs, its head and its history."""

    def __init__(self, app: CompiledWorkflow, thread_id: ThreadId, *, new: bool = False) -> None:
        self.app = app
        self.id = thread_id
        self._new = new
        """``thread_id`` was just made up: the next run creates the thread with its
        first write (ActiveRun's ``new_thread``)."""

    def __repr__(self) -> str:
        return f"<WorkflowThread {self.id!r} of {self.app.name!r}>"

    @property
    def storage(self) -> Storage:
        """The workflow's storage."""
        return self.app.storage

    # -- running ------------------------------------------------------------------------

    def run(
        self,
        input: Mapping[str, Any] | None = None,
        *,
        by: str | None = None,
        door: str = "python",
        **options: Any,
    ) -> RunResult:
        """Start a new turn with ``input`` merged into the state.

        Options: ``durability``, ``on_busy``, ``busy_timeout``, ``run_id``, ``metadata``.
        Raises ThreadSuspended (head suspended: resume it), ThreadInterrupted (a run
        died mid-way: retry it), ThreadBusy, InvalidState, RunFailed.
        """
        # ``by`` / ``door`` are accepted as for every verb; a workflow's new turn is not
        # an operator's action and writes no audit event.
        check_door(door)
        # Validate before taking the thread, so bad input changes nothing.
        return self._go("turn", input=check_update(input, origin="input"), **options)

    def resume(
        self,
        value: Any = None,
        *,
        by: str | None = None,
        door: str = "python",
        expected: str | None = None,
        **options: Any,
    ) -> RunResult:
        """Answer the pending suspension: the suspended node runs again and its
        ``suspend()`` returns ``value``. With several pending, pass
        ``{interrupt_id: value, …}``.

        ``by`` / ``door`` name who answered and from where (the audit event);
        ``expected`` is the suspended checkpoint the caller answered: if the thread
        has moved on since, StaleHead and nothing changes.
        """
        check_json(value, "resume value")
        head = self.head
        if head is not None and head.status == "suspended":
            # A typed suspension (choices / schema) takes only what it declared.
            check_typed_answers(head.interrupts, value)
        audit = self._audit_event("resume", by=by, door=door, details={"value": value})
        return self._go("resume", value=value, audit=audit, expected=expected, **options)

    def retry(
        self,
        *,
        by: str | None = None,
        door: str = "python",
        expected: str | None = None,
        **options: Any,
    ) -> RunResult:
        """Continue a failed or interrupted turn from its last checkpoint (``by``,
        ``door`` and ``expected`` as for :meth:`resume`)."""
        audit = self._audit_event("retry", by=by, door=door, details={})
        return self._go("retry", audit=audit, expected=expected, **options)

    def goto(
        self,
        node: str,
        *,
        by: str | None = None,
        door: str = "python",
        expected: str | None = None,
        **options: Any,
    ) -> RunResult:
        """Leave the pending suspension without answering it and continue from ``node``
        (the suspended step is not run again); ``"__end__"`` resolves the thread
        instead (:meth:`resolve`: it completes, nothing more runs). One audit event
        (``goto``, or ``resolve``) names ``by`` and ``door``.

        Raises InvalidArgument naming ``goto`` (not a node of this workflow),
        NotSuspended, StaleHead (the head is not ``expected``), ThreadBusy.
        """
        self.check_goto(node)
        if node == END:
            for breakpoint in ("interrupt_before", "interrupt_after"):
                options.pop(breakpoint, None)  # nothing runs: no breakpoint to stop at
            checkpoint = self.resolve(by=by, door=door, expected=expected, **options)
            return RunResult(
                "completed", checkpoint.state, checkpoint, self.id, checkpoint.run_id or ""
            )
        audit = self._audit_event("goto", by=by, door=door, details={"node": node})
        return self._go("goto", value=node, audit=audit, expected=expected, **options)

    def check_breakpoints(self, nodes: Any, field: str) -> frozenset[str]:
        """The node names of a breakpoint option (``interrupt_before`` /
        ``interrupt_after``): a list of this workflow's nodes, or ``"*"`` for all of
        them. InvalidArgument naming ``field`` otherwise (an unknown node too)."""
        if nodes is None or nodes == []:
            return frozenset()
        if nodes == "*":
            return frozenset(self.app.graph.nodes)
        if not isinstance(nodes, list | tuple) or not all(isinstance(n, str) for n in nodes):
            raise InvalidArgument(f'{field} must be a list of node names or "*".', field=field)
        unknown = [n for n in nodes if n not in self.app.graph.nodes]
        if unknown:
            known = ", ".join(self.app.graph.nodes)
            raise InvalidArgument(
                f"{field} names {unknown[0]!r}, not a node of {self.app.name!r} (nodes: {known}).",
                field=field,
            )
        return frozenset(nodes)

    def check_goto(self, node: Any) -> None:
        """InvalidArgument naming ``goto`` unless ``node`` is a node of this workflow or
        ``"__end__"``."""
        if node == END:
            return
        if not isinstance(node, str) or node not in self.app.graph.nodes:
            known = ", ".join([*self.app.graph.nodes, END])
            raise InvalidArgument(
                f"goto {node!r} is not a node of {self.app.name!r} (use one of: {known}).",
                field="goto",
            )

    def check_answer(self, value: Any) -> None:
        check_json(value, "resume value")
        head = self.head
        if head is None or head.status != "suspended" or not head.interrupts:
            return
        if len(head.interrupts) > 1:
            ids = {i["id"] for i in head.interrupts}
            if not (isinstance(value, dict) and value and set(value) <= ids):
                raise InvalidArgument(
                    f"{len(ids)} suspensions are pending; resume with "
                    f"{{interrupt_id: value, …}} naming them ({', '.join(sorted(ids))}).",
                    field="command.resume",
                )
        check_typed_answers(head.interrupts, value)

    def _prepare_update(self, values: Mapping[str, Any] | None, as_node: str | None) -> Any:
        if as_node is not None and as_node not in self.app.graph.nodes:
            known = ", ".join(self.app.graph.nodes)
            raise InvalidArgument(
                f"as_node {as_node!r} is not a node of {self.app.name!r} (nodes: {known}).",
                field="as_node",
            )
        return check_update(values, origin="update_state")

    def _merge(
        self, head: Checkpoint | None, update: Any, as_node: str | None
    ) -> tuple[dict[str, Any], Any, Status, list[str], Any, dict[str, Any]]:
        state, delta = apply_update(
            head.state if head else {},
            update,
            self.app.graph.reducers,
            origin=as_node or "update_state",
        )
        # The merged values, so an appended item is checked as part of its list.
        check_state_values(self.app.graph.state_schema, state, update or {})
        if as_node is not None:
            nxt = self.app.graph.successors(as_node, state)
            return state, delta, ("in_progress" if nxt else "completed"), nxt, (), {}
        if head is None:
            return state, delta, "completed", [], (), {}
        return state, delta, head.status, list(head.next), head.interrupts, dict(head.tasks)

    def _active(
        self,
        *,
        durability: Durability | None = None,
        on_busy: OnBusy | None = None,
        busy_timeout: float | None = None,
        run_id: str | None = None,
        should_stop: Callable[[], bool] | None = None,
    ) -> ActiveRun:
        app = self.app
        new, self._new = self._new, False
        # ActiveRun checks durability and on_busy (the same checks, the same errors).
        return ActiveRun(
            app.storage,
            self.id,
            run_id=run_id,
            durability=durability or app.durability,
            on_busy=on_busy or app.on_busy,
            busy_timeout=app.busy_timeout if busy_timeout is None else busy_timeout,
            lease_seconds=app.lease_seconds,
            should_stop=should_stop,
            new_thread=new,
        )

    def _go(
        self,
        mode: Literal["turn", "resume", "retry", "goto"],
        *,
        input: Mapping[str, Any] | None = None,
        value: Any = None,
        snapshot: Checkpoint | None = None,
        metadata: dict[str, Any] | None = None,
        audit: Any = None,
        expected: str | None = None,
        interrupt_before: Any = None,
        interrupt_after: Any = None,
        **options: Any,
    ) -> RunResult:
        breakpoints = (
            self.check_breakpoints(interrupt_before, "interrupt_before"),
            self.check_breakpoints(interrupt_after, "interrupt_after"),
        )
        with self._active(**options) as active:
            head = active.head
            if snapshot is not None:
                head = _adopt_snapshot(active, head, snapshot)
            if mode == "resume" and expected is not None and (head is None or head.id != expected):
                check_answered(self.storage, self.id, expected)
            check_expected(self.id, head, expected)
            if audit is not None:
                # The run's first stored checkpoint carries the event.
                active.audit = dataclasses.replace(
                    audit, details={**audit.details, "run_id": active.run_id}
                )
            execution = _Execution(self.app, active, metadata or {}, breakpoints)
            return execution.start(mode, head, input, value)


def _adopt_snapshot(active: ActiveRun, head: Checkpoint | None, snap: Checkpoint) -> Checkpoint:
    """Make the snapshot's checkpoint the head: import it, or check it is the head."""
    if head is not None:
        if head.id != snap.id:
            raise InvalidSnapshot(
                f"thread {snap.thread_id!r} has moved on since this snapshot (head "
                f"v{head.version}, snapshot v{snap.version}); use the thread instead.",
                field="checkpoint.id",
            )
        return head
    delta = {key: Change("set", value) for key, value in snap.state.items()}
    imported = replace(
        snap,
        value_versions=dict.fromkeys(snap.state, snap.version),
        value_bases=dict.fromkeys(snap.state, snap.version),
    )
    write = CheckpointWrite(imported, delta, 0, {})
    active.storage.write([write], lease_id=active.run_id)
    active.storage.notify([write])
    active.start_from(imported)
    return imported


class _Execution:
    """One run's walk through the graph, step by step."""

    def __init__(
        self,
        app: CompiledWorkflow,
        active: ActiveRun,
        metadata: dict[str, Any],
        breakpoints: tuple[frozenset[str], frozenset[str]] = (frozenset(), frozenset()),
    ):
        self.before, self.after = breakpoints
        self.app = app
        self.graph = app.graph
        self.active = active
        self.metadata = metadata
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(
        self,
        mode: Literal["turn", "resume", "retry", "goto"],
        head: Checkpoint | None,
        input: Mapping[str, Any] | None,
        value: Any,
    ) -> RunResult:
        thread_id = self.active.thread_id
        status = head.status if head else None
        try:
            if mode == "turn":
                breakpoint = status == "suspended" and head is not None and not head.interrupts
                if breakpoint and input is None and head is not None:
                    # Stopped at a breakpoint: a run without input continues from it.
                    return self._steps(head.state, list(head.next), dict(head.tasks))
                if status == "suspended" and not breakpoint:
                    raise ThreadSuspended(
                        f"thread {thread_id!r} is suspended waiting for a person; "
                        "resume() it (or rewind) before starting a new turn.",
                        thread_id=thread_id,
                    )
                if status == "in_progress" and head and head.source != "fork":
                    raise ThreadInterrupted(
                        f"thread {thread_id!r} stopped mid-run (its process died); "
                        "call retry() to continue it.",
                        thread_id=thread_id,
                    )
                if input is None and head and head.source == "fork" and status == "in_progress":
                    # Nothing new to merge: carry on from where the fork stands, as
                    # LangGraph does for a run without input after update_state.
                    return self._steps(head.state, list(head.next), dict(head.tasks))
                state = head.state if head else {}
                state, delta = apply_update(state, input, self.graph.reducers, origin="input")
                check_state_size(self.app.storage, thread_id, state, delta)
                nxt = self.graph.successors(START, state)
                paused = bool(self.before.intersection(nxt))
                checkpoint = self.active.write(
                    source="input",
                    status="suspended" if paused else "in_progress" if nxt else "completed",
                    state=state,
                    delta=delta,
                    next=nxt,
                    metadata={**self.metadata, "step": 0},
                    final=paused or not nxt,
                )
                if paused:
                    assert checkpoint is not None
                    return self._result("suspended", state, checkpoint)
                return self._steps(state, nxt, {})
            assert head is not None or mode != "resume" or status is None
            if mode in ("resume", "goto"):
                if status != "suspended" or head is None:
                    raise NotSuspended(
                        f"thread {thread_id!r} is not suspended (its head is "
                        f"{status or 'empty'}); there is nothing to {mode}.",
                        thread_id=thread_id,
                    )
                if mode == "goto":
                    # The suspended step is left as it stands (what its other nodes
                    # finished is dropped with it); the run goes on from ``value``.
                    return self._steps(head.state, [value], {})
                return self._steps(head.state, list(head.next), self._resumed(head, value))
            if head is None or status not in ("failed", "in_progress"):
                raise NothingToRetry(
                    f"thread {thread_id!r} has no failed or interrupted turn to retry "
                    f"(its head is {status or 'empty'}).",
                    thread_id=thread_id,
                )
            return self._steps(head.state, list(head.next), dict(head.tasks))
        finally:
            if self._loop is not None:
                self._loop.close()

    def _resumed(self, head: Checkpoint, value: Any) -> dict[str, Any]:
        tasks = {
            "done": dict(head.tasks.get("done", {})),
            "resumes": {k: list(v) for k, v in head.tasks.get("resumes", {}).items()},
        }
        pending = list(head.interrupts)
        if not pending:
            return tasks  # a breakpoint: nothing to answer, the run goes on
        if len(pending) == 1:
            answers = {pending[0]["id"]: value}
        elif isinstance(value, dict) and value and set(value) <= {i["id"] for i in pending}:
            answers = value
        else:
            raise InvalidArgument(
                f"{len(pending)} suspensions are pending; resume with "
                "{interrupt_id: value, …} naming them (see result.interrupts).",
                field="value",
            )
        for interrupt in pending:
            if interrupt["id"] in answers:
                tasks["resumes"].setdefault(interrupt["node"], []).append(answers[interrupt["id"]])
        return tasks

    def _steps(self, state: dict[str, Any], nxt: list[str], tasks: dict[str, Any]) -> RunResult:
        active = self.active
        done: dict[str, Any] = dict(tasks.get("done", {}))
        resumes: dict[str, list[Any]] = {k: list(v) for k, v in tasks.get("resumes", {}).items()}
        steps = 0
        while nxt:
            try:
                stop = active.should_stop is not None and active.should_stop()
            except TimeoutError as timeout:
                # The run's time limit passed: it ends here with a failure checkpoint
                # (the state as after its last step), and retry() continues it.
                self._fail(state, nxt, done, resumes, None, timeout)
            if stop:
                raise RunCancelled(
                    f"run {active.run_id} on thread {active.thread_id!r} was stopped "
                    "before its next step; retry() continues it.",
                    thread_id=active.thread_id,
                    run_id=active.run_id,
                )
            steps += 1
            if steps > self.app.max_steps:
                limit = self.app.max_steps
                exc = MaxStepsExceeded(
                    f"the run took more than {limit} steps without ending; check the "
                    "routes for a loop, or compile with a higher max_steps.",
                    max_steps=limit,
                )
                self._fail(state, nxt, done, resumes, None, exc)
            outcomes = self._run_step(state, nxt, done, resumes)
            if len(outcomes) > 1:
                # With several nodes in a step, one's update may be stored (as finished
                # work) in another's failure or suspend checkpoint: check it now.
                for node, out in outcomes.items():
                    if not isinstance(out, BaseException):
                        try:
                            apply_update({}, out, {}, origin=f"node {node!r}")
                        except InvalidState as exc:
                            outcomes[node] = exc
            suspended: list[tuple[str, _Suspend]] = []
            failed: list[tuple[str, Exception]] = []
            for node, out in outcomes.items():
                if not isinstance(out, BaseException):
                    done[node] = out
                elif isinstance(out, _Suspend):
                    suspended.append((node, out))
                elif isinstance(out, Exception):
                    failed.append((node, out))
            if failed:
                node, error = failed[0]
                self._fail(state, nxt, done, resumes, node, error)
            if suspended:
                interrupts = [
                    Interrupt(
                        id=new_id(),
                        node=node,
                        index=len(resumes.get(node, [])),
                        reason=s.reason,
                        payload=s.payload,
                        extra=s.extra,
                    ).to_dict()
                    for node, s in suspended
                ]
                checkpoint = active.write(
                    source="suspend",
                    status="suspended",
                    state=state,
                    delta={},
                    next=nxt,
                    interrupts=interrupts,
                    tasks={"done": done, "resumes": resumes},
                    metadata={**self.metadata, "step": active._tip_version},
                    final=True,
                )
                assert checkpoint is not None
                return self._result("suspended", state, checkpoint)
            delta: Delta = {}
            new_state = state
            for node in nxt:
                try:
                    new_state, node_delta = apply_update(
                        new_state, done[node], self.graph.reducers, origin=f"node {node!r}"
                    )
                except Exception as exc:  # noqa: BLE001 - InvalidState, or a reducer's bug
                    done.pop(node)  # its update is not kept: retry() runs it again
                    self._fail(state, nxt, done, resumes, node, exc)
                delta = compose(delta, node_delta) if delta else node_delta
            following: list[str] = []
            try:
                for node in nxt:
                    for target in self.graph.successors(node, new_state):
                        if target not in following:
                            following.append(target)
            except Exception as exc:  # noqa: BLE001 - a broken route fails the run
                self._fail(state, nxt, done, resumes, None, exc)
            updates = {node: done[node] for node in nxt}
            # A breakpoint (interrupt_before a node that comes next, interrupt_after one
            # that just ran) stops the run here: the step's checkpoint is the one that
            # waits, with no interrupt; a run without input (or a resume) goes on.
            paused = bool(
                following
                and (self.before or self.after)
                and (self.before.intersection(following) or self.after.intersection(nxt))
            )
            state, nxt, done, resumes = new_state, following, {}, {}
            written = active.write(
                source="step",
                status="suspended" if paused else "in_progress" if nxt else "completed",
                state=state,
                delta=delta,
                next=nxt,
                metadata={**self.metadata, "step": active._tip_version + 1},
                updates=updates,
                final=paused or not nxt,
            )
            if paused:
                assert written is not None
                return self._result("suspended", state, written)
        last = active.last
        assert last is not None
        return self._result("completed", state, last)

    def _result(self, status: Any, state: dict[str, Any], checkpoint: Checkpoint) -> RunResult:
        return RunResult(status, state, checkpoint, self.active.thread_id, self.active.run_id)

    def _run_step(
        self,
        state: dict[str, Any],
        nodes: list[str],
        done: dict[str, Any],
        resumes: dict[str, list[Any]],
    ) -> dict[str, Any]:
        """Run the step's nodes that have not run yet; map node -> update or exception."""
        specs = self.graph.nodes
        todo = [n for n in nodes if n not in done]
        async_nodes = [n for n in todo if specs[n].is_async]
        if not async_nodes:  # the usual step: plain functions, called in order
            return {name: self._call(name, state, resumes) for name in todo}
        outcomes: dict[str, Any] = {}
        for name in todo:
            if name in async_nodes:
                continue
            outcomes[name] = self._call(name, state, resumes)
        if async_nodes:
            if self._loop is None:
                self._loop = asyncio.new_event_loop()

            async def gather() -> list[Any]:
                # gather() must be called inside the loop: outside it, it looks for the
                # thread's current loop, which a worker thread (arun, the runner) lacks.
                return await asyncio.gather(*(self._acall(n, state, resumes) for n in async_nodes))

            results = self._loop.run_until_complete(gather())
            outcomes.update(zip(async_nodes, results, strict=True))
        return {n: outcomes[n] for n in todo}

    def _context(self, name: str, resumes: dict[str, list[Any]]) -> NodeContext:
        return NodeContext(
            thread_id=self.active.thread_id,
            run_id=self.active.run_id,
            node=name,
            step=self.active._tip_version,
            resumes=resumes.get(name, []),
        )

    def _call(self, name: str, state: dict[str, Any], resumes: dict[str, list[Any]]) -> Any:
        spec = self.graph.nodes[name]
        active = self.active
        # What _context makes, inline (a call less per node on the hot path).
        ctx = NodeContext(
            thread_id=active.thread_id,
            run_id=active.run_id,
            node=name,
            step=active._tip_version,
            resumes=resumes.get(name, []),
        )
        token = _current.set(ctx)
        try:
            args = (dict(state), ctx) if spec.takes_context else (dict(state),)
            return spec.fn(*args)
        except (Exception, _Suspend) as exc:  # noqa: BLE001 - a node's error is the run's outcome
            return exc
        finally:
            _current.reset(token)

    async def _acall(self, name: str, state: dict[str, Any], resumes: dict[str, list[Any]]) -> Any:
        spec = self.graph.nodes[name]
        ctx = self._context(name, resumes)
        _current.set(ctx)  # this task runs in its own copy of the context
        try:
            args = (dict(state), ctx) if spec.takes_context else (dict(state),)
            # An async node (checked when it was added): its call is a coroutine.
            return await cast(Awaitable[Any], spec.fn(*args))
        except (Exception, _Suspend) as exc:  # noqa: BLE001 - a node's error is the run's outcome
            return exc

    def _fail(
        self,
        state: dict[str, Any],
        nxt: list[str],
        done: dict[str, Any],
        resumes: dict[str, list[Any]],
        node: str | None,
        exc: BaseException,
    ) -> NoReturn:
        """Write the failure checkpoint (state as before the step) and raise."""
        error = RunError.from_exception(exc, node=node, code="node_error").to_dict()
        checkpoint = self.active.write(
            source="failure",
            status="failed",
            state=state,
            delta={},
            next=nxt,
            tasks={"done": done, "resumes": resumes},
            error=error,
            metadata={**self.metadata, "step": self.active._tip_version},
            final=True,
        )
        assert checkpoint is not None
        where = f"node {node!r}" if node else "the workflow"
        if isinstance(exc, CriogenError):
            failure = exc
            failure.checkpoint = checkpoint
            failure.snapshot = to_snapshot(checkpoint)
            raise failure
        raise RunFailed(
            f"{where} raised {type(exc).__name__}: {exc}. The thread's head is now a failure "
            "checkpoint: retry() continues from it, run() starts a new turn.",
            checkpoint=checkpoint,
            snapshot=to_snapshot(checkpoint),
            thread_id=self.active.thread_id,
            node=node,
        ) from exc
