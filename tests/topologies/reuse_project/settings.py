"""A minimal Django project that installs runqueue as a user would.

It is copied outside the repository by tests/topologies/test_reuse.py and never imports
anything from config/. The database comes from REUSE_DB_* variables.
"""

import os

SECRET_KEY = "reuse-test-only"  # noqa: S105
DEBUG = False
ALLOWED_HOSTS = ["localhost"]
ROOT_URLCONF = "urls"
USE_TZ = True
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "runqueue",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": os.environ["REUSE_DB_NAME"],
        "USER": os.environ["REUSE_DB_USER"],
        "PASSWORD": os.environ.get("REUSE_DB_PASSWORD", ""),
        "HOST": os.environ["REUSE_DB_HOST"],
        "PORT": os.environ["REUSE_DB_PORT"],
    }
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
RUNQUEUE = {"HANDLER_MODULES": ["reuse_handlers"]}
