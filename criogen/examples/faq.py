"""``faq``: an agent that answers from a document collection.

It has one tool, ``search_faq``, a retrieval tool over the ``faq`` collection (the
database's full-text search: PostgreSQL's, or SQLite's FTS5). Without
``OPENAI_API_KEY`` a :class:`ScriptedModel` searches for the question's key word and
answers with the best passage, so the demo runs offline; with the key set the model is
``OpenAIChat`` (``CRIOGEN_MODEL``, default ``gpt-4o-mini``; ``OPENAI_BASE_URL`` for
another OpenAI-compatible server). :func:`load_documents` puts the example documents
in a storage (``make demo`` does it for the server's database).
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

from criogen import Agent, Collection
from criogen.llms import OpenAIChat, ScriptedModel

DOCUMENTS = {
    "refunds": "Refunds reach the customer's card within five working days of approval.",
    "shipping": "Orders ship within two days; shipping is free above 50 euros.",
    "returns": "Returns are accepted for 30 days; the label is in the parcel.",
    "warranty": "Every kettle and toaster has a two-year warranty against defects.",
}
STOPWORDS = {
    "what",
    "when",
    "where",
    "which",
    "how",
    "long",
    "does",
    "take",
    "with",
    "your",
    "have",
    "about",
    "there",
    "will",
    "would",
    "could",
    "should",
    "please",
    "tell",
}

faq = Collection("faq")
search_faq = faq.as_tool(name="search_faq")

INSTRUCTIONS = (
    "You answer customers' questions from the shop's FAQ. Search it with search_faq "
    "first and answer only from what it returns."
)


def load_documents(storage: Any) -> None:
    """Add (or replace) the example FAQ documents in ``storage``."""
    collection = faq.bind(storage)
    for doc_id, text in DOCUMENTS.items():
        collection.add(text, id=doc_id)


def respond(messages: list[dict[str, Any]]) -> dict[str, Any] | str:
    """The scripted model: search for the question's key word, answer from the result."""
    last = messages[-1]
    if last.get("type") == "human":
        words = re.findall(r"[a-z]{4,}", str(last.get("content")).lower())
        key = next((w for w in words if w not in STOPWORDS), "refunds")
        return {"tool_calls": [{"name": "search_faq", "args": {"query": key}}]}
    if last.get("type") == "tool":
        found = json.loads(last["content"]) if last.get("status") == "success" else []
        if not found:
            return "I could not find that in our FAQ; an operator will get back to you."
        return f"From our FAQ: {found[0]['text']}"
    return "What would you like to know?"


def make_model() -> Any:
    """``OpenAIChat`` when ``OPENAI_API_KEY`` is set, else a ``ScriptedModel``."""
    if os.environ.get("OPENAI_API_KEY"):
        return OpenAIChat(os.environ.get("CRIOGEN_MODEL", "gpt-4o-mini"))
    return ScriptedModel([respond] * 100_000)


agent = Agent(model=make_model(), instructions=INSTRUCTIONS, tools=[search_faq], name="faq")
