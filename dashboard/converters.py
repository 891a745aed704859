"""The thread id as one URL path segment.

Thread ids are any 1–255 characters, ``/`` included (``team/orders/42``). A path
segment cannot hold a ``/`` — percent-encoding does not help, the server decodes
``%2F`` before routing — so the dashboard's URLs spell ``/`` as ``~2F`` and ``~`` as
``~7E``: reversible for every id, and an id without either character reads as itself.
"""

from __future__ import annotations

import re

from django.urls import register_converter

__all__ = ["THREAD", "ThreadIdConverter", "decode_thread_id", "encode_thread_id"]

_ESCAPED = re.compile(r"~(2F|7E)")
_UNESCAPE = {"2F": "/", "7E": "~"}


def encode_thread_id(thread_id: str) -> str:
    """``thread_id`` as a path segment (no ``/``)."""
    return str(thread_id).replace("~", "~7E").replace("/", "~2F")


def decode_thread_id(segment: str) -> str:
    """The thread id a path segment from :func:`encode_thread_id` spells."""
    return _ESCAPED.sub(lambda m: _UNESCAPE[m.group(1)], segment)


class ThreadIdConverter:
    """``<thread:thread_id>`` in the dashboard's HTTP and WebSocket routes."""

    regex = "[^/]+"

    def to_python(self, value: str) -> str:
        return decode_thread_id(value)

    def to_url(self, value: str) -> str:
        return encode_thread_id(value)


THREAD = "thread"
"""The converter's name in routes; registered once, when this module is imported."""
register_converter(ThreadIdConverter, THREAD)
