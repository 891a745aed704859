"""The background runner: the one entry point that executes a run, and how it is called.

:func:`execute_run` does one run from start to end status:

1. **Claim** it with a conditional ``UPDATE`` (``pending`` -> ``running``, or a
   ``running`` run whose worker's lease expired) that also requires that no other run on
   the thread is running or was queued earlier; ``rows != 1`` means someone else has it
   or it is not its turn, and the call returns ``None``.
2. **Run** the graph from :mod:`criogen.registry` with the run's durability: a resume
   command resumes the thread, ``retry`` retries it, ``checkpoint_id`` forks from that
   checkpoint first; a run claimed again after a crash continues from its own last
   checkpoint (``sync``/``async``) or starts over from the thread's state before it
   (``exit``, which wrote nothing). While it runs, a heartbeat thread renews the run's
   lease every third of ``CRIOGEN_LEASE_SECONDS``, also while a node takes long.
3. **Record** the outcome: completed -> ``success``; suspended -> ``interrupted``
   (input needed, ``cancelled_by`` empty); a node error -> ``error``; cancelled ->
   ``interrupted`` with ``cancelled_by`` set (for ``rollback`` the run's checkpoints are
   deleted first). A worker shutting down stops after the current step and hands the
   run back (``pending``); so does a run that lost its database connection or its
   thread's lease (counted in ``hand_backs``, at most :data:`MAX_HAND_BACKS`). A run
   never stays ``running`` after it ends.
4. **Start the next** pending run on the same thread (strategy ``enqueue``).

:func:`enqueue_run` dispatches by ``settings.CRIOGEN_RUNNER``: ``inprocess`` (a thread
pool in this process, ``CRIOGEN_INPROCESS_WORKERS`` threads) or ``celery`` (the task
``criogen.tasks.execute_run_task``). :func:`reap_expired` re-queues runs whose worker
died; it runs every ``CRIOGEN_REAP_SECONDS`` on a timer in the in-process runner and on
Celery beat, and in ``manage.py criogen_sweep``.

The modules, one reason to change each:

- :mod:`~criogen.runner.execute`: :func:`execute_run` (steps 1 to 4 above);
- :mod:`~criogen.runner.claim`: the claim statement;
- :mod:`~criogen.runner.stops`: cancels and shutdowns between two steps;
- :mod:`~criogen.runner.leases`: the lease heartbeat and the reaper;
- :mod:`~criogen.runner.handoff`: :func:`enqueue_run` (in-process or Celery);
- :mod:`~criogen.runner.inprocess`: the in-process pool and its timer;
- :mod:`~criogen.runner.base`: constants and this process's shared state.

This package is the runner :mod:`criogen.dispatch` hands committed runs to: the
``criogen.storage`` app registers it at start-up (``dispatch.register(criogen.runner)``),
so it offers :func:`enqueue_run`, :func:`request_stop` and :func:`start_next` here.
"""

from __future__ import annotations

# _claim, _claim_statements and _shutdown are reached by the runner's tests
# (tests/criogen/test_runner.py); they are shared objects, so changing them here
# changes them for the modules that use them.
from criogen.runner.base import HANDED_BACK, MAX_HAND_BACKS
from criogen.runner.base import _shutdown as _shutdown
from criogen.runner.claim import _claim as _claim
from criogen.runner.claim import _claim_statements as _claim_statements
from criogen.runner.execute import execute_run
from criogen.runner.handoff import enqueue_run, start_next
from criogen.runner.inprocess import drain, start_background
from criogen.runner.leases import reap_expired
from criogen.runner.stops import request_shutdown, request_stop

__all__ = [
    "HANDED_BACK",
    "MAX_HAND_BACKS",
    "drain",
    "enqueue_run",
    "execute_run",
    "reap_expired",
    "request_shutdown",
    "request_stop",
    "start_background",
    "start_next",
]
