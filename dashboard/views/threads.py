"""Threads: the searchable list, and one thread's timeline, state, diff and actions."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponse, QueryDict
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from criogen import Storage, registry
from criogen.engine.errors import CheckpointNotFound, CriogenError
from criogen.selectors import checkpoint_row, runs_for_thread
from criogen.selectors.timeline import edited_calls, timeline_events, timeline_page
from dashboard import actions
from dashboard.answers import (
    AnswerForm,
    answer_form,
    keep_typed,
    read_answer,
    read_state,
    state_form,
)
from dashboard.data import (
    STATUSES,
    TIMELINE_PAGE,
    BadFilter,
    InboxFilters,
    InboxItem,
    ThreadFilters,
    User,
    assistant_of,
    body_of,
    describe_interrupts,
    get_thread_for_user,
    state_diff,
    status_counts,
    threads_page,
    transcript,
)
from dashboard.forms import FormError, decisions_from, parse_json
from dashboard.views.claims import claim_context
from dashboard.views.common import HtmxHttpRequest, base_context, render_parts, require_operator

if TYPE_CHECKING:
    from criogen.storage.models import Thread


@require_GET
def home(request: HtmxHttpRequest) -> HttpResponse:
    """``/ui/``: the inbox is the landing page."""
    return redirect("dashboard:inbox")


@require_GET
@login_required
def threads(request: HtmxHttpRequest) -> HttpResponse:
    """Every thread the user may see, newest update first, searchable, keyset-paginated."""
    filters = ThreadFilters.from_query(request.GET)
    after = request.GET.get("after", "")
    context = base_context(request, "threads")
    try:
        rows, next_cursor = threads_page(request.user, filters, after=after)
        error = None
    except BadFilter as exc:
        rows, next_cursor, error = [], "", exc
    context.update(
        {
            "rows": rows,
            "next_cursor": next_cursor,
            "after": after,
            "filters": filters,
            "query": filters.as_query(),
            "filter_error": error,
            "counts": status_counts(request.user),
            "statuses": STATUSES,
        }
    )
    if request.htmx:
        return render(request, "dashboard/threads.html#thread-rows", context)
    return render(request, "dashboard/threads.html", context, status=422 if error else 200)


# -- one thread ------------------------------------------------------------------------------


def actions_context(user: User, thread: Thread, *, can_act: bool) -> dict[str, Any]:
    """What the actions partial needs: the waiting suspension, retry, and the runs."""
    head = checkpoint_row(thread_id=thread.pk, checkpoint_id=thread.head_id)
    body = body_of(head)
    waiting = None
    interrupts = list(body.get("interrupts") or [])
    # A breakpoint (interrupt_before / interrupt_after) waits with no interrupt: nothing
    # to answer, only to continue, like a thread a person paused.
    stopped_at = thread.head_status == "suspended" and head is not None and not interrupts
    if thread.head_status == "suspended" and head is not None and not stopped_at:
        kind, reason, payload, calls = describe_interrupts(interrupts)
        waiting = InboxItem(
            thread=thread,
            checkpoint_id=head.pk,
            version=head.version,
            waiting_since=head.created_at,
            assistant=assistant_of(thread),
            kind=kind,
            reason=reason,
            payload=payload,
            calls=calls,
            interrupts=interrupts,
        )
    unfinished = thread.head_status == "in_progress"
    # A person's fork is paused whatever the lease says: the rewind itself held the
    # thread a moment, and a live update rendered in that moment must not say "running".
    paused = paused_by_person(thread, head, body) if unfinished else None
    if stopped_at:
        paused = {"by": "", "breakpoint": list(body.get("next") or []), "at": head.created_at}
    interrupted = unfinished and paused is None and not thread.lease_alive
    can_edit_state = bool(thread.head_id) and not thread.lease_alive
    return {
        "thread": thread,
        "waiting": waiting,
        "answer": waiting_answer(waiting),
        "interrupted": interrupted,
        "paused": paused,
        "resolved": resolved_by_person(head, body) if thread.head_status == "completed" else None,
        "can_retry": thread.head_status == "failed" or interrupted,
        # The state can be edited whenever no run holds the thread.
        "can_edit_state": can_edit_state,
        "state_form": typed_state_form(thread) if can_act and can_edit_state else None,
        "head_error": body.get("error"),
        "can_act": can_act,
        "user": user,
    }


def typed_state_form(thread: Thread, state: dict[str, Any] | None = None) -> AnswerForm | None:
    """The form of the state schema the thread's workflow declares, filled with
    ``state`` (default: the head's); None when it declares none (the JSON box only)."""
    declared = registry.state_declaration(assistant_of(thread))
    if declared is None:
        return None
    schema, reducers = declared
    return state_form(schema, _head_state(thread) if state is None else state, reducers)


def _head_state(thread: Thread) -> dict[str, Any]:
    try:
        return dict(Storage.default().get_checkpoint(thread.pk, thread.head_id).state)
    except CheckpointNotFound:
        return {}


def resolved_by_person(head: Any, body: dict[str, Any]) -> dict[str, Any] | None:
    """Who closed the suspension at the head without running what waited (a goto
    ``__end__``: a completed ``fork`` with ``resolved_by``), and when; else None."""
    meta = body.get("metadata") or {}
    if head is None or head.source != "fork" or "resolved_by" not in meta:
        return None
    return {"by": str(meta.get("resolved_by") or ""), "at": head.created_at}


def paused_by_person(thread: Thread, head: Any, body: dict[str, Any]) -> dict[str, Any] | None:
    """Why an unfinished head has no run, when a person put it there: a rewind or a
    state edit (a ``fork`` checkpoint) that no run has taken up since. None for a
    crash: a run wrote the head (or took up the fork) and died."""
    if head is None:
        return None
    latest = runs_for_thread(thread_id=thread.pk, limit=1)
    last = latest[0] if latest else None
    if last is not None and last.status == "interrupted" and last.cancelled_by:
        # A person cancelled the run that was writing: a pause too.
        at = last.ended_at or head.created_at
        return {"by": last.cancelled_by, "cancelled": True, "at": at}
    if head.source != "fork":
        return None
    if last is not None and last.created_at > head.created_at:
        return None  # a run took the fork up and is gone: that is a crash
    meta = body.get("metadata") or {}
    return {
        "by": str(meta.get("actor") or ""),
        "rewound_to": meta.get("forked_version"),
        "edited": bool(meta.get("update")),
        "at": head.created_at,
    }


def waiting_answer(waiting: InboxItem | None) -> AnswerForm | None:
    """The typed form of a workflow's one pending suspension (None: an approval, or
    several suspensions pending, answered as JSON)."""
    if waiting is None or waiting.kind != "workflow" or len(waiting.interrupts) != 1:
        return None
    return answer_form(waiting.interrupts[0])


def timeline_context(thread: Thread, *, before: int | None, selected_id: str) -> dict[str, Any]:
    """What the timeline partial needs (one query for up to 200 checkpoints)."""
    # One query for the page, what wrote each checkpoint and whether a person's action
    # did; a second only when some did.
    entries, steps, audited = timeline_page(thread.pk, before=before, size=TIMELINE_PAGE)
    older = (
        entries[-1].version if len(entries) == TIMELINE_PAGE and entries[-1].version > 1 else None
    )
    return {
        "entries": entries,
        # What wrote each checkpoint and how long it took; the decisions in between.
        "steps": steps,
        "events": timeline_events(thread.pk, audited),
        "older": older,
        "before": before,
        "selected_id": selected_id,
        # The thread's runs (newest ten) from the Run table, through the selectors.
        "runs": runs_for_thread(thread_id=thread.pk, limit=10),
        "assistant": assistant_of(thread),
        "langgraph_steps": langgraph_steps(thread),
    }


LANGGRAPH_STEPS = 50
"""LangGraph steps listed on a thread's page (newest first)."""


def langgraph_steps(thread: Thread) -> list[dict[str, Any]] | None:
    """A thread running a LangGraph graph: LangGraph's own steps, newest first, with
    the nodes each ran (the timeline lists the bridge's turns); None otherwise."""
    graph_id = assistant_of(thread)
    if not graph_id:
        return None
    from criogen.registry import get_graph

    try:
        graph = get_graph(graph_id)
    except CriogenError:
        return None
    if getattr(graph, "kind", None) != "langgraph":
        return None
    from criogen.langgraph.states import step_rows

    return step_rows(graph.compiled, thread.pk, limit=LANGGRAPH_STEPS)


def panel_context(thread: Thread, checkpoint_id: str) -> dict[str, Any]:
    """The state at one checkpoint, its diff to its parent, and its transcript."""
    if not checkpoint_id:
        return {"selected": None}
    storage = Storage.default()
    try:
        selected = storage.get_checkpoint(thread.pk, checkpoint_id)
    except CheckpointNotFound:
        raise Http404(f"Thread {thread.pk!r} has no checkpoint {checkpoint_id!r}.") from None
    parent = None
    if selected.parent_id:
        try:
            parent = storage.get_checkpoint(thread.pk, selected.parent_id)
        except CheckpointNotFound:
            parent = None
    messages_list = transcript(selected.state)
    if any(m["tool_calls"] for m in messages_list):
        # Next to a call a person edited: the arguments that actually ran (the model's
        # stay shown above them, and in the decision record).
        edited = edited_calls(thread.pk)
        for m in messages_list:
            m["tool_calls"] = [
                {**c, "ran": edited[c["id"]]} if c.get("id") in edited else c
                for c in m["tool_calls"]
            ]
    return {
        "selected": selected,
        "selected_id": selected.id,
        "parent": parent,
        "diff": state_diff(parent.state if parent else None, selected.state),
        "messages_list": messages_list,
    }


def _before(request: HtmxHttpRequest) -> int | None:
    raw = request.GET.get("before", "")
    return int(raw) if raw.isdigit() else None


@require_GET
@login_required
def thread(request: HtmxHttpRequest, thread_id: str) -> HttpResponse:
    """A thread's timeline (newest first), the selected checkpoint, and the actions."""
    t = get_thread_for_user(request.user, thread_id)
    at = request.GET.get("at", "") or t.head_id
    context = base_context(request, "threads")
    context.update(actions_context(request.user, t, can_act=context["can_act"]))
    context.update(timeline_context(t, before=_before(request), selected_id=at))
    context.update(panel_context(t, at))
    context.update(claim_context(request.user, t))
    return render(request, "dashboard/thread.html", context)


@require_GET
@login_required
def checkpoint(request: HtmxHttpRequest, thread_id: str, checkpoint_id: str) -> HttpResponse:
    """One checkpoint's state, diff and transcript: the panel (htmx) or the whole page."""
    t = get_thread_for_user(request.user, thread_id)
    if not request.htmx:
        return redirect(f"{request.path.split('/checkpoints/')[0]}/?at={checkpoint_id}")
    context = base_context(request, "threads")
    context["thread"] = t
    context.update(panel_context(t, checkpoint_id))
    return render(request, "dashboard/thread.html#panel", context)


@require_GET
@login_required
def rewind_confirm(request: HtmxHttpRequest, thread_id: str, checkpoint_id: str) -> HttpResponse:
    """Ask before rewinding: what a fork does, and a button to do it."""
    require_operator(request)
    t = get_thread_for_user(request.user, thread_id)
    target = checkpoint_row(thread_id=t.pk, checkpoint_id=checkpoint_id)
    if target is None:
        raise Http404(f"Thread {t.pk!r} has no checkpoint {checkpoint_id!r}.")
    context = base_context(request, "threads")
    context.update({"thread": t, "rewind_target": target})
    if request.htmx:
        return render(request, "dashboard/thread.html#panel", context)
    context.update(actions_context(request.user, t, can_act=context["can_act"]))
    context.update(timeline_context(t, before=None, selected_id=checkpoint_id))
    return render(request, "dashboard/thread.html", context)


ACTIONS = (
    "approve",
    "reject",
    "edit",
    "decide",
    "choice",
    "resume",
    "retry",
    "continue",
    "rewind",
    "save_state",
    "cancel",
    "resolve",
)


@require_POST
@login_required
def thread_act(request: HtmxHttpRequest, thread_id: str) -> HttpResponse:
    """Apply one operator action, named by the submit button pressed.

    ``approve`` / ``reject`` (with ``reason``) / ``edit`` (``args-0``) / ``decide``
    (per call) answer an agent's approval request; ``resume`` answers a workflow with the
    JSON ``value``; ``resolve`` closes the suspension without running what waited;
    ``retry`` continues a failed or interrupted run; ``rewind`` forks at
    ``checkpoint``. ``expected`` is the suspension the operator saw: if the thread moved
    on, nothing changes and the page says who decided and when.

    With htmx the actions partial comes back (or the inbox list, when ``from=inbox``);
    without it, a redirect to the thread with the outcome as a message.
    """
    require_operator(request)
    t = get_thread_for_user(request.user, thread_id)
    button = next((name for name in ACTIONS if name in request.POST), "")
    expected = request.POST.get("expected", "")
    form_error: FormError | None = None
    outcome: actions.Outcome | None = None
    try:
        outcome = _apply(request, t, button, expected)
    except FormError as exc:
        form_error = exc
    status = 422 if form_error else 200
    t.refresh_from_db()
    if not request.htmx:
        if form_error:
            messages.error(request, form_error.message)
        elif outcome is not None:
            level = messages.SUCCESS if outcome.ok else messages.WARNING
            messages.add_message(request, level, outcome.message)
        if request.POST.get("from") == "inbox":
            return redirect("dashboard:inbox")
        return redirect("dashboard:thread", thread_id=t.pk)
    can_act = True
    if request.POST.get("from") == "inbox" and form_error:
        # Refused input in an inbox card: swap nothing, so the card keeps what was
        # typed; criogen.js shows a plain-text 422 next to the form that sent it.
        refused = HttpResponse(form_error.message, status=422, content_type="text/plain")
        refused["X-Criogen-Field"] = form_error.field  # criogen.js marks it aria-invalid
        return refused
    if request.POST.get("from") == "inbox":
        from dashboard.views.inbox import inbox_context

        # Re-render the list with the filters of the page the operator is on.
        current = request.htmx.current_url_abs_path or ""
        filters = InboxFilters.from_query(QueryDict(current.partition("?")[2]))
        context = inbox_context(request.user, filters, can_act=can_act)
        context["outcome"] = outcome or actions.Outcome(
            False, form_error.message if form_error else "", "error"
        )
        response = render_parts(
            request,
            [
                ("dashboard/inbox.html#inbox-list", context),
                ("dashboard/inbox.html#flash", context),
                ("base.html#nav-count", context),
            ],
        )
        response.status_code = status
        return response
    context = actions_context(request.user, t, can_act=can_act)
    if form_error and form_error.field == "state":
        context["typed_state"] = request.POST.get("state", "")
    if form_error and context["state_form"] is not None and "state_form" in request.POST:
        keep_typed(context["state_form"], request.POST, form_error)
    if form_error and context["answer"] is not None:
        keep_typed(context["answer"], request.POST, form_error)
    if form_error and context["waiting"] is not None:
        # Give back what the operator typed, so fixing one field does not lose the rest.
        for call in context["waiting"].calls:
            call.typed = request.POST.get(f"args-{call.index}", "")
            call.typed_decision = request.POST.get(f"decision-{call.index}", "")
            call.typed_reason = request.POST.get(f"reason-{call.index}", "")
    context.update(timeline_context(t, before=None, selected_id=t.head_id))
    context.update(
        {
            "outcome": outcome,
            "form_error": form_error,
            "edit_open": _edit_index(form_error),
            "resume_value": request.POST.get("value") if form_error else None,
            "typed_reason": request.POST.get("reason", "") if form_error else "",
        }
    )
    response = render_parts(
        request,
        [
            ("dashboard/thread.html#actions", context),
            ("dashboard/thread.html#timeline", context),
            ("dashboard/thread.html#thread-header", context),
        ],
    )
    response.status_code = status
    return response


def _edit_index(error: FormError | None) -> int | None:
    if error and error.field.startswith("args-") and error.field[5:].isdigit():
        return int(error.field[5:])
    return None


def _apply(request: HtmxHttpRequest, t: Thread, button: str, expected: str) -> actions.Outcome:
    user = request.user
    if button == "continue" and t.head_status == "suspended":
        # Stopped at a breakpoint: a resume with no value goes on from it.
        return actions.resume(thread=t, expected=expected, value=None, user=user)
    if button in ("retry", "continue"):
        # Continuing a paused fork and retrying a crash are one verb: a run goes on from
        # the head. Only the words differ.
        return actions.retry(
            thread=t, expected=expected or None, user=user, resumed=button == "continue"
        )
    if button == "save_state" and "state_form" in request.POST:
        # The typed form: the fields whose values differ from the head's state.
        state = _head_state(t)
        form = typed_state_form(t, state)
        if form is None:
            raise FormError("values", "This thread's workflow declares no state schema.")
        values = read_state(request.POST, form, state)
        if not values and t.head_id == expected:
            raise FormError("values", "Nothing changed: change a field, then save.")
        return actions.edit_state(thread=t, values=values, user=user, expected=expected or None)
    if button == "save_state":
        values = parse_json(request.POST.get("state", ""), "state")
        if not isinstance(values, dict):
            raise FormError("state", "state: write a JSON object of the keys to change.")
        try:
            return actions.edit_state(thread=t, values=values, user=user, expected=expected or None)
        except FormError as exc:
            # A key the declared schema refuses: said by the JSON box that sent it.
            raise FormError("state", exc.message) from None
    if button == "cancel":
        return actions.cancel(thread=t, run_id=request.POST.get("run", ""), user=user)
    if button == "rewind":
        target = request.POST.get("checkpoint", "")
        if not target:
            raise FormError("checkpoint", "Choose the checkpoint to rewind to.")
        return actions.rewind(thread=t, checkpoint_id=target, expected=expected or None, user=user)
    if button == "resolve":
        return actions.resolve(thread=t, expected=expected, user=user)
    if button in ("resume", "choice"):
        row = checkpoint_row(thread_id=t.pk, checkpoint_id=expected)
        interrupts = list(body_of(row).get("interrupts") or []) if row is not None else []
        form = answer_form(interrupts[0]) if len(interrupts) == 1 else None
        if form is not None and form.typed and t.head_id == expected:
            value = read_answer(request.POST, form, interrupts[0])
        else:
            value = parse_json(request.POST.get("value", ""), "value")
        return actions.resume(thread=t, expected=expected, value=value, user=user)
    if button in ("approve", "reject", "edit", "decide"):
        row = checkpoint_row(thread_id=t.pk, checkpoint_id=expected)
        if row is None:
            raise FormError("expected", "Which suspension are you deciding? Reload the page.")
        interrupts = list(body_of(row).get("interrupts") or [])
        kind, _, _, calls = describe_interrupts(interrupts)
        if kind != "approval":
            raise FormError("decision", "This thread waits for a value: use Resume.")
        if t.head_id != expected:
            # Decided already: say so before validating a form that no longer matters.
            return actions.decide(thread=t, expected=expected, decisions=[], user=user)
        decisions = decisions_from(request.POST, calls, button)
        return actions.decide(thread=t, expected=expected, decisions=decisions, user=user)
    raise FormError("action", "Unknown action: press one of the buttons on the page.")
