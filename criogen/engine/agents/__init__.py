"""Agents: a model that calls tools in a loop, durably, on threads of checkpoints.

::

    agent = Agent(
        model=ScriptedModel([...]),            # or OpenAIChat("gpt-4o-mini")
        instructions="You are a support agent.",
        tools=[lookup_order, issue_refund],
        approve=["issue_refund"],              # names, or a callable(call, state) -> bool
        memory=Memory.by_state("user_id"),
        storage=Storage("sqlite://ops.db"),
    )
    t = agent.thread("ticket-7")
    reply = t.send("Refund order 42", user_id="42")
    if reply.status == "suspended":
        t.approve(by="alice")                  # or reject(reason) / decide({...}) / respond(text)

A run is a thread of the same engine as workflows (:class:`ActiveRun`: lease,
heartbeat, durability, checkpoint numbering). The state holds the transcript under
``messages`` (appended, so storage grows by the new messages only), the values passed
with ``send`` (overwritten), and the engine's counters under ``__criogen__``.

Checkpoints: ``input`` when a message (or a decision) arrives; ``step`` after every
model call and every finished tool call; ``suspend`` before an approval-gated tool
runs (one interrupt listing every pending gated call); ``failure`` when the model
fails or ``max_steps`` is exceeded. ``next`` is ``["model"]`` or ``["tools"]``.

Approvals are server-side records (:class:`DecisionRecord`) bound to the thread, the
suspended checkpoint's version, the call id and a SHA-256 digest of the call's
canonical arguments, inserted in the same transaction as the checkpoint that resumes
the run. A decision for another version, an unknown call or other arguments fails
closed (:class:`StaleDecision`); a suspension already answered fails with
:class:`AlreadyDecided`.

The effect ledger: before an approved or side-effecting (not ``idempotent``) tool runs,
an intent row keyed by (thread, checkpoint of the model step, call id) is committed;
the outcome is committed when it returns. See ``docs/python-api.md`` for each crash
point.

The package, one module per reason to change:

- :mod:`.config`: :class:`Agent`, its options and approval rule;
- :mod:`.thread`: :class:`AgentThread`, the thread verbs (send, approve, reject…);
- :mod:`.reply`: :class:`Reply` and the shape of an agent's state;
- :mod:`.run`: what every run holds (options, lease, writes, failure);
- :mod:`.approvals`: suspending for a person and answering (digests, decisions);
- :mod:`.effects`: the effect ledger around each tool call;
- :mod:`.turn`: the turn loop (model → tools → model).
"""

from __future__ import annotations

# Besides __all__, the module's other public names ("X as X") stay importable from
# here, as they were before the package split.
from criogen.engine.agents.approvals import ALLOWED_DECISIONS as ALLOWED_DECISIONS
from criogen.engine.agents.approvals import args_digest
from criogen.engine.agents.config import DEADLINE_DEFAULTS as DEADLINE_DEFAULTS
from criogen.engine.agents.config import SUSPENSION_OPTIONS as SUSPENSION_OPTIONS
from criogen.engine.agents.config import Agent
from criogen.engine.agents.config import ApproveRule as ApproveRule
from criogen.engine.agents.config import Hook as Hook
from criogen.engine.agents.reply import MODEL as MODEL
from criogen.engine.agents.reply import RESERVED_KEY, Reply
from criogen.engine.agents.reply import TOOLS as TOOLS
from criogen.engine.agents.thread import AgentThread
from criogen.engine.errors import StaleDecision

__all__ = [
    "RESERVED_KEY",
    "Agent",
    "AgentThread",
    "Reply",
    "StaleDecision",
    "args_digest",
]
