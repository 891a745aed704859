"""Deprecated path of the model adapters: they live in :mod:`criogen.llms`.

In a Django project ``models.py`` means tables; the LLM adapters moved to ``criogen.llms``.
``from criogen.models import ScriptedModel, OpenAIChat`` keeps working, with a
DeprecationWarning, until the next release removes this module.
"""

from __future__ import annotations

import warnings

from criogen.llms import *  # noqa: F403 - this module is an alias
from criogen.llms import __all__ as __all__

# stacklevel=2 names the module that imports this one: the warnings machinery skips
# the import system's own frames.
warnings.warn(
    "criogen.models is deprecated and will be removed in the next release: "
    "import from criogen.llms instead (from criogen.llms import ScriptedModel, OpenAIChat).",
    DeprecationWarning,
    stacklevel=2,
)
