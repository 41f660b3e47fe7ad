"""Settings of the deployable runqueue project, read from the environment.

Environment variables (an optional ``.env`` file beside manage.py is read too):
``DATABASE_URL``, ``SECRET_KEY``, ``DEBUG``, ``ALLOWED_HOSTS``,
``RUNQUEUE_PGDATA`` (embedded server's data folder when DATABASE_URL is unset),
``RUNQUEUE_DEMO`` (default on: the demo app, and its kinds in the HTTP API),
``RUNQUEUE_CHAOS`` (default off: the chaos runner's app and its ``chaos.turn``
kind; ``manage.py runqueue_chaos`` turns it on for itself and its workers).
"""

from pathlib import Path

import environ

from config.database import embedded_database

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env(
    DEBUG=(bool, False),
    ALLOWED_HOSTS=(list, ["localhost", "127.0.0.1", "[::1]"]),
    RUNQUEUE_DEMO=(bool, True),
    RUNQUEUE_CHAOS=(bool, False),
)
if (BASE_DIR / ".env").is_file():
    environ.Env.read_env(BASE_DIR / ".env")

#: The demo's kinds: the only ones the deployable project's API accepts, and
#: only while the demo is on.
DEMO_KINDS = ["demo.agent_turn", "demo.research", "demo.digest"]

DEBUG = env("DEBUG")
# The fallback key is only for a local checkout; a deployment sets SECRET_KEY.
SECRET_KEY = env("SECRET_KEY", default="insecure-local-only-set-SECRET_KEY-in-deployment")
ALLOWED_HOSTS = env("ALLOWED_HOSTS")

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
    INSTALLED_APPS.append("chaos")

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

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "loggers": {
        "runqueue": {"handlers": ["console"], "level": env("RUNQUEUE_LOG_LEVEL", default="INFO")}
    },
}
