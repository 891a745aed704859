"""The NinjaAPI: one router per resource, mounted at the site root (as the SDK calls it)."""

from __future__ import annotations

from ninja import NinjaAPI

from api.auth import auth_backends
from api.errors import register_exception_handlers
from api.parser import StrictJsonParser
from api.render import FastJsonRenderer
from api.routers import assistants, crons, runs, store, system, threads

api = NinjaAPI(
    title="Criogen API",
    version="1",
    description="LangGraph Platform compatible: threads, runs, assistants, store.",
    auth=auth_backends(),
    urls_namespace="api",
    # Swagger UI from django-ninja's bundled static files ("ninja" in INSTALLED_APPS), no CDN.
    docs_url="/docs",
    openapi_url="/openapi.json",
    parser=StrictJsonParser(),
    renderer=FastJsonRenderer(),
)
register_exception_handlers(api)
api.add_router("/", system.router)
api.add_router("/assistants", assistants.router)
api.add_router("/threads", threads.router)
# Crons first: "/threads/{id}/runs/crons" must win over "/threads/{id}/runs/{run_id}".
api.add_router("/threads", crons.thread_router)
api.add_router("/runs/crons", crons.router)
api.add_router("/threads", runs.thread_router)
api.add_router("/runs", runs.router)
api.add_router("/store", store.router)
