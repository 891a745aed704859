"""Outbound calls: the one sender every webhook and reminder e-mail leaves through.

Criogen calls out in five places: a run's ``webhook`` when the run ends (``run``, or
``cron`` for a run a cron started), a suspension's reminder to that webhook
(``reminder``), an assistant's notification webhook (``notify``,
:mod:`criogen.services.notifications`), and the reminder or notification e-mail
(``email``). Each goes through
:func:`send_webhook` or :func:`send_email`, which never raise and return at once (a
call made inside a transaction is queued when it commits, and dropped if it rolls
back): the call is delivered off the caller's thread, by a bounded pool of sender threads
(``CRIOGEN_OUTBOUND_WORKERS``; at most ``CRIOGEN_OUTBOUND_QUEUE`` calls wait) or, with
``CRIOGEN_RUNNER="celery"``, by the task ``criogen.tasks.deliver_outbound_task``.

The policy for a webhook:

- ``http`` and ``https`` URLs only, with a host (:func:`check_webhook_url`, which the
  services that create runs and crons call, so a malformed URL is a 422 there);
- the host is resolved when the sender connects, and **every** address it resolves to
  is checked (:func:`check_address`): private, loopback, link-local, unique-local,
  multicast, unspecified and reserved addresses, shared address space and the cloud
  metadata endpoints are refused, also when an IPv6 address embeds one (IPv4-mapped,
  NAT64, 6to4, Teredo). The socket then connects to a checked address itself, with the
  URL's host name as ``Host`` header and TLS server name, so a second DNS answer cannot
  swap in another address between the check and the connection;
- ``CRIOGEN_OUTBOUND_ALLOW`` lists what a deployment allows anyway: networks or
  addresses (``10.0.0.0/8``, ``127.0.0.1``) and host names (``hooks.internal``, or
  ``*.corp.example`` for its subdomains);
- no proxy from the environment, no redirects followed, the response body is not read;
- each attempt has a total deadline (``CRIOGEN_OUTBOUND_DEADLINE_SECONDS``) from the
  name lookup to the response's status line: every read and write of the socket waits
  at most for the time left, so a listener that trickles bytes is cut off at it;
- a timeout, a network error, 408, 429 and 5xx are retried up to
  ``CRIOGEN_OUTBOUND_ATTEMPTS`` attempts in all, after ``CRIOGEN_OUTBOUND_BACKOFF_SECONDS``
  × 2ⁿ⁻¹; a refusal by the policy and other statuses are not;
- each attempt is recorded as an :class:`~criogen.storage.models.OutboundAttempt` row
  (Django admin), with the URL stripped of its query and credentials; the periodic
  sweep deletes the rows older than ``CRIOGEN_OUTBOUND_RETENTION_SECONDS``
  (:func:`prune_attempts`).

The SMTP server of the e-mail is the deployment's own (Django's ``EMAIL_*`` settings),
so the address policy does not apply to it; the deadline, retries and records do.
"""

from __future__ import annotations

import base64
import ipaddress
import json
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any

import httpcore
import httpx
from django.conf import settings
from django.db import close_old_connections, transaction
from django.utils import timezone

from criogen.engine.errors import InvalidArgument, OutboundRefused

__all__ = [
    "BLOCKED_NETWORKS",
    "METADATA_NETWORKS",
    "OutboundRefused",
    "check_address",
    "check_webhook_url",
    "drain",
    "prune_attempts",
    "resolve_checked",
    "send_email",
    "send_webhook",
]

logger = logging.getLogger("criogen.outbound")

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], Sequence[str]]
"""``resolver(host, port)`` -> the addresses ``host`` resolves to (tests pass a stub)."""

METADATA_NETWORKS = tuple(
    ipaddress.ip_network(n)
    for n in (
        "169.254.169.254/32",  # AWS, GCP, Azure, OpenStack, DigitalOcean, Oracle…
        "169.254.170.2/32",  # AWS ECS task metadata
        "fd00:ec2::254/128",  # AWS IMDS over IPv6
        "100.100.100.200/32",  # Alibaba Cloud
        "192.0.0.192/32",  # Oracle Cloud (classic)
        "168.63.129.16/32",  # Azure's host endpoint (a public address)
    )
)
"""Cloud metadata endpoints: refused even where their range would not be."""

BLOCKED_NETWORKS = METADATA_NETWORKS + tuple(
    ipaddress.ip_network(n)
    for n in (
        "0.0.0.0/8",  # "this network"
        "100.64.0.0/10",  # shared address space (carrier-grade NAT)
        "192.0.0.0/24",  # IETF protocol assignments
        "198.18.0.0/15",  # benchmarking
        "240.0.0.0/4",  # reserved, and the broadcast address
        "64:ff9b:1::/48",  # local-use NAT64
        "fc00::/7",  # unique local
        "fe80::/10",  # link-local
        "fec0::/10",  # site-local (deprecated)
        "ff00::/8",  # multicast
    )
)
"""Ranges refused besides what the ``ipaddress`` properties already say."""

_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_HOST_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_:")
_RETRY_STATUSES = frozenset({408, 429})


# -- the policy ------------------------------------------------------------------------


def check_webhook_url(url: Any, *, field: str = "webhook") -> str | None:
    """``url`` if it is an http(s) URL with a host and a valid port; None for none
    (``None`` or ``""``). Raises InvalidArgument (422) naming ``field`` otherwise.

    Only the form is checked here; the address is checked when the call is sent
    (a name may resolve elsewhere by then).
    """
    if url is None or url == "":
        return None
    if not isinstance(url, str):
        raise InvalidArgument(f"{field} must be a URL string.", field=field)
    if len(url) > 2048:
        raise InvalidArgument(f"{field} is longer than 2048 characters.", field=field)
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, ValueError, TypeError) as exc:
        raise InvalidArgument(f"{field} {url!r} is not a valid URL: {exc}", field=field) from None
    if parsed.scheme not in ("http", "https"):
        raise InvalidArgument(f"{field} {url!r} must start with http:// or https://.", field=field)
    host = parsed.raw_host.decode("ascii", "replace")
    if not host or not set(host) <= _HOST_CHARS:
        raise InvalidArgument(f"{field} {url!r} has no valid host.", field=field)
    if parsed.port is not None and not 0 < parsed.port < 65536:
        raise InvalidArgument(f"{field} {url!r} has an invalid port.", field=field)
    return url


def _refusal(ip: IPAddress) -> str | None:
    """Why ``ip`` is refused, or None when it is a public address."""
    for net in METADATA_NETWORKS:
        if ip.version == net.version and ip in net:
            return "a cloud metadata address"
    if isinstance(ip, ipaddress.IPv6Address):
        # An IPv6 address that carries an IPv4 one reaches that one: check it too.
        embedded: list[ipaddress.IPv4Address] = []
        if ip.ipv4_mapped is not None:
            embedded.append(ip.ipv4_mapped)
        if ip in _NAT64:
            embedded.append(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
        if ip.sixtofour is not None:
            embedded.append(ip.sixtofour)
        if ip.teredo is not None:
            embedded.extend(ip.teredo)
        for inner in embedded:
            reason = _refusal(inner)
            if reason is not None:
                return f"{reason} (inside {ip})"
        if ip.ipv4_mapped is not None:
            return None
    checks = (
        ("is_loopback", "a loopback address"),
        ("is_link_local", "a link-local address"),
        ("is_multicast", "a multicast address"),
        ("is_unspecified", "the unspecified address"),
        ("is_private", "a private address"),
        ("is_reserved", "a reserved address"),
    )
    for prop, reason in checks:
        if getattr(ip, prop):
            return reason
    for net in BLOCKED_NETWORKS:
        if ip.version == net.version and ip in net:
            return f"an internal address ({net})"
    if not ip.is_global:
        return "not a global address"
    return None


@dataclass(frozen=True)
class _Allow:
    """``CRIOGEN_OUTBOUND_ALLOW``, parsed: networks, exact names, name suffixes."""

    networks: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = ()
    names: frozenset[str] = frozenset()
    suffixes: tuple[str, ...] = ()

    @classmethod
    def parse(cls, entries: Iterable[str] | str | None) -> _Allow:
        if isinstance(entries, str):
            entries = entries.split(",")
        networks, names, suffixes = [], set(), []
        for raw in entries or ():
            entry = raw.strip().lower().rstrip(".")
            if not entry:
                continue
            try:
                networks.append(ipaddress.ip_network(entry.strip("[]"), strict=False))
                continue
            except ValueError:
                pass
            if entry.startswith("*."):
                suffixes.append(entry[1:])
            else:
                names.add(entry)
        return cls(tuple(networks), frozenset(names), tuple(suffixes))

    def name(self, host: str) -> bool:
        host = host.lower().rstrip(".")
        return host in self.names or host.endswith(self.suffixes)

    def address(self, ip: IPAddress) -> bool:
        return any(ip.version == n.version and ip in n for n in self.networks)


def check_address(
    ip: IPAddress | str, *, allow: Iterable[str] | str | _Allow | None = None
) -> IPAddress:
    """``ip`` if the policy lets the sender connect to it, else raise OutboundRefused.

    ``allow`` is an allow-list in the form of ``CRIOGEN_OUTBOUND_ALLOW`` (default: the
    setting).
    """
    address = ipaddress.ip_address(ip) if isinstance(ip, str) else ip
    allowed = _allow(allow)
    if allowed.address(address):
        return address
    reason = _refusal(address)
    if reason is not None:
        raise OutboundRefused(
            f"{address} is {reason}; outbound calls to it are refused "
            "(CRIOGEN_OUTBOUND_ALLOW can allow it).",
            address=str(address),
            reason=reason,
        )
    return address


def resolve_checked(
    host: str,
    port: int,
    *,
    allow: Iterable[str] | str | None = None,
    resolver: Resolver | None = None,
    timeout: float | None = None,
) -> list[IPAddress]:
    """The addresses to connect to for ``host``, every one checked by the policy.

    An address literal is not looked up. A name is resolved (``resolver``, default
    the system's, within ``timeout`` seconds); if any address it resolves to is
    refused, the whole call is refused. A name on the allow-list is not checked.

    Raises:
        OutboundRefused: an address is refused, or the name resolves to nothing.
    """
    allowed = _allow(allow)
    host = host.strip("[]")
    try:
        return [check_address(ipaddress.ip_address(host), allow=allowed)]
    except ValueError:
        pass
    found = _lookup(host, port, resolver or _system_resolver, timeout)
    addresses = []
    for raw in found:
        address = ipaddress.ip_address(raw.split("%", 1)[0])  # drop an IPv6 zone
        if address not in addresses:
            addresses.append(address)
    if not addresses:
        raise OutboundRefused(f"{host!r} resolves to no address.", host=host)
    if allowed.name(host):
        return addresses
    try:
        for address in addresses:
            check_address(address, allow=allowed)
    except OutboundRefused as exc:
        raise OutboundRefused(
            f"{host!r} resolves to {exc.details['address']}, {exc.details['reason']}; "
            "outbound calls to it are refused (CRIOGEN_OUTBOUND_ALLOW can allow it).",
            host=host,
            **exc.details,
        ) from None
    return addresses


def _allow(allow: Iterable[str] | str | _Allow | None) -> _Allow:
    if isinstance(allow, _Allow):
        return allow
    if allow is None:
        allow = getattr(settings, "CRIOGEN_OUTBOUND_ALLOW", ())
    return _Allow.parse(allow)


def _system_resolver(host: str, port: int) -> list[str]:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


_dns_pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="criogen-outbound-dns")


def _lookup(host: str, port: int, resolver: Resolver, timeout: float | None) -> Sequence[str]:
    # getaddrinfo has no timeout of its own: wait for it on a helper thread, so a slow
    # name server cannot hold the attempt past its deadline.
    future = _dns_pool.submit(resolver, host, port)
    try:
        return future.result(timeout=timeout)
    except FutureTimeout:
        raise httpcore.ConnectTimeout(f"looking up {host!r} took past the deadline") from None
    except OSError as exc:
        raise httpcore.ConnectError(f"could not resolve {host!r}: {exc}") from None


# -- the connection: checked addresses, one deadline --------------------------------------


class _Deadline:
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.at = time.monotonic() + seconds

    def left(self, error: type[Exception], *, slack: float = 0.0) -> float:
        """The seconds left; raise ``error`` when none (or under ``slack``) are."""
        left = self.at - time.monotonic()
        if left <= slack:
            raise error(f"the attempt's deadline of {self.seconds:g} s passed")
        return left


class _DeadlineStream(httpcore.NetworkStream):
    """A socket stream whose every read and write waits at most for the time left."""

    _CHUNK = 16384

    def __init__(self, inner: httpcore.NetworkStream, deadline: _Deadline) -> None:
        self._inner = inner
        self._deadline = deadline

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        try:
            return self._inner.read(max_bytes, timeout=self._deadline.left(httpcore.ReadTimeout))
        except httpcore.ReadTimeout:
            # Say so when it was the deadline (a socket timeout may fire a hair early).
            self._deadline.left(httpcore.ReadTimeout, slack=0.05)
            raise

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        # In chunks: one write call waits per send, so a reader that takes one byte at
        # a time must not stretch a large body past the deadline.
        for start in range(0, len(buffer), self._CHUNK):
            chunk = buffer[start : start + self._CHUNK]
            try:
                self._inner.write(chunk, timeout=self._deadline.left(httpcore.WriteTimeout))
            except httpcore.WriteTimeout:
                self._deadline.left(httpcore.WriteTimeout, slack=0.05)
                raise

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self,
        ssl_context: Any,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        left = self._deadline.left(httpcore.ConnectTimeout)
        inner = self._inner.start_tls(ssl_context, server_hostname=server_hostname, timeout=left)
        return _DeadlineStream(inner, self._deadline)

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _GuardedBackend(httpcore.NetworkBackend):
    """httpcore's network backend that resolves the host itself, checks every address,
    and connects to a checked address (the request keeps the URL's host name for its
    ``Host`` header and TLS server name)."""

    def __init__(self, deadline: _Deadline, resolver: Resolver | None = None) -> None:
        self._deadline = deadline
        self._resolver = resolver
        self._inner = httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        left = self._deadline.left(httpcore.ConnectTimeout)
        addresses = resolve_checked(host, port, resolver=self._resolver, timeout=left)
        error: Exception | None = None
        for address in addresses:
            try:
                stream = self._inner.connect_tcp(
                    str(address),
                    port,
                    timeout=self._deadline.left(httpcore.ConnectTimeout),
                    local_address=local_address,
                    socket_options=socket_options,
                )
            except httpcore.ConnectError as exc:
                error = exc
                continue
            return _DeadlineStream(stream, self._deadline)
        assert error is not None
        raise error

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Any = None
    ) -> httpcore.NetworkStream:
        raise OutboundRefused("outbound calls to Unix sockets are refused.")

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


def _post_json(url: str, payload: Any, *, deadline: float, resolver: Resolver | None = None) -> int:
    """POST ``payload`` as JSON to ``url`` under the policy; return the status code.

    Raises OutboundRefused, httpcore.TimeoutException (the deadline passed) or another
    httpcore error.
    """
    check_webhook_url(url, field="url")
    parsed = httpx.URL(url)
    body = json.dumps(payload, default=str).encode()
    headers = [
        (b"Host", parsed.netloc),
        (b"Content-Type", b"application/json"),
        (b"User-Agent", b"criogen-outbound/1"),
    ]
    if parsed.userinfo:
        headers.append((b"Authorization", b"Basic " + base64.b64encode(parsed.userinfo)))
    target = httpcore.URL(
        scheme=parsed.raw_scheme, host=parsed.raw_host, port=parsed.port, target=parsed.raw_path
    )
    limit = _Deadline(deadline)
    timeouts = dict.fromkeys(("connect", "read", "write", "pool"), deadline)
    backend = _GuardedBackend(limit, resolver)
    # A pool of one connection per attempt: nothing is kept between attempts, and the
    # backend is the only way out (no proxy settings from the environment apply).
    with (
        httpcore.ConnectionPool(network_backend=backend, retries=0, max_connections=1) as pool,
        pool.stream(
            "POST", target, headers=headers, content=body, extensions={"timeout": timeouts}
        ) as response,
    ):
        # The status line is the answer; the body is not read.
        return int(response.status)


# -- the sender --------------------------------------------------------------------------


@dataclass
class _Call:
    """One outbound call and where it stands (JSON-plain: it is a Celery task's
    argument)."""

    kind: str
    url: str = ""
    payload: Any = None
    recipients: list[str] = field(default_factory=list)
    subject: str = ""
    body: str = ""
    run_id: str = ""
    thread_id: str = ""
    cron_id: str = ""
    attempt: int = 1


def send_webhook(
    *,
    kind: str,
    url: str,
    payload: Any,
    run_id: Any = "",
    thread_id: Any = "",
    cron_id: Any = "",
) -> None:
    """POST ``payload`` as JSON to ``url`` off this thread, under the outbound policy,
    with a deadline per attempt, retries and a record of each attempt. Inside a
    transaction, the call is queued when it commits (never, if it rolls back). Never
    raises: a malformed URL or any other trouble is recorded (and logged)."""
    call = _Call(
        kind=kind,
        url=str(url),
        payload=payload,
        run_id=str(run_id or ""),
        thread_id=str(thread_id or ""),
        cron_id=str(cron_id or ""),
    )
    _enqueue_on_commit(call)


def send_email(*, subject: str, body: str, recipients: Sequence[str], thread_id: Any = "") -> None:
    """Send an e-mail (Django's mail settings) off this thread, with a deadline per
    attempt, retries and a record of each attempt. Inside a transaction, the call is
    queued when it commits (never, if it rolls back). Never raises."""
    call = _Call(
        kind="email",
        recipients=list(recipients),
        subject=subject,
        body=body,
        thread_id=str(thread_id or ""),
    )
    _enqueue_on_commit(call)


def _enqueue_on_commit(call: _Call) -> None:
    # What the caller's transaction records (a notification's once-row and audit event)
    # and the call it asks for stand or fall together: the call leaves after the commit.
    transaction.on_commit(lambda: _enqueue(call))


def _enqueue(call: _Call, delay: float = 0.0) -> None:
    try:
        if settings.CRIOGEN_RUNNER == "celery":
            from criogen.celery import app

            # By name, as the runner sends runs: the tasks module sits above this one.
            app.send_task(
                "criogen.tasks.deliver_outbound_task",
                args=[asdict(call)],
                countdown=delay or None,
            )
            return
        _submit(call, delay)
    except Exception as exc:
        logger.exception("could not queue the %s call to %s", call.kind, _target(call))
        _record(call, "failed", error=f"not queued: {type(exc).__name__}: {exc}")


_pool: ThreadPoolExecutor | None = None
_lock = threading.Condition()
_pending = 0  # calls queued, in flight, or waiting for a retry (in this process)


def _submit(call: _Call, delay: float) -> None:
    global _pool, _pending
    with _lock:
        if delay == 0.0 and _pending >= max(1, int(settings.CRIOGEN_OUTBOUND_QUEUE)):
            full = True
        else:
            full = False
            if call.attempt == 1:
                _pending += 1
            if _pool is None:
                _pool = ThreadPoolExecutor(
                    max_workers=max(1, int(settings.CRIOGEN_OUTBOUND_WORKERS)),
                    thread_name_prefix="criogen-outbound",
                )
                # At exit, drop what is still queued rather than send it all first
                # (threading's exit hooks run before the pool's own joins its threads).
                register = getattr(threading, "_register_atexit", None)
                if register is not None:
                    register(_stop_sending)
            pool = _pool
    if full:
        logger.warning("the outbound queue is full; dropped the %s call", call.kind)
        _record(call, "dropped", error="the sender's queue was full (CRIOGEN_OUTBOUND_QUEUE)")
        if call.attempt > 1:
            _done()
        return
    if delay > 0:
        timer = threading.Timer(delay, _resubmit, args=(pool, call))
        timer.daemon = True
        timer.name = "criogen-outbound-retry"
        timer.start()
    else:
        _resubmit(pool, call)


def _stop_sending() -> None:
    """The process is exiting: cancel the calls still queued (in the in-process sender
    they are lost; an attempt in flight ends by its deadline)."""
    with _lock:
        pool = _pool
    if pool is not None:
        pool.shutdown(wait=False, cancel_futures=True)
    _dns_pool.shutdown(wait=False, cancel_futures=True)


def _resubmit(pool: ThreadPoolExecutor, call: _Call) -> None:
    try:
        pool.submit(_job, call)
    except RuntimeError:  # the pool was shut down: the process is exiting
        _done()


def _done() -> None:
    global _pending
    with _lock:
        _pending -= 1
        _lock.notify_all()


def _job(call: _Call) -> None:
    close_old_connections()
    try:
        retry_in = deliver(call)
    except Exception:
        logger.exception("the %s call to %s failed", call.kind, _target(call))
        retry_in = None
    finally:
        close_old_connections()
    if retry_in is None:
        _done()
    else:
        call.attempt += 1
        _submit(call, retry_in)


def drain(timeout: float | None = None) -> bool:
    """Wait until this process's sender has delivered or given up every call, retries
    included (tests, shutdown). Returns False if ``timeout`` passed first."""
    with _lock:
        return _lock.wait_for(lambda: _pending == 0, timeout=timeout)


def deliver(call: _Call) -> float | None:
    """Make one attempt of ``call`` and record it; return the delay before the next
    attempt, or None when there is none (delivered, refused, or out of attempts)."""
    deadline = float(settings.CRIOGEN_OUTBOUND_DEADLINE_SECONDS)
    started = time.monotonic()
    status: int | None = None
    error = ""
    retryable = False
    try:
        if call.kind == "email":
            _send_mail(call, deadline)
            outcome = "delivered"
        else:
            status = _post_json(call.url, call.payload, deadline=deadline)
            if 200 <= status < 300:
                outcome = "delivered"
            else:
                outcome, error = "failed", f"HTTP {status}"
                retryable = status >= 500 or status in _RETRY_STATUSES
    except (OutboundRefused, InvalidArgument) as exc:
        outcome, error = "refused", exc.message
    except httpcore.TimeoutException as exc:
        outcome, error, retryable = "failed", f"timeout: {exc}", True
    except (httpcore.NetworkError, httpcore.ProtocolError, OSError) as exc:
        outcome, error, retryable = "failed", f"{type(exc).__name__}: {exc}", True
    except Exception as exc:
        logger.exception("the %s call to %s raised", call.kind, _target(call))
        outcome, error = "failed", f"{type(exc).__name__}: {exc}"
    if call.kind == "email" and outcome == "failed":
        retryable = True  # the SMTP server's trouble is usually passing
    took = time.monotonic() - started
    retry_in: float | None = None
    if retryable and call.attempt < int(settings.CRIOGEN_OUTBOUND_ATTEMPTS):
        retry_in = float(settings.CRIOGEN_OUTBOUND_BACKOFF_SECONDS) * 2 ** (call.attempt - 1)
    _record(call, outcome, status=status, error=error, took=took, retry_in=retry_in)
    if outcome != "delivered":
        logger.warning(
            "%s call to %s, attempt %d: %s%s",
            call.kind,
            _target(call),
            call.attempt,
            error or outcome,
            f" (retry in {retry_in:g} s)" if retry_in is not None else "",
        )
    return retry_in


def _send_mail(call: _Call, deadline: float) -> None:
    from django.core.mail import get_connection, send_mail

    # The SMTP connection's timeout bounds each socket operation by the deadline.
    connection = get_connection(timeout=deadline)
    send_mail(
        call.subject,
        call.body,
        settings.DEFAULT_FROM_EMAIL,
        call.recipients,
        connection=connection,
    )


def _target(call: _Call) -> str:
    """What the record shows: the URL without query, fragment or credentials (they may
    hold secrets), or the e-mail's recipients."""
    if call.kind == "email":
        return ", ".join(call.recipients)[:2048]
    try:
        url = httpx.URL(call.url)
        port = f":{url.port}" if url.port else ""
        host = url.raw_host.decode("ascii", "replace")
        if ":" in host:
            host = f"[{host}]"
        return f"{url.scheme}://{host}{port}{url.path}"[:2048]
    except (httpx.InvalidURL, ValueError, TypeError):
        return call.url.split("?", 1)[0].split("#", 1)[0][:2048]


def _record(
    call: _Call,
    outcome: str,
    *,
    status: int | None = None,
    error: str = "",
    took: float = 0.0,
    retry_in: float | None = None,
) -> None:
    from criogen.storage.models import OutboundAttempt

    try:
        OutboundAttempt.objects.create(
            kind=call.kind,
            target=_target(call),
            attempt=call.attempt,
            outcome=outcome,
            status_code=status,
            error=error[:4000],
            duration_ms=round(took * 1000, 1),
            retry_at=timezone.now() + timedelta(seconds=retry_in) if retry_in is not None else None,
            run_id=call.run_id,
            thread_id=call.thread_id[:255],
            cron_id=call.cron_id,
        )
    except Exception:
        logger.exception("could not record the %s call to %s", call.kind, _target(call))


def prune_attempts(*, now: datetime | None = None, limit: int = 10000) -> int:
    """Delete the records of attempts made more than ``CRIOGEN_OUTBOUND_RETENTION_SECONDS``
    ago (0: keep them all), at most ``limit`` a call, oldest first; returns how many
    went. Every row is an attempt that ended (delivered, failed, refused, dropped): a
    call still being retried writes a new row for its next attempt."""
    from criogen.storage.models import OutboundAttempt

    retention = int(settings.CRIOGEN_OUTBOUND_RETENTION_SECONDS)
    if retention <= 0:
        return 0
    cutoff = (now or timezone.now()) - timedelta(seconds=retention)
    # By the created_at index, in bounded batches: a backlog of months is deleted over
    # several sweeps rather than in one long statement.
    old = list(
        OutboundAttempt.objects.filter(created_at__lt=cutoff)
        .order_by("created_at")
        .values_list("pk", flat=True)[:limit]
    )
    if not old:
        return 0
    deleted, _ = OutboundAttempt.objects.filter(pk__in=old).delete()
    return deleted


def deliver_data(data: dict[str, Any]) -> float | None:
    """One attempt of a call given as the JSON of the Celery task (see
    :func:`criogen.tasks.deliver_outbound_task`); returns the delay before the next,
    or None."""
    return deliver(_Call(**data))


def next_attempt(data: dict[str, Any]) -> dict[str, Any]:
    """The Celery task's argument for the next attempt of ``data``."""
    return {**data, "attempt": int(data.get("attempt", 1)) + 1}
