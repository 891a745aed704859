"""LangChain's human-in-the-loop requests as Criogen tool approvals.

LangChain's ``HumanInTheLoopMiddleware`` stops an agent before a gated tool call with
``interrupt(request)``, where ``request`` is::

    {"action_requests": [{"name", "args", "description"?}, ...],
     "review_configs": [{"action_name", "allowed_decisions", "args_schema"?}, ...]}

and expects the answer ``{"decisions": [...]}``, one decision per action request, in
order: ``{"type": "approve"}``, ``{"type": "edit", "edited_action": {"name", "args"}}``
``{"type": "reject", "message"?}`` or ``{"type": "respond", "message"}`` (the person
answers in the tool's place).

The bridge suspends the thread with that request as the suspension's payload (the
shape Criogen's own agents use, so the inbox and the dashboard show it as a tool
approval), ``reason="approval"`` and ``calls``: per action, the tool call's id (from
the agent's last message when it can be found), its name, arguments and the SHA-256
digest of the arguments (:func:`criogen.engine.agents.args_digest`). An answer is
checked against them before a run is made (:func:`check_response`): one decision per
action, a type the action's ``allowed_decisions`` lists, a ``digest`` (if given) equal
to the pending arguments', an edit that keeps the tool's name. What reaches LangGraph
is the response without Criogen's extras (:func:`langgraph_response`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from criogen.engine.agents import args_digest
from criogen.engine.errors import InvalidArgument, StaleDecision
from criogen.engine.state import check_json

__all__ = ["approval_calls", "check_response", "is_hitl_request", "langgraph_response"]

DECISIONS = ("approve", "edit", "reject", "respond")
"""The decision types LangChain's middleware knows."""


def is_hitl_request(value: Any) -> bool:
    """Whether an interrupt's value is a LangChain HITL request."""
    if not isinstance(value, Mapping):
        return False
    requests, configs = value.get("action_requests"), value.get("review_configs")
    if not isinstance(requests, list) or not requests or not isinstance(configs, list):
        return False
    return all(
        isinstance(r, Mapping)
        and isinstance(r.get("name"), str)
        and isinstance(r.get("args"), dict)
        for r in requests
    ) and all(
        isinstance(c, Mapping)
        and isinstance(c.get("action_name"), str)
        and isinstance(c.get("allowed_decisions"), list)
        for c in configs
    )


def approval_calls(
    request: Mapping[str, Any], values: Mapping[str, Any], fallback: str
) -> list[dict[str, Any]]:
    """The calls of an HITL request, each ``{"id", "name", "args", "digest"}``: the id
    of the tool call in the agent's last message with that name and those arguments,
    else ``{fallback}:{index}``."""
    pending = _last_tool_calls(values)
    calls = []
    for index, action in enumerate(request["action_requests"]):
        name, args = action["name"], action["args"]
        found = next((c for c in pending if c.get("name") == name and c.get("args") == args), None)
        if found is not None:
            pending.remove(found)
        call_id = (
            str(found["id"]) if found is not None and found.get("id") else f"{fallback}:{index}"
        )
        calls.append({"id": call_id, "name": name, "args": args, "digest": args_digest(args)})
    return calls


def _last_tool_calls(values: Mapping[str, Any]) -> list[dict[str, Any]]:
    messages = values.get("messages")
    if not isinstance(messages, list):
        return []
    for message in reversed(messages):
        calls = getattr(message, "tool_calls", None)
        if calls is None and isinstance(message, Mapping):
            calls = message.get("tool_calls")
        if calls:
            return [dict(c) for c in calls if isinstance(c, Mapping)]
    return []


def allowed_for(request: Mapping[str, Any]) -> list[list[str]]:
    """Per action request, the decisions its review config allows."""
    configs = {c["action_name"]: c for c in request["review_configs"]}
    return [
        [str(d) for d in configs.get(a["name"], {}).get("allowed_decisions", [])]
        for a in request["action_requests"]
    ]


def check_response(
    value: Any, interrupt: Mapping[str, Any], thread_id: str
) -> list[dict[str, Any]]:
    """The decisions of ``value`` (``{"decisions": [...]}``) for the pending approval
    ``interrupt`` (its payload the HITL request, its ``calls`` the digests), checked
    and in LangChain's shape.

    Raises:
        InvalidArgument: not ``{"decisions": [...]}``, not one decision per action, a
            type the action does not allow (named), an edit without ``args`` or that
            renames the tool.
        StaleDecision: a decision's ``digest`` is not the pending arguments'.
    """
    request = interrupt["payload"]
    calls = list(interrupt.get("calls") or [])
    field = "command.resume.decisions"
    if not isinstance(value, Mapping) or not isinstance(value.get("decisions"), list):
        raise InvalidArgument(
            'the answer to a tool approval is {"decisions": [...]}, one decision per '
            "action request.",
            field="command.resume",
        )
    raw = value["decisions"]
    actions = request["action_requests"]
    if len(raw) != len(actions):
        raise InvalidArgument(
            f"{len(actions)} action(s) wait for a decision and {len(raw)} decision(s) "
            "were given; send one per action, in order.",
            field=field,
        )
    out = []
    for index, (decision, action, allowed) in enumerate(
        zip(raw, actions, allowed_for(request), strict=True)
    ):
        where = f"{field}[{index}]"
        if isinstance(decision, str):
            decision = {"type": decision}
        if not isinstance(decision, Mapping):
            raise InvalidArgument(f"{where} must be an object with 'type'.", field=where)
        kind = decision.get("type")
        if kind not in allowed:
            raise InvalidArgument(
                f"{where}.type is {kind!r}, which {action['name']!r} does not allow here; "
                f"allowed: {', '.join(allowed) or 'none'}.",
                field=f"{where}.type",
            )
        digest = decision.get("digest")
        if digest is not None and index < len(calls) and digest != calls[index].get("digest"):
            raise StaleDecision(
                f"{where} was made for other arguments of {action['name']!r} than the ones "
                "pending (digest mismatch); reload the thread and decide again.",
                thread_id=thread_id,
                call_id=str(calls[index].get("id", index)),
            )
        out.append(_clean(kind, decision, action, where))
    return out


def _clean(
    kind: str, decision: Mapping[str, Any], action: Mapping[str, Any], where: str
) -> dict[str, Any]:
    """One decision as LangChain reads it (Criogen's ``digest`` left out)."""
    if kind == "approve":
        return {"type": "approve"}
    if kind in ("reject", "respond"):
        message = decision.get("message")
        if message is not None and not isinstance(message, str):
            raise InvalidArgument(f"{where}.message must be a string.", field=f"{where}.message")
        if kind == "respond" and not (message or "").strip():
            raise InvalidArgument(
                f"{where} responds in the tool's place but gives no 'message'.",
                field=f"{where}.message",
            )
        return {"type": kind} if message is None else {"type": kind, "message": message}
    if kind == "edit":
        edited = decision.get("edited_action")
        if not isinstance(edited, Mapping):
            # Criogen's own shorthand: {"type": "edit", "args": {...}}.
            edited = {"name": action["name"], "args": decision.get("args")}
        args = edited.get("args")
        if not isinstance(args, dict):
            raise InvalidArgument(
                f"{where} edits the call but gives no 'edited_action.args' object.",
                field=f"{where}.edited_action.args",
            )
        name = edited.get("name", action["name"])
        if name != action["name"]:
            raise InvalidArgument(
                f"{where} renames the tool ({name!r}); an edit may change the arguments only.",
                field=f"{where}.edited_action.name",
            )
        check_json(args, f"{where}.edited_action.args")
        return {"type": "edit", "edited_action": {"name": name, "args": dict(args)}}
    # A type this module does not know, yet listed by the graph's own review config:
    # passed on as given (the middleware decides).
    return {k: v for k, v in decision.items() if k != "digest"}


def langgraph_response(value: Any, interrupt: Mapping[str, Any], thread_id: str) -> dict[str, Any]:
    """The HITL response LangGraph resumes with: ``{"decisions": [...]}``."""
    return {"decisions": check_response(value, interrupt, thread_id)}
