"""Services: the only code that changes runs, assistants and threads.

The API, the dashboard and the Celery tasks call these (writes) and
:mod:`criogen.selectors` (reads); they never change models directly. Every function
takes keyword-only arguments and raises :class:`~criogen.CriogenError` subclasses
with a stable ``code`` on bad input.
"""

from __future__ import annotations
