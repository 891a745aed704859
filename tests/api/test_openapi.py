"""The OpenAPI schema: the committed ``openapi.json`` is the live one (regenerate it
with ``make openapi-snapshot``), and ``/docs`` serves it."""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from tests.api.conftest import Server

SNAPSHOT = Path(__file__).resolve().parents[2] / "openapi.json"


def live_schema() -> dict[str, object]:
    from api.api import api

    return json.loads(json.dumps(api.get_openapi_schema(), default=str))


def test_the_committed_openapi_json_is_the_live_schema() -> None:
    committed = json.loads(SNAPSHOT.read_text())
    assert committed == live_schema(), "run `make openapi-snapshot` and commit openapi.json"


def test_the_server_serves_its_schema_and_docs(server: Server) -> None:
    schema = httpx.get(server.url + "/openapi.json").json()
    assert "/threads/{thread_id}/runs/stream" in schema["paths"]
    assert set(schema["components"]["securitySchemes"]) == {"BearerAuth", "ApiKeyAuth"}
    assert httpx.get(server.url + "/docs").status_code == 200
