"""Old path of :mod:`criogen.engine.active_run` (a run holding a thread: lease,
heartbeat, checkpoint writes), renamed so it is not mistaken for :mod:`criogen.runner`,
the server's run executor. Kept for one release."""

from __future__ import annotations

from criogen.engine.active_run import *  # noqa: F403 - this module is an alias
from criogen.engine.active_run import __all__ as __all__
