"""One router per REST resource; :mod:`api.api` mounts them."""

from __future__ import annotations
