"""LangGraph on Criogen: a checkpointer for LangGraph graphs, and their loading.

Needs the ``langgraph`` extra (``pip install "criogen[langgraph]"``). Importing this
package does not import LangGraph; :class:`CriogenSaver` does, on first use, and says
what to install when it is missing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from criogen.langgraph.saver import CriogenSaver

__all__ = ["INSTALL_HINT", "CriogenSaver", "langgraph_installed"]

INSTALL_HINT = 'LangGraph is not installed: pip install "criogen[langgraph]"'


def langgraph_installed() -> bool:
    """Whether LangGraph and its checkpoint package can be imported."""
    from importlib.util import find_spec

    try:
        return all(
            find_spec(name) is not None
            for name in ("langgraph.checkpoint.base", "langgraph.graph", "langchain_core")
        )
    except ModuleNotFoundError:  # a parent package is missing
        return False


def __getattr__(name: str) -> Any:
    if name == "CriogenSaver":
        if not langgraph_installed():
            raise ImportError(f"criogen.langgraph.CriogenSaver: {INSTALL_HINT}.")
        from criogen.langgraph.saver import CriogenSaver

        return CriogenSaver
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
