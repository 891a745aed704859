"""Runs: create, wait for, cancel and delete them; resume and retry threads.

``create_run`` validates everything before it writes, creates the run ``pending`` in
one transaction (the thread row locked, so two requests on one thread apply their
multitask strategies in order), and enqueues it only after the commit. The runner
(:mod:`criogen.runner`) executes runs one at a time per thread, oldest first.

Multitask strategies (what happens when the thread already has a pending or running
run), as in LangGraph: ``enqueue`` (default) the new run waits its turn; ``reject``
raises ThreadBusy (409); ``interrupt`` cancels the active runs (their checkpoints
stay) and the new run starts when they stopped; ``rollback`` does the same and
deletes the checkpoints the cancelled runs wrote.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, NoReturn

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from criogen import dispatch, events
from criogen.engine.active_run import check_durability
from criogen.engine.checkpoints import check_thread_id
from criogen.engine.errors import (
    AlreadyDecided,
    CheckpointNotFound,
    InvalidArgument,
    NotAllowedToDecide,
    NothingToRetry,
    NotSuspended,
    ThreadBusy,
    ThreadNotFound,
)
from criogen.engine.state import check_json
from criogen.engine.threads import ANSWER_ACTIONS, check_door, check_expected
from criogen.outbound import check_webhook_url
from criogen.registry import get_graph, storage
from criogen.selectors import RunNotFound
from criogen.services.assistants import RUN_TIMEOUT_KEY, check_run_timeout, resolve_assistant
from criogen.storage.models import Assistant, AuditEvent, Checkpoint, Run, Thread
from criogen.storage.models.runs import ACTIVE_RUN_STATUSES, open_sealed, sealing
from criogen.storage.orm.runs import insert_run

__all__ = [
    "MULTITASK_STRATEGIES",
    "RunNotFound",
    "cancel_active_runs",
    "cancel_run",
    "check_after_seconds",
    "create_run",
    "delete_run",
    "may_decide",
    "Decider",
    "answer_thread",
    "resolve_durability",
    "resume_thread",
    "retry_thread",
    "wait_run",
]

logger = logging.getLogger("criogen.services.runs")

MULTITASK_STRATEGIES = ("reject", "interrupt", "rollback", "enqueue")
ANSWERS = ANSWER_ACTIONS
"""The audit actions that answer a suspension."""
CANCEL_ACTIONS = ("interrupt", "rollback")
ENDED = ("success", "error", "interrupted", "timeout")


def resolve_durability(durability: Any = None, checkpoint_during: Any = None) -> str:
    """The durability mode of a run from what the client sent.

    ``durability`` wins when both are sent; ``checkpoint_during`` is the deprecated
    form (true -> ``async``, false -> ``exit``); neither -> the server default
    ``settings.CRIOGEN_CHECKPOINT_DURABILITY``. Raises InvalidArgument naming the field.
    """
    if durability is not None:
        return check_durability(durability, "durability")
    if checkpoint_during is not None:
        if not isinstance(checkpoint_during, bool):
            raise InvalidArgument(
                f"checkpoint_during is {checkpoint_during!r}; use true or false.",
                field="checkpoint_during",
            )
        return "async" if checkpoint_during else "exit"
    return check_durability(settings.CRIOGEN_CHECKPOINT_DURABILITY, "CRIOGEN_CHECKPOINT_DURABILITY")


def create_run(
    *,
    thread_id: str | None,
    assistant_id: str,
    input: Any = None,
    command: Any = None,
    checkpoint_id: str | None = None,
    checkpoint: Any = None,
    durability: Any = None,
    checkpoint_during: Any = None,
    multitask_strategy: str = "enqueue",
    metadata: Any = None,
    config: Any = None,
    context: Any = None,
    webhook: str | None = None,
    if_not_exists: str = "reject",
    stream_mode: Any = None,
    stream_subgraphs: bool = False,
    stream_resumable: bool = False,
    interrupt_before: Any = None,
    interrupt_after: Any = None,
    owner: Any = None,
    action: str | None = None,
    by: str | None = None,
    door: str = "api",
    expected: str | None = None,
    decider: Decider | None = None,
    after_seconds: Any = None,
    run_id: uuid.UUID | None = None,
    _seen: _Seen | None = None,
) -> Run:
    """Create a run ``pending`` and have it executed once the transaction commits.

    Args:
        thread_id: the thread to run on; None for a stateless run (a new thread).
        assistant_id: an assistant's UUID, or a graph id (its default assistant).
        input: JSON object merged into the state (a new turn).
        command: ``{"resume": value}`` to answer the thread's suspension;
            ``{"goto": "__end__"}`` resolves it without running what waited;
            ``{"goto": node}`` (workflows) continues from that node instead.
        checkpoint_id / checkpoint: start from this earlier checkpoint (a fork);
            ``checkpoint["checkpoint_id"]`` wins over ``checkpoint_id``.
        durability / checkpoint_during: see :func:`resolve_durability`.
        multitask_strategy: ``enqueue``, ``reject``, ``interrupt`` or ``rollback``.
        if_not_exists: ``reject`` (unknown thread -> ThreadNotFound) or ``create``.
        webhook: an http(s) URL the ended run is POSTed to (see criogen.outbound).
        interrupt_before / interrupt_after: breakpoints, a list of the workflow's node
            names or ``"*"`` (default: the assistant's ``config`` keys of that name);
            the run stops before / after them (see :func:`_check_breakpoints`).
        action: ``"retry"`` to continue the thread's failed or interrupted turn.
        by / door: who asks for the run and from where (the audit event of the
            answer or retry names them; the engine writes it with the checkpoint).
        expected: the head checkpoint the caller acted on (compare-and-set): if the
            thread moved on, AlreadyDecided (an answer that came second) or StaleHead,
            and nothing is written.
        decider: who answers, as the door authenticated them (None: a trusted door —
            Python, deadlines); an answer is refused with NotAllowedToDecide (403,
            audited) unless :func:`may_decide` says yes.
        stream_mode / stream_subgraphs / stream_resumable: how the run is streamed
            (kept on the run: a bridged LangGraph graph streams its own chunks in
            these modes, see criogen.langgraph.streams).
        run_id: the new run's id (a door that subscribes to its events before it
            exists); else a new UUID.
        after_seconds: a delayed run: no worker starts it before that many seconds
            from now (a non-negative integer; 0 or None: at once). It is ``pending``
            meanwhile, its thread busy, and a run queued on the thread after it runs
            after it (first in, first out).
        _seen: internal: what :func:`answer_thread` or :func:`retry_thread` already
            read of the thread.
    Raises:
        InvalidArgument (422, names the field), ThreadNotFound (404),
        CheckpointNotFound (404), GraphNotFound (404), ThreadBusy (409, strategy
        ``reject``), NotSuspended (409, a resume on a thread not waiting for input).
    """
    # What the checks before the transaction read of the thread (its row, its last
    # run's assistant), each read at most once whatever number of checks need it.
    seen = _seen if _seen is not None else _Seen(thread_id) if thread_id is not None else None
    assistant = (seen.known_assistant(assistant_id) if seen is not None else None) or (
        resolve_assistant(assistant_id=assistant_id)
    )
    mode = resolve_durability(durability, checkpoint_during)
    if multitask_strategy not in MULTITASK_STRATEGIES:
        raise InvalidArgument(
            f"multitask_strategy is {multitask_strategy!r}; use one of "
            f"{', '.join(MULTITASK_STRATEGIES)}.",
            field="multitask_strategy",
        )
    if if_not_exists not in ("reject", "create"):
        raise InvalidArgument(
            f"if_not_exists is {if_not_exists!r}; use 'reject' or 'create'.",
            field="if_not_exists",
        )
    if input is not None and not isinstance(input, dict):
        raise InvalidArgument("input must be a JSON object (or null).", field="input")
    _check_json(input, "input")
    resume = _check_command(command)
    if command is not None and input is not None:
        raise InvalidArgument("send either input or command, not both.", field="command")
    checkpoint_id = _check_checkpoint(checkpoint_id, checkpoint)
    for name, value in (("metadata", metadata), ("config", config), ("context", context)):
        if value is not None and not isinstance(value, dict):
            raise InvalidArgument(f"{name} must be a JSON object.", field=name)
        _check_json(value, name)
    if action not in (None, "retry"):
        raise InvalidArgument(f"action is {action!r}; only 'retry' exists.", field="action")
    check_door(door)
    # Its form only: the address is checked when the webhook is sent (criogen.outbound).
    webhook = check_webhook_url(webhook)
    delay = check_after_seconds(after_seconds)
    run_timeout = check_run_timeout(config)
    if run_timeout is None:
        run_timeout = check_run_timeout(assistant.config)

    if resume is not None and seen is not None:
        if decider is not None:
            _check_may_decide(decider, seen, by=by, door=door)
        if "resume" in command and seen.waits():
            # A bad answer (an edit that does not fit the tool, a missing decision) is a
            # 422 naming it now, before any run exists, not a run that fails later.
            get_graph(assistant.graph_id).thread(seen.thread_id).check_answer(command["resume"])
        if "resume" not in command:
            # Where the graph cannot go is a 422 whatever the thread's state.
            _check_goto(get_graph(assistant.graph_id).thread(seen.thread_id), command["goto"])
    update = (command or {}).get("update")
    if update is not None:
        if seen is None:
            raise InvalidArgument(
                "command.update needs a thread to update.", field="command.update"
            )
        if decider is not None and not decider.is_operator and resume is None:
            # (With a resume, the answer's check above has decided for this decider.)
            _check_may_decide(decider, seen, by=by, door=door)
        # command.update is the one update_state (audited, by the caller), applied
        # before the run: with a resume the run then answers the updated thread;
        # alone it changes the values and the thread keeps waiting.
        from criogen.services.threads import update_thread_state

        update_thread_state(thread_id=thread_id, values=update, by=by, door=door)

    breakpoints = _check_breakpoints(assistant, thread_id, interrupt_before, interrupt_after)
    run_id = run_id or uuid.uuid4()
    kwargs = {
        "config": config or {},
        "context": context or {},
        "stream_mode": stream_mode,
        "webhook": webhook,
    }
    if stream_subgraphs:
        kwargs["stream_subgraphs"] = True
    if stream_resumable:
        kwargs["stream_resumable"] = True
    if action:
        kwargs["action"] = action
    kwargs.update(breakpoints)
    # Who asks for the run, and from where: the runner hands them to the engine, which
    # writes the audit event (a turn's input, an answer, a retry) with its checkpoint.
    kwargs["actor"] = by
    kwargs["door"] = door
    if run_timeout is not None:
        kwargs[RUN_TIMEOUT_KEY] = run_timeout  # else the setting's, read when it runs
    row = {
        "run_id": run_id,
        "assistant": assistant,
        "graph_id": assistant.graph_id,
        "status": "pending",
        "input": input,
        "command": command,
        "checkpoint_id": checkpoint_id,
        "durability": mode,
        "multitask_strategy": multitask_strategy,
        "metadata": metadata or {},
        "kwargs": kwargs,
        "owner": owner if getattr(owner, "pk", None) is not None else None,
    }
    # LangGraph keeps the last assistant and graph on the thread's metadata.
    latest = {"assistant_id": str(assistant.assistant_id), "graph_id": assistant.graph_id}
    if (
        thread_id is not None
        and multitask_strategy == "enqueue"
        and expected is None
        and resume is None
        and checkpoint_id is None
        and not sealing()
    ):
        # The common case: a new turn queued on an existing thread. Nothing below reads
        # the thread's row or its active runs for it (no strategy to apply, no answer
        # or head to check), so the run and the thread's metadata are written in one
        # statement that locks the row first (None: not here; False: no such thread,
        # which the path below refuses or creates).
        check_thread_id(thread_id)
        created = timezone.now()
        run = Run(thread_id=thread_id, **row, **_times(created, delay))
        if insert_run(run, metadata=latest, updated_at=created):
            transaction.on_commit(lambda: _announce_and_enqueue(run))
            return run
    with transaction.atomic():
        # The thread's row, locked: runs created concurrently on one thread see each other.
        thread = _thread_for_run(thread_id, if_not_exists, owner, run_id)
        if thread.head_id and sealing():
            # A key that cannot read the thread must not seal a run row on it either (a
            # row no right key could read back): refuse now, nothing written.
            head = Checkpoint.objects.filter(pk=thread.head_id).values_list("body", flat=True)
            for body in head:
                open_sealed(body)
        active = list(
            Run.objects.filter(thread=thread, status__in=ACTIVE_RUN_STATUSES).order_by("created_at")
        )
        if multitask_strategy == "reject" and (active or thread.lease_alive):
            raise ThreadBusy(
                f"thread {thread.pk!r} has a run in progress; wait for it, or send "
                "multitask_strategy 'enqueue', 'interrupt' or 'rollback'.",
                thread_id=thread.pk,
            )
        answering = next((r for r in active if _answers(r.command)), None)
        if expected is not None and (thread.head_id != expected or answering is not None):
            _refuse_stale(thread, expected, answering)
        if resume is not None and answering is not None and multitask_strategy == "enqueue":
            # A run answering this suspension is already queued: a second answer would
            # reach a thread that is no longer waiting, so refuse it now, by name.
            raise _already_answered(thread, answering)
        if resume is not None and not active and thread.head_status != "suspended":
            last = Run.objects.filter(thread=thread).order_by("-created_at").first()
            if last is not None and _answers(last.command):
                # The answer that was first has already run: this one came too late for
                # the same suspension, and is refused as the queued case is, by name.
                raise _already_answered(thread, last)
            raise NotSuspended(
                f"thread {thread.pk!r} is not waiting for input (its head is "
                f"{thread.head_status or 'empty'}); there is nothing to resume.",
                thread_id=thread.pk,
            )
        if (
            checkpoint_id is not None
            and not Checkpoint.objects.filter(thread=thread, id=checkpoint_id).exists()
        ):
            raise CheckpointNotFound(
                f"thread {thread.pk!r} has no checkpoint {checkpoint_id}.",
                thread_id=thread.pk,
                checkpoint_id=checkpoint_id,
            )
        if multitask_strategy in CANCEL_ACTIONS:
            for other in active:
                _cancel(other, action=multitask_strategy, by=f"run:{run_id}")
        created = timezone.now()
        run = Run.objects.create(thread=thread, **row, **_times(created, delay))
        thread.metadata = {**(thread.metadata or {}), **latest}
        thread.updated_at = timezone.now()
        thread.save(update_fields=["metadata", "updated_at"])
        transaction.on_commit(lambda: _announce_and_enqueue(run))
    return run


@dataclass(frozen=True)
class Decider:
    """Who answers a suspension, as the door that authenticated them knows them."""

    user: Any
    """The Django user (None when authentication is off: an operator)."""
    is_operator: bool
    """Staff or ``criogen.operate``: operators decide every suspension."""


def deciders_of(assistant: Assistant) -> list[str]:
    """Who besides operators may answer the suspensions of ``assistant``'s threads:
    its ``metadata["deciders"]``, else ``settings.CRIOGEN_DECIDERS`` for its graph id
    (or ``"*"``). ``"owners"`` is the thread's owner; ``"group:NAME"`` members of that
    Django group."""
    own = (assistant.metadata or {}).get("deciders")
    if isinstance(own, list):
        return [str(rule) for rule in own]
    defaults = getattr(settings, "CRIOGEN_DECIDERS", {}) or {}
    rules = defaults.get(assistant.graph_id, defaults.get("*", []))
    return [str(rule) for rule in rules] if isinstance(rules, list) else []


def may_decide(decider: Decider, thread: Thread, assistant: Assistant) -> bool:
    """Whether ``decider`` may answer ``thread``'s suspension (and edit its calls)."""
    if decider.is_operator:
        return True
    user = decider.user
    if user is None or not getattr(user, "is_active", False):
        return False
    rules = deciders_of(assistant)
    if "owners" in rules and thread.owner_id is not None and thread.owner_id == user.pk:
        return True
    groups = [rule[len("group:") :] for rule in rules if rule.startswith("group:")]
    return bool(groups) and user.groups.filter(name__in=groups).exists()


def check_may_decide(decider: Decider, thread_id: str, *, by: str | None, door: str) -> None:
    """Refuse (NotAllowedToDecide, audited as ``decide_refused``) an answer from someone
    who may not decide the thread's suspension; the assistant that counts is the one
    whose run suspended (the thread's last), not the one the answer names."""
    _check_may_decide(decider, _Seen(thread_id), by=by, door=door)


def _check_may_decide(decider: Decider, seen: _Seen, *, by: str | None, door: str) -> None:
    """:func:`check_may_decide` on what ``seen`` has read of the thread (or reads now)."""
    thread = seen.thread
    if thread is None:
        return  # create_run answers ThreadNotFound
    assistant = seen.assistant()
    if may_decide(decider, thread, assistant):
        return
    thread_id = seen.thread_id
    storage().record_audit(
        "decide_refused",
        thread_id=thread_id,
        actor=by,
        door=door,
        details={"assistant_id": str(assistant.assistant_id), "head": thread.head_id},
    )
    raise NotAllowedToDecide(
        f"{by or 'you'} may not answer the suspensions of thread {thread_id!r}: only "
        "operators decide here (an assistant can let its threads' owners or named groups "
        "decide: metadata.deciders).",
        thread_id=thread_id,
    )


def _refuse_stale(thread: Thread, expected: str, answering: Run | None) -> NoReturn:
    """The thread is not at ``expected`` any more (or an answer to it is queued):
    AlreadyDecided naming who answered that suspension, else StaleHead."""
    if answering is not None:
        raise _already_answered(thread, answering)
    answer = (
        AuditEvent.objects.filter(thread_id=thread.pk, before=expected, action__in=ANSWERS)
        .order_by("created_at", "pk")
        .first()
    )
    if answer is not None:
        raise AlreadyDecided(
            f"thread {thread.pk!r} was already answered by {answer.actor or 'someone'}; "
            "nothing was changed.",
            thread_id=thread.pk,
            decided_by=answer.actor,
            decided_at=answer.created_at.isoformat(),
        )
    head = storage().head(thread.pk) if thread.head_id else None
    check_expected(thread.pk, head, expected)
    raise AssertionError("unreachable: the head differs from expected")


def _already_answered(thread: Thread, answering: Run) -> AlreadyDecided:
    """The error for a second answer to the suspension ``answering`` answered."""
    by = (
        (answering.kwargs or {}).get("actor")
        or (answering.metadata or {}).get("resumed_by")
        or "another client"
    )
    return AlreadyDecided(
        f"thread {thread.pk!r} was already answered by {by} (run "
        f"{answering.run_id}); nothing was changed.",
        thread_id=thread.pk,
        decided_by=by,
        decided_at=answering.created_at.isoformat(),
        run_id=str(answering.run_id),
    )


MAX_AFTER_SECONDS = 366 * 24 * 3600
"""The longest delay a run may ask for (beyond it, a date overflows long before)."""


def check_after_seconds(value: Any) -> int:
    """``after_seconds`` as a number of seconds (0 for None); InvalidArgument naming
    the field for anything but an integer from 0 to :data:`MAX_AFTER_SECONDS`
    (``5.0`` is 5, ``5.5`` is not)."""
    if value is None:
        return 0
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidArgument(
            f"after_seconds is {value!r}; use a whole number of seconds, 0 or more.",
            field="after_seconds",
        )
    if value > MAX_AFTER_SECONDS:
        raise InvalidArgument(
            f"after_seconds is {value}; at most {MAX_AFTER_SECONDS} (a year).",
            field="after_seconds",
        )
    return value


def _times(created: datetime, delay: int) -> dict[str, Any]:
    """A new run's times: created and updated now, not before ``delay`` seconds."""
    return {
        "created_at": created,
        "updated_at": created,
        "not_before": created + timedelta(seconds=delay) if delay else None,
    }


def _announce_and_enqueue(run: Run) -> None:
    events.run_changed(run_id=run.run_id, thread_id=run.thread_id, status="pending")
    try:
        dispatch.enqueue(run.run_id, at=run.not_before)
    except Exception:
        # The run is committed: the reaper restarts it once the broker is back, so the
        # caller gets its run instead of an error for a run that does exist.
        logger.exception("could not enqueue run %s; the reaper will retry", run.run_id)


def _thread_for_run(thread_id: str | None, if_not_exists: str, owner: Any, run_id: Any) -> Thread:
    """The run's thread, its row locked until the transaction ends (created first for a
    stateless run, or with ``if_not_exists="create"``)."""
    owner = owner if getattr(owner, "pk", None) is not None else None
    if thread_id is None:
        # A stateless run gets a thread of its own, marked so lists can hide it; the
        # new row is this transaction's alone until it commits.
        return Thread.objects.create(id=str(run_id), owner=owner, metadata={"stateless": True})
    check_thread_id(thread_id)
    locked = Thread.objects.select_for_update()
    thread = locked.filter(pk=thread_id).first()
    if thread is not None:
        return thread
    if if_not_exists == "create":
        Thread.objects.get_or_create(id=thread_id, defaults={"owner": owner})
        return locked.get(pk=thread_id)  # created here, or concurrently by another run
    raise ThreadNotFound(f"no thread {thread_id!r}.", thread_id=thread_id)


def _check_breakpoints(
    assistant: Assistant, thread_id: str | None, before: Any, after: Any
) -> dict[str, Any]:
    """The run's breakpoints, ``{"interrupt_before": [...], "interrupt_after": [...]}``
    (only those set), checked against the graph: a workflow's node names or ``"*"``;
    InvalidArgument naming the field for an unknown node (LangGraph's server ignores
    those) or a graph that has no breakpoints (agents pause with approvals)."""
    defaults = assistant.config or {}
    chosen = {
        "interrupt_before": before if before is not None else defaults.get("interrupt_before"),
        "interrupt_after": after if after is not None else defaults.get("interrupt_after"),
    }
    chosen = {k: v for k, v in chosen.items() if v not in (None, [])}
    if not chosen:
        return {}
    thread = get_graph(assistant.graph_id).thread(thread_id or "breakpoints")
    check = getattr(thread, "check_breakpoints", None)
    for field, nodes in chosen.items():
        if check is None:
            raise InvalidArgument(
                f"{field} is not supported for {assistant.graph_id!r}: an agent stops for a "
                "person at its approvals (approve=…), not at breakpoints.",
                field=field,
            )
        check(nodes, field)
    return chosen


def _check_json(value: Any, field: str) -> None:
    try:
        check_json(value, field)
    except Exception as exc:
        raise InvalidArgument(f"{field} is not plain JSON: {exc}", field=field) from exc


def _answers(command: Any) -> bool:
    """Whether a run's command answers the suspension (``resume`` or ``goto``)."""
    command = command or {}
    return "resume" in command or command.get("goto") is not None


def _check_goto(thread: Any, goto: Any) -> None:
    """InvalidArgument naming ``command.goto`` unless the graph can honour it."""
    check = getattr(thread, "check_goto", None)
    if check is None:
        if goto == "__end__":
            return  # every thread can resolve (ThreadBase.resolve)
        raise InvalidArgument(
            f"command.goto {goto!r}: this graph can only go to '__end__'.", field="command.goto"
        )
    try:
        check(goto)
    except InvalidArgument as exc:
        raise InvalidArgument(str(exc), field="command.goto") from None


def _check_command(command: Any) -> Any:
    """The command of a valid one that answers the suspension (``resume`` or ``goto``),
    or None: ``update`` (a JSON object, applied first), ``resume`` and ``goto`` (a node
    name, ``"__end__"`` to resolve) are supported."""
    if command is None:
        return None
    if not isinstance(command, dict) or not ({"resume", "update", "goto"} & set(command)):
        raise InvalidArgument(
            'command must be {"resume": value}, {"goto": node} and/or {"update": {...}}; '
            "other commands are not supported.",
            field="command",
        )
    unsupported = sorted(
        k for k, v in command.items() if k not in ("resume", "update", "goto") and v is not None
    )
    if unsupported:
        raise InvalidArgument(
            f"command.{unsupported[0]} is not supported; send command.resume, command.goto "
            "and/or command.update.",
            field=f"command.{unsupported[0]}",
        )
    goto = command.get("goto")
    if goto is not None:
        if not isinstance(goto, str) or not goto:
            raise InvalidArgument(
                "command.goto must be one node name (or '__end__'); lists and Send objects "
                "are not supported.",
                field="command.goto",
            )
        if "resume" in command:
            raise InvalidArgument(
                "send either command.resume (answer the suspension) or command.goto (leave "
                "it), not both.",
                field="command.goto",
            )
    update = command.get("update")
    if update is not None and not isinstance(update, dict):
        raise InvalidArgument(
            "command.update must be a JSON object of the state keys to change.",
            field="command.update",
        )
    _check_json(update, "command.update")
    if goto is not None:
        return command
    if "resume" not in command:
        return None
    _check_json(command["resume"], "command.resume")
    return command


def _check_checkpoint(checkpoint_id: Any, checkpoint: Any) -> str | None:
    field = "checkpoint_id"
    if checkpoint is not None:
        if not isinstance(checkpoint, dict):
            raise InvalidArgument("checkpoint must be an object.", field="checkpoint")
        if checkpoint.get("checkpoint_id") is not None:
            checkpoint_id, field = checkpoint["checkpoint_id"], "checkpoint.checkpoint_id"
    if checkpoint_id is None:
        return None
    try:
        return str(uuid.UUID(str(checkpoint_id)))
    except ValueError:
        raise InvalidArgument(f"{field} {checkpoint_id!r} is not a UUID.", field=field) from None


# -- waiting ---------------------------------------------------------------------------

_changed = threading.Condition()
_generation = 0


def _wake(event: dict[str, Any]) -> None:
    global _generation
    with _changed:
        _generation += 1
        _changed.notify_all()


events.add_run_listener(_wake)


def wait_run(*, run: Run, timeout: float | None = None) -> Run:
    """Block until ``run`` has ended (success, error, interrupted, timeout) or
    ``timeout`` seconds passed; return it refreshed.

    Runs executed in this process wake the waiter through their ``run.changed`` events;
    for runs on other processes (Celery) it re-reads the row with a backoff up to 1 s.
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    delay = 0.02
    while True:
        with _changed:
            seen = _generation
        run.refresh_from_db()
        if run.status in ENDED:
            return run
        remaining = None if deadline is None else deadline - time.monotonic()
        if remaining is not None and remaining <= 0:
            return run
        with _changed:
            if _generation == seen:
                _changed.wait(delay if remaining is None else min(delay, remaining))
        delay = min(delay * 2, 1.0)


# -- cancelling --------------------------------------------------------------------------


def cancel_run(
    *, run: Run, action: str = "interrupt", by: str | None = None, door: str = "api"
) -> Run:
    """Cancel ``run``: a pending one ends ``interrupted`` now; a running one stops
    before its next step (then ``interrupted``, its checkpoints kept for
    ``interrupt``, deleted for ``rollback``). ``cancelled_by`` records ``by``; one
    ``cancel`` audit event (``by``, ``door``) is written with the change.
    An ended run is returned unchanged (and nothing is audited). Raises
    InvalidArgument for another action or door.
    """
    if action not in CANCEL_ACTIONS:
        raise InvalidArgument(
            f"action is {action!r}; use 'interrupt' or 'rollback'.", field="action"
        )
    check_door(door)
    with transaction.atomic():
        if _cancel(run, action=action, by=by or "user") and run.thread_id is not None:
            storage().record_audit(
                "cancel",
                thread_id=run.thread_id,
                actor=by,
                door=door,
                details={"run_id": str(run.pk), "action": action},
            )
    run.refresh_from_db()
    return run


def _cancel(run: Run, *, action: str, by: str) -> bool:
    """Cancel inside the caller's transaction; effects after commit. True when the
    run was pending or running (and so is cancelled now)."""
    now = timezone.now()
    rows = Run.objects.filter(pk=run.pk, status="pending").update(
        status="interrupted",
        cancelled_by=by,
        cancel_action=action,
        ended_at=now,
        updated_at=now,
    )
    if rows == 1:
        thread_id = run.thread_id

        def after() -> None:
            events.run_changed(run_id=run.pk, thread_id=thread_id, status="interrupted")
            if thread_id is not None:
                dispatch.start_next(thread_id)

        transaction.on_commit(after)
        return True
    rows = Run.objects.filter(pk=run.pk, status="running", cancel_action__isnull=True).update(
        cancelled_by=by, cancel_action=action, updated_at=now
    )
    if rows == 1:
        transaction.on_commit(lambda: dispatch.stop(run.pk))
    return rows == 1


def cancel_active_runs(thread_id: str, *, by: str | None, door: str = "api") -> None:
    """Cancel the thread's pending and running runs (before deleting or pruning it)."""
    for run in Run.objects.filter(thread_id=thread_id, status__in=ACTIVE_RUN_STATUSES):
        cancel_run(run=run, action="interrupt", by=by, door=door)


def delete_run(*, run: Run) -> None:
    """Delete an ended run. Raises ThreadBusy (409) for a pending or running one:
    cancel it first."""
    if Run.objects.filter(pk=run.pk, status__in=ACTIVE_RUN_STATUSES).exists():
        raise ThreadBusy(
            f"run {run.pk} is {run.status}; cancel it before deleting it.",
            thread_id=run.thread_id or "",
            run_id=str(run.pk),
        )
    Run.objects.filter(pk=run.pk).delete()


# -- thread actions that start runs ----------------------------------------------------


_UNREAD: Any = object()


class _Seen:
    """A thread as the checks before :func:`create_run`'s transaction see it: its row
    and the assistant of its last run (the one whose run suspended), each read at most
    once, when a check first needs it."""

    def __init__(self, thread_id: str) -> None:
        self.thread_id = thread_id
        self._thread: Any = _UNREAD
        self._assistant: Assistant | None = None

    @property
    def thread(self) -> Thread | None:
        """The thread's row (None: there is no such thread)."""
        if self._thread is _UNREAD:
            self._thread = Thread.objects.filter(pk=self.thread_id).first()
        return self._thread  # type: ignore[no-any-return]

    def assistant(self) -> Assistant:
        """The assistant of the thread's last run, else the one its metadata names.
        Raises ThreadNotFound, or InvalidArgument when it never ran an assistant."""
        if self._assistant is None:
            self._assistant = self._read_assistant()
        return self._assistant

    def _read_assistant(self) -> Assistant:
        thread, thread_id = self.thread, self.thread_id
        if thread is None:
            raise ThreadNotFound(f"no thread {thread_id!r}.", thread_id=thread_id)
        last = (
            Run.objects.filter(thread_id=thread_id)
            .select_related("assistant")
            .order_by("-created_at")
            .first()
        )
        if last is not None:
            return last.assistant
        metadata = thread.metadata or {}
        known = metadata.get("assistant_id") or metadata.get("graph_id")
        if known:
            return resolve_assistant(assistant_id=str(known))
        raise InvalidArgument(
            f"thread {thread_id!r} has never run an assistant; start a run with assistant_id.",
            field="assistant_id",
        )

    def known_assistant(self, assistant_id: Any) -> Assistant | None:
        """The assistant already read, if ``assistant_id`` is its UUID (else None: the
        caller resolves ``assistant_id`` itself)."""
        if self._assistant is not None and str(self._assistant.assistant_id) == str(assistant_id):
            return self._assistant
        return None

    def waits(self) -> bool:
        """Whether the thread may be waiting for an answer: False only when its row,
        already read, says its head is not suspended (an answer's check would read the
        head to find it passes: the answer is refused by name under the lock instead)."""
        if self._thread is _UNREAD or self._thread is None:
            return True  # not read yet, or no row: the check reads the head itself
        return bool(self._thread.head_status == "suspended")


def _thread_assistant(thread_id: str) -> Assistant:
    """The assistant of the thread's last run (:meth:`_Seen.assistant`)."""
    return _Seen(thread_id).assistant()


def answer_thread(
    *,
    thread_id: str,
    value: Any,
    by: str | None,
    door: str,
    expected: str | None = None,
    metadata: dict[str, Any] | None = None,
    decider: Decider | None = None,
    goto: str | None = None,
) -> Run:
    """Answer the thread's suspension with ``value`` — the one way every door answers
    (dashboard, deadlines; the REST API's resume runs reach :func:`create_run` with
    the same arguments). A run with ``{"resume": value}`` on the thread's assistant;
    the engine records the decision and its audit event (``by``, ``door``) with the
    checkpoint that resumes the thread.

    ``expected``: the suspended checkpoint the caller answered; a second answer to it
    is refused with AlreadyDecided (naming who answered), a thread that moved on
    otherwise with StaleHead. Raises NotSuspended (409) when nothing waits.

    ``goto`` (instead of a value): ``"__end__"`` resolves the suspension without
    running what waited (audit action ``resolve``); a workflow's node continues from
    that node (``goto``). InvalidArgument naming ``command.goto`` when the graph
    cannot go there.
    """
    seen = _Seen(thread_id)
    return create_run(
        thread_id=thread_id,
        assistant_id=str(seen.assistant().assistant_id),
        command={"goto": goto} if goto is not None else {"resume": value},
        metadata={**(metadata or {}), "resumed_by": by} if by else metadata,
        by=by,
        door=door,
        expected=expected,
        decider=decider,
        _seen=seen,
    )


def resume_thread(*, thread_id: str, value: Any, by: str | None = None) -> Run:
    """Deprecated spelling of :func:`answer_thread` from Python (door ``python``)."""
    return answer_thread(thread_id=thread_id, value=value, by=by, door="python")


def retry_thread(
    *,
    thread_id: str,
    by: str | None = None,
    door: str = "python",
    expected: str | None = None,
) -> Run:
    """Continue the thread's failed or interrupted turn from its last checkpoint.
    Raises NothingToRetry (409) when its head is neither failed nor stopped mid-run,
    StaleHead when ``expected`` is given and the head moved on."""
    seen = _Seen(thread_id)
    assistant = seen.assistant()
    thread = seen.thread
    assert thread is not None  # else seen.assistant() raised ThreadNotFound
    if expected is not None and thread.head_id != expected:
        # The head the caller saw moved on (a second click once the first retry has
        # run): StaleHead names who moved it, before "nothing to retry" would.
        check_expected(thread_id, storage().head(thread_id), expected)
    busy = Run.objects.filter(thread_id=thread_id, status__in=ACTIVE_RUN_STATUSES).exists()
    if not busy and thread.head_status not in ("failed", "in_progress"):
        raise NothingToRetry(
            f"thread {thread_id!r} has no failed or interrupted turn to retry (its head is "
            f"{thread.head_status or 'empty'}).",
            thread_id=thread_id,
        )
    return create_run(
        thread_id=thread_id,
        assistant_id=str(assistant.assistant_id),
        metadata={"retried_by": by} if by else None,
        action="retry",
        by=by,
        door=door,
        expected=expected,
        _seen=seen,
    )
