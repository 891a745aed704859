"""The REST API: LangGraph Platform compatible endpoints over django-ninja.

The official ``langgraph_sdk`` client works against it unchanged: threads, state,
history, runs (with Server-Sent Events), assistants and store, under the site root.
"""

from __future__ import annotations
