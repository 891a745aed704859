"""The requests every integration makes most, answered without Django's request cycle.

``GET /threads/{id}/state`` (no query but ``subgraphs``), ``POST /threads/{id}/history``
with a body of ``limit`` alone, ``POST /threads`` without ``supersteps``, ``POST
/threads/search`` and ``DELETE /threads/{id}`` are what ``langgraph_sdk``'s
``get_state``, ``get_history``, ``threads.create``, ``threads.search`` and
``threads.delete`` send. Through
Django's handler, the API's middleware, django-ninja and two of asgiref's thread hops
(the token, then the endpoint's job), each cost about 1 ms of the event loop's CPU for
database work of a few hundred microseconds (bench/NOTES.md, "The hot requests without
Django's request cycle"). :func:`serve` answers them in one job on the API's database
threads (the lockout, the token, the read or the write, the JSON) and writes the
response itself, with the headers the middleware chain writes on a 200 (a search's
``X-Pagination-Total`` and ``X-Pagination-Next`` where its endpoint sets them) or on a
delete's 204.

It only answers what the general path would answer ``200`` (``204``) the same way, and hands every
other request to the general path (the API's handler) untouched, its body replayed:

- a request the chain could refuse or redirect before the view: a host not in
  ``ALLOWED_HOSTS``, ``SECURE_SSL_REDIRECT`` on plain HTTP, ``PREPEND_WWW``,
  ``DISALLOWED_USER_AGENTS``, a body over ``CRIOGEN_MAX_BODY_BYTES``, a client IP over
  the bad-token limit (429), a CORS request (an ``Origin`` header);
- a site whose API middleware chain is not :data:`CHAIN` (the headers below are that
  chain's), or with ``CRIOGEN_AUTH_ENABLED`` off, or with async receivers of the
  request signals, or whose five endpoints take another auth or a throttle;
- a token in both headers or none, or not valid (counted as a failure by the general
  path, once), and a read that raises (a 404, a 422): the general path makes the read
  again and answers with its own error;
- a body the endpoint would refuse or read differently: a history body with another
  field than ``limit`` set or a ``limit`` not an integer; a create body that
  django-ninja's parser or ``ThreadCreateIn`` refuses, or with ``supersteps``; a search
  body the parser or ``ThreadSearchIn`` refuses, or with more than 10 ``extract`` paths,
  and a search the endpoint's own code refuses (an unknown ``select`` field, a bad
  ``extract`` path: it raises, and the general path searches again);
- a delete of a path that is not the thread's (``/threads/search``, ``count``,
  ``prune``: another endpoint's path).

A create or a delete is a write, so it is never made twice: when it raised (a 404, a 409,
a 422) or its answer could not be written here, the general path gets the call and its
outcome with the request (:data:`api.aio.AHEAD_SCOPE_KEY`) and its endpoint raises that
error, or answers as it would have, instead of writing again (and the token check's
:func:`api.aio.run_ahead` does not make the planned delete either).

The headers of a 200 are computed by the chain's own response hooks (Django's
``SecurityMiddleware``, ``XFrameOptionsMiddleware``, ``CommonMiddleware`` and
:class:`api.middleware.CorsMiddleware`) on an empty response, once per settings and
scheme, and reused with the body's length; ``request_started`` and ``request_finished``
are sent as :class:`criogen.asgi.ApiHandler` sends them. Tests compare the two paths'
statuses, headers and bodies, and count the creates and deletes
(tests/api/test_hot_reads.py).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple

import orjson
from django.conf import settings
from django.core import signals
from django.dispatch import Signal
from django.http import HttpRequest, HttpResponse
from django.http.request import split_domain_port, validate_host
from django.middleware import clickjacking, common, security

from api import aio
from api.auth import Principal, auth_failures_retry_after
from api.middleware import CorsMiddleware, api_middleware
from api.parser import StrictJsonParser
from api.render import CONTENT_TYPE, dumps
from api.schemas import ThreadCreateIn, ThreadSearchIn
from api.threads.shapes import state_dump, thread_dump
from criogen.services.tokens import authenticate_token

__all__ = ["CHAIN", "match", "serve", "sync_receivers_only"]

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

CHAIN = [
    "api.middleware.SecurityMiddleware",
    "api.middleware.CorsMiddleware",
    "api.middleware.BodySizeLimitMiddleware",
    "api.middleware.AuthFailureLimitMiddleware",
    "api.middleware.CommonMiddleware",
    "api.middleware.NulCharacterMiddleware",
    "api.middleware.XFrameOptionsMiddleware",
]
"""The API's middleware chain this module answers for (that of ``criogen/settings.py``)."""

_PATH = re.compile(r"/threads/([A-Za-z0-9._~:@+-]+)/(state|history)", re.ASCII)
"""The two paths, for thread ids of the characters a URL carries unescaped (others go
the general way)."""

_THREAD = re.compile(r"/threads/([A-Za-z0-9._~:@+-]+)", re.ASCII)
"""A thread's own path (a delete), for the same thread ids."""

_HISTORY_FILTERS = ("before", "metadata", "checkpoint", "select")

_served: dict[str, int] = {"hot": 0, "general": 0}
"""How many requests each path answered (read by the tests)."""


def _meta(headers: list[tuple[bytes, bytes]]) -> dict[str, str] | None:
    """The request's headers as Django's ``META`` names them (``HTTP_X_API_KEY``), or
    None for headers Django would merge or rename (a repeated name, an underscore)."""
    meta: dict[str, str] = {}
    for raw_name, raw_value in headers:
        name = raw_name.decode("latin1")
        if "_" in name:
            return None
        if name == "content-length":
            key = "CONTENT_LENGTH"
        elif name == "content-type":
            key = "CONTENT_TYPE"
        else:
            key = "HTTP_" + name.upper().replace("-", "_")
        if key in meta:
            return None
        meta[key] = raw_value.decode("latin1")
    return meta


def _secure(scope: Scope, meta: dict[str, str]) -> bool:
    """``request.is_secure()`` as Django answers it."""
    if settings.SECURE_PROXY_SSL_HEADER:
        header, secure_value = settings.SECURE_PROXY_SSL_HEADER
        value = meta.get(header)
        if value is not None:
            value, *_ = value.split(",", 1)
            return bool(value.strip() == secure_value)
    return bool(scope.get("scheme") == "https")


def _host_allowed(meta: dict[str, str]) -> bool:
    """``request.get_host()`` would not raise (the request's ``Host`` header)."""
    if settings.USE_X_FORWARDED_HOST and "HTTP_X_FORWARDED_HOST" in meta:
        return False
    host = meta.get("HTTP_HOST")
    if host is None:
        return False
    allowed = settings.ALLOWED_HOSTS
    if settings.DEBUG and not allowed:
        allowed = [".localhost", "127.0.0.1", "[::1]"]
    domain, _ = split_domain_port(host)
    return bool(domain) and validate_host(domain, allowed)


_chain_ok: tuple[object, bool] | None = None


def _site_ok() -> bool:
    """The site's settings are those this module answers for (checked once per
    settings object)."""
    global _chain_ok
    wrapped = getattr(settings, "_wrapped", None)
    known = _chain_ok
    if known is None or known[0] is not wrapped:
        ok = (
            api_middleware(list(settings.MIDDLEWARE)) == CHAIN
            and bool(getattr(settings, "CRIOGEN_AUTH_ENABLED", True))
            and not settings.PREPEND_WWW
            and not settings.DISALLOWED_USER_AGENTS
            and _endpoints_plain()
        )
        known = _chain_ok = (wrapped, ok)
    return known[1]


_ENDPOINTS = (
    ("GET", "/threads/t/state", "get_state"),
    ("POST", "/threads/t/history", "post_history"),
    ("POST", "/threads", "create_thread"),
    ("POST", "/threads/search", "search_threads"),
    ("DELETE", "/threads/t", "delete_thread"),
)


def _endpoints_plain() -> bool:
    """The five paths resolve to the endpoints this module answers for, which take the
    API's two token auths and no throttle (what the job does in their place). Read
    from django-ninja's operations; any doubt is False."""
    from django.urls import resolve

    from api.auth import ApiKeyAuth, BearerAuth

    try:
        for method, path, name in _ENDPOINTS:
            view = resolve(path).func
            cells = [cell.cell_contents for cell in view.__closure__ or ()]
            path_view = next(cell for cell in cells if hasattr(cell, "operations"))
            (operation,) = [op for op in path_view.operations if method in op.methods]
            auths = [type(auth) for auth in operation.auth_callbacks]
            if (
                operation.view_func.__name__ != name
                or auths != [BearerAuth, ApiKeyAuth]
                or operation.throttle_objects
            ):
                return False
    except Exception:  # noqa: BLE001 - another django-ninja, another urlconf: the general path
        return False
    return True


# -- the headers of a 200 ----------------------------------------------------------------


class _PlainRequest(HttpRequest):
    """A request of the API without an ``Origin``, for the response hooks."""

    def __init__(self, secure: bool) -> None:
        super().__init__()
        self.method = "GET"
        self.path = self.path_info = "/threads"
        self._secure = secure

    def is_secure(self) -> bool:
        return self._secure


_templates: dict[tuple[object, bool, str], list[tuple[bytes, bytes]]] = {}

_TOTAL, _NEXT = b"X-Pagination-Total", b"X-Pagination-Next"


def _response_headers(secure: bool, kind: str) -> list[tuple[bytes, bytes]]:
    """The headers the API's chain writes, in its order (the hooks run from the
    innermost middleware out), on the response of a ``kind`` request: a 200 JSON
    response (its ``Content-Length`` set with the body), with a search's two pagination
    headers as its endpoint sets them (their values set, or ``X-Pagination-Next``
    dropped, with the page), or a delete's empty 204 as django-ninja makes it."""
    kind = kind if kind in ("search", "delete") else "json"
    key = (getattr(settings, "_wrapped", None), secure, kind)
    template = _templates.get(key)
    if template is None:
        request = _PlainRequest(secure)
        status = 204 if kind == "delete" else 200
        response = HttpResponse(b"", content_type=CONTENT_TYPE, status=status)
        if kind == "search":
            response[_TOTAL.decode()] = "0"
            response[_NEXT.decode()] = "0"
        response = clickjacking.XFrameOptionsMiddleware(_never).process_response(request, response)
        response = common.CommonMiddleware(_never).process_response(request, response)
        response = CorsMiddleware(_never).add_response_headers(request, response)
        response = security.SecurityMiddleware(_never).process_response(request, response)
        template = [
            (name.encode("latin1"), str(value).encode("latin1")) for name, value in response.items()
        ]
        if len(_templates) > 16:
            _templates.clear()
        _templates[key] = template
    return template


def _never(request: HttpRequest) -> HttpResponse:
    raise AssertionError("the hooks are called directly")


# -- the job on the database threads -------------------------------------------------------


class _Peer:
    """What :func:`api.auth.client_ip` reads of a request."""

    def __init__(self, meta: dict[str, str]) -> None:
        self.META = meta


class _Read(NamedTuple):
    """What a request asks: ``kind`` ``state``, ``history`` (with ``limit``),
    ``create`` or ``search`` (with the validated ``payload``) or ``delete``."""

    kind: str
    thread_id: str = ""
    limit: int = 10
    payload: Any = None


Ahead = tuple[aio.Plan, tuple[bool, Any]]
"""A write's call and outcome, for the general path (:func:`api.aio.db_ahead`)."""


class _Page(NamedTuple):
    """A search's page: its JSON, how many threads match and the next page's offset
    (None: this is the last), as the endpoint's headers say them."""

    body: bytes
    total: int
    next: int | None


def _answer(
    meta: dict[str, str], token: str, asked: _Read, made: list[Ahead]
) -> bytes | _Page | None:
    """The body of the 200 (b"" for a delete's 204), or None for the general path: the
    lockout, the token, the read or the write, and the JSON, as the general path makes
    them. A write's call and outcome go to ``made`` before anything else can fail."""
    from api import threads
    from api.routers import threads as thread_routes

    if auth_failures_retry_after(_Peer(meta)) is not None:  # type: ignore[arg-type]
        return None
    owner = authenticate_token(token)
    if owner is None:
        return None
    who = Principal(user=owner.user, is_operator=owner.is_operator)
    if asked.kind == "state":
        return dumps(state_dump(threads.get_state(who, asked.thread_id, select=None)))
    if asked.kind == "history":
        states = threads.history(
            who,
            asked.thread_id,
            limit=asked.limit,
            before=None,
            metadata=None,
            select=None,
            at=None,
        )
        return dumps([state_dump(state) for state in states])
    if asked.kind == "search":
        payload = asked.payload
        out, total = thread_routes._search_threads(who, payload)
        body = dumps([thread_dump(item, unset=True) for item in out])
        more = payload.offset + len(out) < total
        return _Page(body, total, payload.offset + len(out) if more else None)
    # A write: whatever happens from here, the general path must not make it again; it
    # takes this outcome instead (its endpoint's db_ahead) if the answer is not sent here.
    plan: aio.Plan
    if asked.kind == "delete":
        plan = (threads.delete_thread, (who, asked.thread_id), {})
    else:
        plan = (thread_routes._create_thread, (who, asked.payload), {})
    fn, args, _ = plan
    try:
        made.append((plan, (True, fn(*args))))
    except Exception as exc:  # noqa: BLE001 - raised by the endpoint, where it raised it
        made.append((plan, (False, exc)))
        return None
    if asked.kind == "delete":
        return b""
    return dumps(thread_dump(made[0][1][1], unset=False))


def _job(
    meta: dict[str, str], token: str, asked: _Read
) -> tuple[bytes | _Page | None, Ahead | None]:
    made: list[Ahead] = []
    try:
        body = aio.run_job(_answer, (meta, token, asked, made), {})
    except Exception:  # noqa: BLE001 - the general path answers, with its own error
        body = None
    return body, (made[0] if made else None)


# -- the ASGI side -------------------------------------------------------------------------


def _token(meta: dict[str, str]) -> str | None:
    """The token of a request carrying exactly one of the two token headers."""
    bearer = meta.get("HTTP_AUTHORIZATION")
    key = meta.get("HTTP_X_API_KEY")
    if bearer is not None:
        if key is not None:
            return None
        scheme, _, token = bearer.partition(" ")
        return token if scheme.lower() == "bearer" and token.strip() else None
    return key if key is not None and key.strip() else None


def _limit(body: bytes, meta: dict[str, str]) -> int | None:
    """The ``limit`` of a history body that sets nothing else, else None."""
    if not meta.get("CONTENT_TYPE", "").startswith("application/json"):
        return None
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(data, dict) or not set(data) <= {"limit", *_HISTORY_FILTERS}:
        return None
    if any(data.get(k) is not None for k in _HISTORY_FILTERS):
        return None
    limit = data.get("limit", 10)
    return limit if type(limit) is int else None


_CREATE_FIELDS = frozenset({"thread_id", "metadata", "if_exists", "ttl"})
"""The fields of a create answered here (``supersteps`` go the general way)."""


class _Body:
    """What :class:`api.parser.StrictJsonParser` reads of a request."""

    def __init__(self, body: bytes) -> None:
        self.body = body


_SEARCH_FIELDS = frozenset(ThreadSearchIn.model_fields)
"""The fields of a search (every one the SDK sends; the endpoint's code reads them all)."""


def _payload(body: bytes, meta: dict[str, str], schema: Any, fields: frozenset[str]) -> Any:
    """The body of a create or a search as django-ninja reads and validates it, or None
    (nothing is written or read for a body that would be refused)."""
    if not meta.get("CONTENT_TYPE", "").startswith("application/json"):
        return None
    try:
        data = StrictJsonParser().parse_body(_Body(body))  # type: ignore[arg-type]
        if not isinstance(data, dict) or not set(data) <= fields:
            return None
        return schema.model_validate(data)
    except Exception:  # noqa: BLE001 - the general path refuses it with its own 4xx
        return None


_STATE_QUERIES = (b"", b"subgraphs=false", b"subgraphs=true")
"""The queries of ``get_state`` answered here: none, or the ``subgraphs`` flag the SDK
always sends (the endpoint validates it and reads nothing else from it)."""


def match(scope: Scope) -> bool:
    """``scope`` may be a hot read (the rest is checked by :func:`serve`)."""
    method = scope.get("method")
    if method not in ("GET", "POST", "DELETE") or scope.get("root_path"):
        return False
    query = scope.get("query_string", b"")
    path = scope.get("path", "")
    if method == "DELETE":
        return not query and _THREAD.fullmatch(path) is not None
    if path in ("/threads", "/threads/search"):
        return method == "POST" and not query
    found = _PATH.fullmatch(path)
    if found is None:
        return False
    if method == "GET":
        return found.group(2) == "state" and query in _STATE_QUERIES
    return found.group(2) == "history" and not query


async def serve(
    scope: Scope, receive: Receive, send: Send, general: Callable[..., Awaitable[None]]
) -> None:
    """Answer a request :func:`match` accepted, or hand it to ``general`` (the API's
    handler, :class:`criogen.asgi.ApiHandler`, the request signals' sender) with its
    body replayed."""
    body = b""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return  # as Django's handler: no response to a client that left
        body += message.get("body", b"")
        if not message.get("more_body", False):
            break
    sender = type(general)
    try:
        ready = _check(scope, body, sender)
    except Exception:  # noqa: BLE001 - an unusual request or setting: Django's own answer
        ready = None
    content, ahead = None, None
    if ready is not None:
        loop = asyncio.get_running_loop()
        content, ahead = await loop.run_in_executor(
            aio.pool(), _job, ready.meta, ready.token, ready.asked
        )
    if ready is None or content is None:
        _served["general"] += 1
        if ahead is not None:  # a create was made: its outcome, not a second create
            scope = {**scope, aio.AHEAD_SCOPE_KEY: ahead}
        await general(scope, _replay(body, receive), send)
        return
    _served["hot"] += 1
    # Both signals have only sync receivers (_check saw to it): sent on the loop, as
    # criogen.asgi sends them for the API's async views.
    signals.request_started.send(sender=sender, scope=scope)
    status, headers = (204 if ready.asked.kind == "delete" else 200), ready.headers
    if isinstance(content, _Page):
        headers = _paged(headers, content)
        content = content.body
    length = str(len(content)).encode()
    headers = [(n, length if n == b"Content-Length" else v) for n, v in headers]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": content})
    signals.request_finished.send(sender=sender)


def _paged(headers: list[tuple[bytes, bytes]], page: _Page) -> list[tuple[bytes, bytes]]:
    """A search's headers with its page's ``X-Pagination-Total`` and ``-Next`` (none
    after the last page), where its endpoint sets them."""
    out = []
    for name, value in headers:
        if name == _TOTAL:
            value = str(page.total).encode()
        elif name == _NEXT:
            if page.next is None:
                continue
            value = str(page.next).encode()
        out.append((name, value))
    return out


def sync_receivers_only(signal: Signal, sender: type) -> bool:
    """``signal`` has no async receivers for ``sender`` (so ``send`` may run on the loop)."""
    try:
        _, async_receivers = signal._live_receivers(sender)
    except Exception:  # noqa: BLE001 - another Django: take the safe path
        return False
    return not async_receivers


class _Ready(NamedTuple):
    """A request the checks let through: what it asks, with what it needs."""

    meta: dict[str, str]
    token: str
    asked: _Read
    headers: list[tuple[bytes, bytes]]
    """The answer's headers (its ``Content-Length`` is set with the body)."""


def _check(scope: Scope, body: bytes, sender: type) -> _Ready | None:
    """The request, if the checks let it through (None: the general path answers). Pure
    computation, before any database work: whatever it raises sends the request to the
    general path too."""
    meta = _meta(scope.get("headers", []))
    if meta is None or not _site_ok():
        return None
    if not (
        sync_receivers_only(signals.request_started, sender)
        and sync_receivers_only(signals.request_finished, sender)
    ):
        return None
    if "HTTP_ORIGIN" in meta or not _host_allowed(meta):
        return None
    secure = _secure(scope, meta)
    if settings.SECURE_SSL_REDIRECT and not secure:
        return None
    declared = meta.get("CONTENT_LENGTH", "")
    if declared and not declared.isdigit():
        return None
    limit_bytes = _max_body()
    if len(body) > limit_bytes or (declared and int(declared) > limit_bytes):
        return None
    token = _token(meta)
    asked = _asked(scope, body, meta)
    if token is None or asked is None:
        return None
    if client := scope.get("client"):
        meta["REMOTE_ADDR"] = str(client[0])
    return _Ready(meta, token, asked, _response_headers(secure, asked.kind))


def _asked(scope: Scope, body: bytes, meta: dict[str, str]) -> _Read | None:
    """What a request :func:`match` accepted asks, or None when its body is not one
    answered here."""
    path = scope["path"]
    if path == "/threads":
        payload = _payload(body, meta, ThreadCreateIn, _CREATE_FIELDS)
        return None if payload is None else _Read("create", payload=payload)
    if path == "/threads/search":
        payload = _payload(body, meta, ThreadSearchIn, _SEARCH_FIELDS)
        if payload is None or (payload.extract and len(payload.extract) > 10):
            return None  # refused by the endpoint before it searches
        return _Read("search", payload=payload)
    if scope["method"] == "DELETE":
        return _delete(path)
    thread_id = path[len("/threads/") : path.rindex("/")]
    if scope["method"] == "GET":
        return _Read("state", thread_id)
    limit = _limit(body, meta)
    return None if limit is None else _Read("history", thread_id, limit)


def _delete(path: str) -> _Read | None:
    """A delete of the thread at ``path``, if that path is the thread's (not
    ``/threads/search`` or another endpoint's)."""
    from django.urls import resolve

    thread_id = path[len("/threads/") :]
    found = resolve(path)
    if found.url_name != _thread_url_name() or found.kwargs != {"thread_id": thread_id}:
        return None
    return _Read("delete", thread_id)


def _thread_url_name() -> str | None:
    """The URL name of a thread's own path (django-ninja names it after its first
    operation)."""
    from django.urls import resolve

    return resolve("/threads/t").url_name


def _max_body() -> int:
    from api.middleware import DEFAULT_MAX_BODY_BYTES

    return int(getattr(settings, "CRIOGEN_MAX_BODY_BYTES", DEFAULT_MAX_BODY_BYTES))


def _replay(body: bytes, receive: Receive) -> Receive:
    """``receive`` that first gives back the body already read."""
    pending = [{"type": "http.request", "body": body, "more_body": False}]

    async def replay() -> dict[str, Any]:
        if pending:
            return pending.pop()
        return await receive()

    return replay
