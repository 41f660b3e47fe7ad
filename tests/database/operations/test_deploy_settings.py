"""The deployable project's secure defaults: no SECRET_KEY and DEBUG off is a
refusal to start, ``check --deploy`` is clean with the documented
environment, and the local .env the two commands keep."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

import pytest
from django.db import connection

from scripts import local_env

REPO = Path(__file__).resolve().parents[3]

pytestmark = pytest.mark.slow

#: What the environment may carry that these tests decide themselves.
DECIDED = ("SECRET_KEY", "DEBUG", "HTTPS_ONLY", "ALLOWED_HOSTS", "DATABASE_URL")


def manage(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``manage.py`` with this environment and no .env file."""
    base = {k: v for k, v in os.environ.items() if k not in DECIDED}
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=REPO,
        env={**base, "RUNQUEUE_ENV_FILE": "", **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def database_url() -> str:
    """The test server, as a deployment would name its database."""
    params = connection.settings_dict
    user = quote(params["USER"] or "", safe="")
    if params["PASSWORD"]:
        user += ":" + quote(params["PASSWORD"], safe="")
    host, port = params["HOST"] or "localhost", params["PORT"] or "5432"
    if host.startswith("/"):  # a socket folder goes in the query string
        return f"postgres://{user}@/{params['NAME']}?host={quote(host)}&port={port}"
    return f"postgres://{user}@{host}:{port}/{params['NAME']}"


def test_no_secret_key_with_debug_off_refuses_to_start() -> None:
    proc = manage("check", DATABASE_URL="postgres://nobody@/none?host=/nonexistent")
    assert proc.returncode != 0
    assert "ImproperlyConfigured: SECRET_KEY is not set" in proc.stderr, proc.stderr


def test_no_secret_key_with_debug_on_starts() -> None:
    proc = manage("check", "--tag", "security", DEBUG="on", DATABASE_URL="postgres://x@/y")
    assert proc.returncode == 0, proc.stderr


@pytest.mark.django_db
def test_check_deploy_passes_with_the_documented_environment() -> None:
    """docs/operations.md, Deployment: DATABASE_URL, SECRET_KEY, DEBUG off, ALLOWED_HOSTS."""
    proc = manage(
        "check",
        "--deploy",
        "--fail-level",
        "WARNING",
        DATABASE_URL=database_url(),
        SECRET_KEY=secrets.token_urlsafe(50),
        ALLOWED_HOSTS="runqueue.example.com",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "System check identified no issues" in proc.stdout


def test_the_local_env_gets_a_key_once_and_keeps_it(tmp_path, capsys) -> None:
    path = tmp_path / ".env"
    local_env.main(path)
    first = path.read_text()
    key = next(line for line in first.splitlines() if line.startswith("SECRET_KEY="))
    assert len(key.removeprefix("SECRET_KEY=")) >= 50
    assert "HTTPS_ONLY=off" in first.splitlines()
    assert path.stat().st_mode & 0o077 == 0
    local_env.main(path)
    assert path.read_text() == first


def test_the_local_env_adds_only_what_is_missing(tmp_path) -> None:
    path = tmp_path / ".env"
    path.write_text("SECRET_KEY=mine\nRUNQUEUE_LOG_LEVEL=DEBUG")
    local_env.main(path)
    lines = path.read_text().splitlines()
    assert lines == ["SECRET_KEY=mine", "RUNQUEUE_LOG_LEVEL=DEBUG", "HTTPS_ONLY=off"]


#: A request that fails inside its view, in a process set up as a deployment.
FAILING_REQUEST = """
import sys, types
from django.test import Client, override_settings
from django.urls import path

def boom(request):
    raise RuntimeError("boom-in-view")

urls = types.ModuleType("boom_urls")
urls.urlpatterns = [path("boom/", boom)]
sys.modules["boom_urls"] = urls
with override_settings(ROOT_URLCONF="boom_urls"):
    print(Client(raise_request_exception=False).get("/boom/").status_code)
"""


@pytest.mark.parametrize("log_format", ["plain", "json"])
@pytest.mark.parametrize("debug", ["off", "on"])
def test_a_request_error_is_logged_with_its_traceback(log_format: str, debug: str) -> None:
    proc = manage(
        "shell",
        "--no-imports",
        "-c",
        FAILING_REQUEST,
        SECRET_KEY=secrets.token_urlsafe(50),
        DEBUG=debug,
        HTTPS_ONLY="off",
        ALLOWED_HOSTS="testserver",
        DATABASE_URL="postgres://nobody@/none?host=/nonexistent",
        RUNQUEUE_LOG_FORMAT=log_format,
    )
    assert proc.stdout.strip() == "500", proc.stderr
    assert proc.stderr.count("RuntimeError: boom-in-view") == 1, proc.stderr
    if log_format == "json":
        lines = [json.loads(line) for line in proc.stderr.splitlines() if line.startswith("{")]
        [error] = [line for line in lines if line["logger"] == "django.request"]
        assert error["level"] == "ERROR"
        assert "Traceback" in error["exception"] and "boom-in-view" in error["exception"]
    else:
        assert "ERROR django.request Internal Server Error: /boom/" in proc.stderr
        assert "Traceback (most recent call last)" in proc.stderr


def test_a_pooled_deployment_is_said_by_the_environment() -> None:
    """LISTEN_DATABASE_URL and RUNQUEUE_POOLER: the listen entry, the setting
    that names it, the pooler's mode, and no prepared statements by default."""
    script = (
        "from django.conf import settings; from runqueue.conf import get_settings; import json;"
        "s = get_settings();"
        "print(json.dumps([settings.DATABASES['listen']['HOST'], s.LISTEN_DATABASE, s.POOLER,"
        " s.prepares]))"
    )
    proc = manage(
        "shell",
        "-c",
        script,
        DEBUG="on",
        DATABASE_URL="postgres://app@pgbouncer:6432/app",
        LISTEN_DATABASE_URL="postgres://app@db:5432/app",
        RUNQUEUE_POOLER="transaction",
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == [
        "db",
        "listen",
        "transaction",
        False,
    ]
