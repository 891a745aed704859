"""``/ok`` and ``/info``: health and version (no auth, as on LangGraph Platform)."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Any

from django.conf import settings
from django.db import connection
from django.http import HttpRequest
from ninja import Router

from api.aio import db
from api.schemas import InfoOut, OkOut

router = Router(tags=["system"], auth=None)


def _version() -> str:
    try:
        return version("criogen")
    except PackageNotFoundError:
        return "0.0.0"


@router.get("/ok", response=OkOut, operation_id="ok", summary="Health check")
async def ok(request: HttpRequest) -> dict[str, Any]:
    """``{"ok": true}`` when the server and its database answer."""
    await db(_ping)
    return {"ok": True}


def _ping() -> None:
    with connection.cursor() as cur:
        cur.execute("SELECT 1")


@router.get("/info", response=InfoOut, operation_id="info", summary="Server information")
def info(request: HttpRequest) -> dict[str, Any]:
    """The Criogen version and the features this server has."""
    return {
        "version": _version(),
        "langgraph_py_version": None,
        "flags": {"assistants": True, "crons": False, "store": True, "langsmith": False},
        "metadata": {
            "server": "criogen",
            "auth": bool(getattr(settings, "CRIOGEN_AUTH_ENABLED", True)),
            "graphs": list(getattr(settings, "CRIOGEN_ASSISTANTS", {})),
        },
    }
