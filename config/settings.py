"""Settings of the deployable runqueue project, read from the environment.

Environment variables (a ``.env`` file beside manage.py is read too, without
overriding the environment; ``RUNQUEUE_ENV_FILE`` names another file, or
none when empty): ``DATABASE_URL``, ``SECRET_KEY`` (required unless DEBUG),
``DEBUG``, ``ALLOWED_HOSTS``, ``HTTPS_ONLY`` (default on unless DEBUG),
``SECURE_HSTS_SECONDS``, ``RUNQUEUE_PGDATA`` (embedded server's data folder
when DATABASE_URL is unset), ``RUNQUEUE_LOG_FORMAT`` (``plain`` or ``json``),
``LISTEN_DATABASE_URL`` (a direct connection for LISTEN when DATABASE_URL is
a transaction pooler), ``RUNQUEUE_POOLER`` (``session`` or ``transaction``),
``RUNQUEUE_STREAMS_PER_PROCESS``, ``RUNQUEUE_STREAMS_PER_TOKEN``,
``RUNQUEUE_STREAMS_PER_TENANT``, ``RUNQUEUE_TENANT_INTERACTIVE_CAP`` (default 1: the
interactive runs one tenant runs at once), ``RUNQUEUE_METRICS_TOKEN``,
``RUNQUEUE_DEMO`` (default on: the demo app, and its kinds in the HTTP API),
``RUNQUEUE_CHAOS`` (default off: the chaos runner's app and its ``chaos.turn``
kind; ``manage.py runqueue_chaos`` turns it on for itself and its workers).
``./scripts/run.sh`` writes a local ``.env`` (a generated key, HTTPS_ONLY=off)
the first time.
"""

import os
from pathlib import Path

import environ
from django.core.exceptions import ImproperlyConfigured

from config.database import embedded_database

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env(
    DEBUG=(bool, False),
    ALLOWED_HOSTS=(list, ["localhost", "127.0.0.1", "[::1]"]),
    RUNQUEUE_DEMO=(bool, True),
    RUNQUEUE_CHAOS=(bool, False),
)
ENV_FILE = os.environ.get("RUNQUEUE_ENV_FILE", str(BASE_DIR / ".env"))
if ENV_FILE and Path(ENV_FILE).is_file():
    environ.Env.read_env(ENV_FILE)

#: The demo's kinds: the only ones the deployable project's API accepts, and
#: only while the demo is on.
DEMO_KINDS = ["demo.agent_turn", "demo.research", "demo.digest"]

DEBUG = env("DEBUG")
SECRET_KEY = env("SECRET_KEY", default="")
if not SECRET_KEY:
    if not DEBUG:
        # A key everyone can read signs sessions and password resets: refuse.
        raise ImproperlyConfigured(
            "SECRET_KEY is not set. Set the SECRET_KEY environment variable (or put "
            "SECRET_KEY=... in .env; ./scripts/run.sh writes a local one there), e.g. "
            "python -c 'import secrets; print(secrets.token_urlsafe(50))'."
        )
    SECRET_KEY = "django-insecure-debug-only-key"  # noqa: S105 - DEBUG on, never deployed
ALLOWED_HOSTS = env("ALLOWED_HOSTS")

# Served only over HTTPS (directly, or behind a proxy gunicorn trusts for
# X-Forwarded-Proto): redirect plain HTTP, secure-only cookies, HSTS. A local
# checkout on http://127.0.0.1 sets HTTPS_ONLY=off (run.sh's .env does).
HTTPS_ONLY = env.bool("HTTPS_ONLY", default=not DEBUG)
if HTTPS_ONLY:
    SECURE_SSL_REDIRECT = True
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = env.int("SECURE_HSTS_SECONDS", default=31_536_000)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = env.bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", default=True)
    SECURE_HSTS_PRELOAD = env.bool("SECURE_HSTS_PRELOAD", default=True)

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "django_extensions",
    "runqueue",
]
if env("RUNQUEUE_DEMO"):
    INSTALLED_APPS.append("demo")
# The chaos runner's handler sleeps as long as its payload says: never in a
# deployment, only when the chaos command asks for it (manage.py sets it).
if env("RUNQUEUE_CHAOS"):
    INSTALLED_APPS.append("tools.chaos")

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "config.urls"

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
    },
]

WSGI_APPLICATION = "config.wsgi.application"

if env("DATABASE_URL", default=""):
    DATABASES = {"default": env.db_url("DATABASE_URL")}
else:
    DATABASES = {"default": embedded_database()}
# Another database on the same server (the chaos runner uses its own).
if env("RUNQUEUE_DATABASE_NAME", default=""):
    DATABASES["default"]["NAME"] = env("RUNQUEUE_DATABASE_NAME")
# Health checks let long-lived worker connections survive a database restart.
DATABASES["default"].setdefault("CONN_MAX_AGE", 60)
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
# Behind a transaction pooler: LISTEN_DATABASE_URL reaches the server directly
# (LISTEN needs a session of its own), and RUNQUEUE_POOLER says the mode.
if env("LISTEN_DATABASE_URL", default=""):
    DATABASES["listen"] = env.db_url("LISTEN_DATABASE_URL")

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# RUNQUEUE_SETTINGS: a JSON object merged into RUNQUEUE, e.g. '{"LEASE_SECONDS": 60}'.
RUNQUEUE: dict = env.json("RUNQUEUE_SETTINGS", default={})
if "listen" in DATABASES:
    RUNQUEUE.setdefault("LISTEN_DATABASE", "listen")
if env("RUNQUEUE_POOLER", default=""):
    RUNQUEUE.setdefault("POOLER", env("RUNQUEUE_POOLER"))
if env("RUNQUEUE_DEMO"):
    RUNQUEUE.setdefault("API_KINDS", DEMO_KINDS)
# Extra handler modules for the worker, e.g. RUNQUEUE_HANDLER_MODULES=myapp.agents
if env("RUNQUEUE_HANDLER_MODULES", default=""):
    RUNQUEUE["HANDLER_MODULES"] = env.list("RUNQUEUE_HANDLER_MODULES")

# Django's Tasks framework runs on runqueue: @task functions are enqueued as
# runs of the "django.tasks" kind and run by runworker. queue_name picks the
# priority class ("default" is async).
TASKS = {
    "default": {
        "BACKEND": "runqueue.tasks_backend.RunQueueBackend",
        "QUEUES": ["default", "interactive", "async", "maintenance"],
    }
}

# Open event streams per web process (config/gunicorn_conf.py reads it too,
# to give each process that many threads more than the admin and API need).
if env("RUNQUEUE_STREAMS_PER_PROCESS", default=""):
    RUNQUEUE.setdefault("STREAM_MAX_PER_PROCESS", env.int("RUNQUEUE_STREAMS_PER_PROCESS"))
# Tenants apart by default: one tenant (a run's default concurrency key) runs
# at most this many interactive runs at once, so another tenant's turn never
# waits behind its long ones. RUNQUEUE_SETTINGS='{"CONCURRENCY": {}}' removes it.
RUNQUEUE.setdefault(
    "CONCURRENCY", {"interactive": env.int("RUNQUEUE_TENANT_INTERACTIVE_CAP", default=1)}
)
# Stream places per API token and per tenant in each web process (429 past
# them): by default one tenant holds at most half of a process's places.
RUNQUEUE.setdefault("STREAM_MAX_PER_TOKEN", env.int("RUNQUEUE_STREAMS_PER_TOKEN", default=2))
RUNQUEUE.setdefault(
    "STREAM_MAX_PER_TENANT",
    env.int(
        "RUNQUEUE_STREAMS_PER_TENANT",
        default=max(1, RUNQUEUE.get("STREAM_MAX_PER_PROCESS", 4) // 2),
    ),
)
# The web side's Prometheus scrape URL (/metrics) asks for this bearer token when set.
if env("RUNQUEUE_METRICS_TOKEN", default=""):
    RUNQUEUE.setdefault("METRICS_TOKEN", env("RUNQUEUE_METRICS_TOKEN"))

# RUNQUEUE_LOG_FORMAT=json: one JSON object per line, with the worker's
# per-run fields (run_id, kind, class, epoch, outcome, ...) as keys.
LOG_FORMAT = env("RUNQUEUE_LOG_FORMAT", default="plain")
if LOG_FORMAT not in ("plain", "json"):
    raise ImproperlyConfigured(f"RUNQUEUE_LOG_FORMAT must be plain or json, got {LOG_FORMAT!r}")
# Every logger writes to the console in LOG_FORMAT whatever DEBUG is: Django's
# own defaults send request errors (a 500's traceback) only to mail_admins and
# to a console handler that is on only with DEBUG, so an operator would see a
# 500 in the access log and nothing to debug.
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"},
        "json": {"()": "runqueue.observability.logfmt.JsonFormatter"},
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": LOG_FORMAT}},
    "root": {"handlers": ["console"], "level": "WARNING"},
    "loggers": {
        "runqueue": {
            "handlers": ["console"],
            "level": env("RUNQUEUE_LOG_LEVEL", default="INFO"),
            "propagate": False,
        },
        # Replaces Django's default handlers for "django" (DEBUG-only console,
        # mail_admins): request errors with their traceback, 4xx warnings.
        "django": {"handlers": ["console"], "level": "WARNING", "propagate": False},
    },
}
