"""Django settings, read from the environment.

Every value has a development default so that ``make demo`` works on a fresh clone;
production sets ``DEBUG=false``, ``SECRET_KEY``, ``ALLOWED_HOSTS``, ``DATABASE_URL``
and ``REDIS_URL`` (see docs/deployment.md).
"""

from __future__ import annotations

import ipaddress
import os
import tempfile
from pathlib import Path
from typing import Any

from django.core.exceptions import ImproperlyConfigured

from api.cors import cors_settings
from criogen.storage.setup import database_config

BASE_DIR = Path(__file__).resolve().parent.parent


def envstr(name: str, default: str = "") -> str:
    """The environment variable ``name``, or ``default`` when unset or empty."""
    return os.environ.get(name) or default


def envbool(name: str, default: bool) -> bool:
    """``true/yes/on/1`` and ``false/no/off/0`` (any case); ``default`` when unset."""
    value = os.environ.get(name, "").strip().lower()
    if not value:
        return default
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ImproperlyConfigured(f"{name}={value!r} is not a boolean (use true or false).")


def envint(name: str, default: int) -> int:
    """An integer environment variable; ``default`` when unset."""
    value = os.environ.get(name, "").strip()
    try:
        return int(value) if value else default
    except ValueError:
        raise ImproperlyConfigured(f"{name}={value!r} is not an integer.") from None


def envfloat(name: str, default: float) -> float:
    """A number environment variable (``2.5``); ``default`` when unset."""
    value = os.environ.get(name, "").strip()
    try:
        return float(value) if value else default
    except ValueError:
        raise ImproperlyConfigured(f"{name}={value!r} is not a number.") from None


def envjson(name: str, default: Any) -> Any:
    """A JSON environment variable (``{"hitl": ["owners"]}``); ``default`` when unset."""
    import json

    value = os.environ.get(name, "").strip()
    try:
        return json.loads(value) if value else default
    except ValueError:
        raise ImproperlyConfigured(f"{name}={value!r} is not JSON.") from None


def envsecret(name: str, *, dev_default: str | None) -> str:
    """A secret: required unless a development default is allowed (DEBUG on)."""
    value = os.environ.get(name)
    if value:
        return value
    if dev_default is None:
        raise ImproperlyConfigured(f"set {name} in the environment (required when DEBUG is off).")
    return dev_default


DEBUG = envbool("DEBUG", True)
SECRET_KEY = envsecret(
    "SECRET_KEY", dev_default="criogen-development-only-key-do-not-use" if DEBUG else None
)
ALLOWED_HOSTS = [h for h in envstr("ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]").split(",") if h]
CSRF_TRUSTED_ORIGINS = [o for o in envstr("CSRF_TRUSTED_ORIGINS").split(",") if o]

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "corsheaders",  # its system checks validate the CORS_* settings below
    # Its templates and static files: the API docs' Swagger UI without a CDN.
    "ninja",
    "django_htmx",
    "template_partials",
    "criogen.storage",
    "api",
    "dashboard",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # CORS for the REST API's paths only: preflights are answered here, before the
    # guards below, authentication and routing; the guards' 413/429 get the headers.
    "api.middleware.CorsMiddleware",
    # Static files (WhiteNoise, async): Daphne and uvicorn serve none themselves.
    "criogen.static.StaticFilesMiddleware",
    # Refuse oversized bodies (413) before anything reads them.
    "api.middleware.BodySizeLimitMiddleware",
    # 429 for a client IP after too many bad API tokens (counted in api.auth).
    "api.middleware.AuthFailureLimitMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    # A NUL character in the path, query or form: 422 (API) / 400 page, never a 500.
    "api.middleware.NulCharacterMiddleware",
    "dashboard.middleware.NulCharacterPageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    # An htmx request whose session expired gets a full-page sign-in (HX-Redirect).
    "dashboard.middleware.HtmxLoginRedirectMiddleware",
]

ROOT_URLCONF = "criogen.urls"
WSGI_APPLICATION = "criogen.wsgi.application"
ASGI_APPLICATION = "criogen.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    }
]

DATABASES = {
    "default": database_config(
        envstr("DATABASE_URL", f"sqlite://{BASE_DIR / 'db.sqlite3'}"), base_dir=BASE_DIR
    )
}
DATABASES["default"]["CONN_MAX_AGE"] = envint("CONN_MAX_AGE", 60)
# The REST API does its database work on this many threads, each with its own
# connection (api.aio): the API's share of the database's connections.
CRIOGEN_API_THREADS = envint("CRIOGEN_API_THREADS", 8)
# How long (seconds) those threads keep their connections. They are a pool: with
# CONN_MAX_AGE=0 (a new connection per request) they would open one per query batch.
CRIOGEN_API_CONN_MAX_AGE = envint(
    "CRIOGEN_API_CONN_MAX_AGE", DATABASES["default"]["CONN_MAX_AGE"] or 60
)
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):
    # Tests use a file, not Django's shared-cache in-memory database: runs execute on
    # worker threads, and shared-cache table locks do not honour the busy timeout.
    DATABASES["default"]["TEST"] = {
        "NAME": str(Path(tempfile.gettempdir()) / f"criogen-test-{os.getpid()}.sqlite3"),
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = envstr("REDIS_URL")
if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [REDIS_URL]},
        }
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"
# Sign-out (the dashboard's, and the admin's) lands on the sign-in page with a message,
# not on the admin's "Logged out" page.
LOGOUT_REDIRECT_URL = LOGIN_URL

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
# ``manage.py collectstatic`` copies every static file here; the application serves them
# from here when DEBUG is off (criogen.static), with gzip copies made at collection.
STATIC_ROOT = Path(envstr("STATIC_ROOT", str(BASE_DIR / "var" / "static")))
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}

# Security: on by default outside DEBUG (``manage.py check --deploy`` stays clean).
SESSION_COOKIE_SECURE = envbool("SESSION_COOKIE_SECURE", not DEBUG)
CSRF_COOKIE_SECURE = envbool("CSRF_COOKIE_SECURE", not DEBUG)
SECURE_SSL_REDIRECT = envbool("SECURE_SSL_REDIRECT", not DEBUG)
# Load balancers probe the health endpoint over plain HTTP.
SECURE_REDIRECT_EXEMPT = [r"^ok$"]
SECURE_HSTS_SECONDS = envint("SECURE_HSTS_SECONDS", 0 if DEBUG else 31536000)
SECURE_HSTS_INCLUDE_SUBDOMAINS = not DEBUG
SECURE_HSTS_PRELOAD = envbool("SECURE_HSTS_PRELOAD", not DEBUG)
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
if envbool("BEHIND_PROXY", False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

# Criogen engine options.
CRIOGEN_CHECKPOINT_DURABILITY = envstr("CRIOGEN_CHECKPOINT_DURABILITY", "async")
# Recovery: a worker renews the lease of each run it executes (and of the run's
# thread) every third of CRIOGEN_LEASE_SECONDS, on a thread of its own; the reaper
# looks for expired leases every CRIOGEN_REAP_SECONDS. A dead worker's run is taken
# again at most lease + reap period after its last renewal: 6 + 2 = 8 s by default
# (docs/deployment.md, "Durability and recovery at each crash point").
CRIOGEN_LEASE_SECONDS = envint("CRIOGEN_LEASE_SECONDS", 6)
CRIOGEN_REAP_SECONDS = envint("CRIOGEN_REAP_SECONDS", 2)

# --- runner ---
# Where runs execute: "inprocess" (worker threads in the web process) or "celery".
CRIOGEN_RUNNER = envstr("CRIOGEN_RUNNER", "inprocess")
CRIOGEN_INPROCESS_WORKERS = envint("CRIOGEN_INPROCESS_WORKERS", 4)
# A run's time limit (seconds from when it first started; 0 turns it off): past it, the
# run ends with status "timeout" before its next step. An assistant's or a run's
# config.configurable.run_timeout_seconds overrides it (docs/rest-api.md, "Time limits").
CRIOGEN_RUN_TIMEOUT_SECONDS = envfloat("CRIOGEN_RUN_TIMEOUT_SECONDS", 86400.0)
# How often the in-process runner sweeps expired threads and fires deadlines (seconds;
# 0 turns its timer off, the reaper included).
CRIOGEN_SWEEP_SECONDS = envint("CRIOGEN_SWEEP_SECONDS", 60)
# Presence on the dashboard's thread pages (who else has it open): each page's socket
# says it is there this often; a page not heard from for 2.5 times as long is dropped
# (its server process died without saying goodbye).
CRIOGEN_PRESENCE_HEARTBEAT = envfloat("CRIOGEN_PRESENCE_HEARTBEAT", 10.0)
# Graph id -> "module.path:attribute" of a Workflow, CompiledWorkflow or Agent.
CRIOGEN_ASSISTANTS: dict[str, str] = {
    "steps": "criogen.examples.steps:workflow",
    "hitl": "criogen.examples.hitl:workflow",
    "support": "criogen.examples.support:agent",
    "review": "criogen.examples.review:workflow",
    "faq": "criogen.examples.faq:agent",
}
# Agents: the audit trail (who approved, rejected, rewound… what) and encryption at
# rest of states, checkpoints, memory and documents (a Fernet key; several,
# comma-separated, to rotate: the first encrypts). Read by Storage.default().
# The server audits by default: operators' decisions must be traceable.
CRIOGEN_AUDIT = envbool("CRIOGEN_AUDIT", True)
# Who may answer a suspension besides operators, per graph id ("*": every graph), for
# assistants whose metadata names no "deciders": ["owners"] (the thread's owner),
# ["group:NAME", …] (members of a Django group). Default: operators only.
CRIOGEN_DECIDERS = envjson("CRIOGEN_DECIDERS", {})
# Live thread streams (GET /threads/{id}/stream) one server process keeps open per user
# and per thread; more are a 429 too_many_streams (0: no limit).
CRIOGEN_STREAMS_PER_USER = envint("CRIOGEN_STREAMS_PER_USER", 20)
# A history page ends early once its states weigh this much (as JSON); 0: no limit.
CRIOGEN_MAX_HISTORY_BYTES = envint("CRIOGEN_MAX_HISTORY_BYTES", 32 * 1024 * 1024)
CRIOGEN_STREAMS_PER_THREAD = envint("CRIOGEN_STREAMS_PER_THREAD", 20)
# Resumable streams (stream_resumable: true) keep their events in the database table
# criogen_stream_event for this long after the run's last event (seconds); the sweep
# (CRIOGEN_SWEEP_SECONDS, Celery beat's criogen-sweep-threads, criogen_sweep) deletes them.
CRIOGEN_STREAM_RETENTION_SECONDS = envint("CRIOGEN_STREAM_RETENTION_SECONDS", 3600)
# A run or thread stream silent for this long sends a heartbeat comment (": heartbeat",
# every 5 s as LangGraph's server does), so that proxies keep the connection and clients
# can tell a dead one (seconds).
CRIOGEN_STREAM_HEARTBEAT_SECONDS = envint("CRIOGEN_STREAM_HEARTBEAT_SECONDS", 5)
CRIOGEN_ENCRYPTION_KEY = envstr("CRIOGEN_ENCRYPTION_KEY")
CELERY_BROKER_URL = envstr("CELERY_BROKER_URL", "redis://127.0.0.1:6379/0")
CELERY_RESULT_BACKEND = None  # run outcomes live in the Run table, not in Celery
CELERY_TASK_DEFAULT_QUEUE = envstr("CELERY_TASK_DEFAULT_QUEUE", "criogen")
# Acknowledge a task only when it has finished, and put it back when its worker dies,
# so a crash never loses a run; one task at a time per worker slot.
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# Redis re-delivers an unacknowledged task after this many seconds; the reaper
# (CRIOGEN_LEASE_SECONDS) usually re-queues a dead worker's run long before.
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": envint("CELERY_VISIBILITY_TIMEOUT", 3600)}
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
# Celery's Django fixup closes every database connection before and after each task
# unless this is set (then it closes them every this many tasks): a new PostgreSQL
# connection for every run, ~5 ms and a server process each. Tasks keep their
# connections as requests do instead: criogen.celery closes, around each task, those
# older than CONN_MAX_AGE or broken (bench/NOTES.md, "Celery workers").
CELERY_DB_REUSE_MAX = 1_000_000_000
CELERY_BEAT_SCHEDULE = {
    "criogen-reap-expired-runs": {
        "task": "criogen.tasks.reap_expired_task",
        "schedule": float(CRIOGEN_REAP_SECONDS),
        # A round that waited in the queue longer than the period (every worker slot
        # busy) is dropped: the next one does the same work.
        "options": {"expires": float(CRIOGEN_REAP_SECONDS)},
    },
    "criogen-sweep-threads": {
        "task": "criogen.tasks.sweep_threads_task",
        "schedule": float(envint("CRIOGEN_SWEEP_SECONDS", 60)),
    },
    "criogen-fire-deadlines": {
        "task": "criogen.tasks.fire_deadlines_task",
        "schedule": float(envint("CRIOGEN_SWEEP_SECONDS", 60)),
    },
}
# Mail, for reminders of suspensions nearing their deadline (Django's own settings).
EMAIL_BACKEND = envstr(
    "EMAIL_BACKEND",
    "django.core.mail.backends.console.EmailBackend"
    if DEBUG
    else "django.core.mail.backends.smtp.EmailBackend",
)
EMAIL_HOST = envstr("EMAIL_HOST", "localhost")
EMAIL_PORT = envint("EMAIL_PORT", 25)
EMAIL_HOST_USER = envstr("EMAIL_HOST_USER")
EMAIL_HOST_PASSWORD = envstr("EMAIL_HOST_PASSWORD")
EMAIL_USE_TLS = envbool("EMAIL_USE_TLS", False)
DEFAULT_FROM_EMAIL = envstr("DEFAULT_FROM_EMAIL", "criogen@localhost")
# --- end runner ---

# --- api ---
# API tokens are required unless this is off (local development only).
CRIOGEN_AUTH_ENABLED = envbool("CRIOGEN_AUTH_ENABLED", True)
# The highest ``limit`` a search accepts (threads, history); above it: 422.
CRIOGEN_MAX_SEARCH_LIMIT = envint("CRIOGEN_MAX_SEARCH_LIMIT", 1000)
# The largest request body (bytes) the API and dashboard accept; larger is a 413.
CRIOGEN_MAX_BODY_BYTES = envint("CRIOGEN_MAX_BODY_BYTES", 1024 * 1024)
# Django's own cap (a 400) must not trip before ours.
DATA_UPLOAD_MAX_MEMORY_SIZE = max(2621440, CRIOGEN_MAX_BODY_BYTES + 1)
# Bad API tokens per client IP per window (seconds) before 429. Counted in Django's cache:
# with several processes set a shared CACHES backend (e.g. Redis) so the limit holds.
CRIOGEN_AUTH_FAILURE_LIMIT = envint("CRIOGEN_AUTH_FAILURE_LIMIT", 20)
CRIOGEN_AUTH_FAILURE_WINDOW = envint("CRIOGEN_AUTH_FAILURE_WINDOW", 60)
# Proxies (IP addresses or CIDR networks, comma-separated) whose X-Forwarded-For names the
# client for that lockout; none by default: the client is the connection's peer. The ASGI
# server must not rewrite the peer itself (uvicorn: --no-proxy-headers; docs/deployment.md).
CRIOGEN_TRUSTED_PROXIES = [
    p.strip() for p in envstr("CRIOGEN_TRUSTED_PROXIES").split(",") if p.strip()
]
for _proxy in CRIOGEN_TRUSTED_PROXIES:
    try:
        ipaddress.ip_network(_proxy, strict=False)
    except ValueError:
        raise ImproperlyConfigured(
            f"CRIOGEN_TRUSTED_PROXIES: {_proxy!r} is not an IP address or network."
        ) from None
# Days a new API token lives unless it is given its own expiry; unset or 0: forever.
CRIOGEN_TOKEN_TTL_DAYS = envint("CRIOGEN_TOKEN_TTL_DAYS", 0) or None
# A default time to live (minutes) for threads created without one; unset: none.
# Threads that exist when it is set are not backfilled.
CRIOGEN_THREAD_TTL = envint("CRIOGEN_THREAD_TTL", 0) or None
CRIOGEN_THREAD_TTL_STRATEGY = envstr("CRIOGEN_THREAD_TTL_STRATEGY", "delete")
# --- outbound calls (webhooks, reminder e-mail; docs/security.md "Outbound calls") ---
# Networks, addresses and host names ("*.corp.example" for subdomains) that webhooks may
# reach although they are internal (loopback, private, link-local, metadata…), comma-separated.
CRIOGEN_OUTBOUND_ALLOW = [
    e.strip() for e in envstr("CRIOGEN_OUTBOUND_ALLOW").split(",") if e.strip()
]
# The total time of one attempt, from the name lookup to the response's status line.
CRIOGEN_OUTBOUND_DEADLINE_SECONDS = envfloat("CRIOGEN_OUTBOUND_DEADLINE_SECONDS", 10.0)
# Attempts in all (timeouts, network errors, 408, 429, 5xx are retried), and the first
# backoff (doubled after each attempt).
CRIOGEN_OUTBOUND_ATTEMPTS = envint("CRIOGEN_OUTBOUND_ATTEMPTS", 4)
CRIOGEN_OUTBOUND_BACKOFF_SECONDS = envfloat("CRIOGEN_OUTBOUND_BACKOFF_SECONDS", 2.0)
# The in-process sender: its threads, and how many calls may wait for them.
CRIOGEN_OUTBOUND_WORKERS = envint("CRIOGEN_OUTBOUND_WORKERS", 4)
CRIOGEN_OUTBOUND_QUEUE = envint("CRIOGEN_OUTBOUND_QUEUE", 1000)
# The record of each attempt (OutboundAttempt) is kept this long, then the sweep
# deletes it (seconds; 0: keep them all).
CRIOGEN_OUTBOUND_RETENTION_SECONDS = envint("CRIOGEN_OUTBOUND_RETENTION_SECONDS", 7 * 86400)
# Where the dashboard is served ("https://criogen.example.com"): notifications link to
# thread pages with it (unset: the links are paths).
CRIOGEN_PUBLIC_URL = envstr("CRIOGEN_PUBLIC_URL")
# How often the in-process timer fires due crons (seconds); Celery beat does it too.
CRIOGEN_CRON_TICK_SECONDS = envint("CRIOGEN_CRON_TICK_SECONDS", 10)
CELERY_BEAT_SCHEDULE["criogen-fire-crons"] = {
    "task": "criogen.tasks.fire_crons_task",
    "schedule": float(CRIOGEN_CRON_TICK_SECONDS),
}
# CORS for browser apps on other origins (api/cors.py, docs/deployment.md): a comma
# list of origins (default "*", like LangGraph's server; never with credentials), or
# CRIOGEN_CORS, a JSON object with the full configuration. Read into
# django-cors-headers' settings; an invalid value stops the start-up.
_cors = cors_settings(envstr("CRIOGEN_CORS_ALLOW_ORIGINS"), envstr("CRIOGEN_CORS"))
CORS_ALLOW_ALL_ORIGINS: bool = _cors["CORS_ALLOW_ALL_ORIGINS"]
CORS_ALLOWED_ORIGINS: list[str] = _cors["CORS_ALLOWED_ORIGINS"]
CORS_ALLOWED_ORIGIN_REGEXES: list[str] = _cors["CORS_ALLOWED_ORIGIN_REGEXES"]
CORS_ALLOW_METHODS: list[str] = _cors["CORS_ALLOW_METHODS"]
CORS_ALLOW_HEADERS: list[str] = _cors["CORS_ALLOW_HEADERS"]
CORS_ALLOW_CREDENTIALS: bool = _cors["CORS_ALLOW_CREDENTIALS"]
CORS_EXPOSE_HEADERS: list[str] = _cors["CORS_EXPOSE_HEADERS"]
CORS_PREFLIGHT_MAX_AGE: int = _cors["CORS_PREFLIGHT_MAX_AGE"]
# --- end api ---

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": envstr("LOG_LEVEL", "INFO")},
    "loggers": {"django.db.backends": {"level": "WARNING"}},
}
