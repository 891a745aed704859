"""Every error Criogen raises, each with a stable ``code`` (see :mod:`criogen.engine.errors`).

The public import path of the contract::

    from criogen.errors import CriogenError, ThreadSuspended, ThreadInterrupted, ThreadBusy
"""

from __future__ import annotations

from criogen.engine.errors import *  # noqa: F403 - this module is the public alias
from criogen.engine.errors import __all__ as __all__
