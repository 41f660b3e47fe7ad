"""System checks: PostgreSQL is required and RUNQUEUE is validated."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.db import connections
from django.test import override_settings

from runqueue import checks
from runqueue.conf import get_settings, parse


def test_no_error_on_postgresql() -> None:
    assert checks.check_database() == []


def test_error_when_database_is_not_postgresql(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(type(connections["default"]), "vendor", "sqlite")
    [error] = checks.check_database()
    assert error.id == "runqueue.E001"
    assert "needs PostgreSQL" in error.msg


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"LEASE_SECONDS": "thirty"}, "RUNQUEUE['LEASE_SECONDS'] must be a number, got 'thirty'"),
        ({"LEASE_SECONDS": 0}, "RUNQUEUE['LEASE_SECONDS'] is out of range: 0"),
        ({"MAX_ATTEMPTS": 2.5}, "RUNQUEUE['MAX_ATTEMPTS'] must be an integer, got 2.5"),
        ({"HANDLER_MODULES": "app.handlers"}, "must be a list of strings"),
        ({"LEASE_SECONDS": 5, "HEARTBEAT_SECONDS": 5}, "must be shorter than LEASE_SECONDS"),
        ({"LEASE_SECOND": 5}, "Unknown RUNQUEUE setting(s): 'LEASE_SECOND'"),
        ({"BACKOFF_JITTER": 1.5}, "BACKOFF_JITTER"),
        ({"STREAM_TEXT_FLUSH_MS": 0}, "RUNQUEUE['STREAM_TEXT_FLUSH_MS'] is out of range: 0"),
        ({"STREAM_TEXT_FLUSH_MS": 120000}, "STREAM_TEXT_FLUSH_MS'] must be at most 60000"),
        ({"STREAM_TEXT_FLUSH_BYTES": 100}, "STREAM_TEXT_FLUSH_BYTES'] must be 256-1048576"),
        ({"STREAM_TEXT_FLUSH_BYTES": 4096.5}, "STREAM_TEXT_FLUSH_BYTES'] must be an integer"),
    ],
)
def test_bad_runqueue_values_get_a_clear_message(raw: dict, message: str) -> None:
    with pytest.raises(ImproperlyConfigured, match=__import__("re").escape(message)):
        parse(raw)
    with override_settings(RUNQUEUE=raw):
        [error] = checks.check_settings()
    assert error.id == "runqueue.E002"
    assert message in error.msg


def test_settings_defaults_and_reload() -> None:
    assert get_settings().LEASE_SECONDS == 30
    with override_settings(RUNQUEUE={"LEASE_SECONDS": 90}):
        assert get_settings().LEASE_SECONDS == 90
    assert get_settings().LEASE_SECONDS == 30


@pytest.mark.django_db
def test_manage_py_check_is_clean(capsys: pytest.CaptureFixture[str]) -> None:
    call_command("check", "--database", "default", "--fail-level", "WARNING")
    assert "no issues" in capsys.readouterr().out


@pytest.mark.django_db
def test_migrations_are_complete() -> None:
    """makemigrations --check: the models and 0001 agree."""
    call_command("makemigrations", "--check", "--dry-run", verbosity=0)


def _pooler_ids(settings, runqueue: dict) -> list[str]:
    settings.RUNQUEUE = runqueue
    return [m.id for m in checks.check_pooler()]


def test_a_transaction_pooler_refuses_prepared_statements_unless_it_carries_them(
    settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    listen = {"POOLER": "transaction", "LISTEN_DATABASE": "default"}
    assert _pooler_ids(settings, listen) == []  # prepares turned off by itself
    assert _pooler_ids(settings, {**listen, "PREPARED_STATEMENTS": True}) == ["runqueue.E005"]
    assert _pooler_ids(settings, {**listen, "PREPARED_STATEMENTS": False}) == []
    tracked = {**listen, "PREPARED_STATEMENTS": True, "POOLER_TRACKS_PREPARED": True}
    assert _pooler_ids(settings, tracked) == []
    options = settings.DATABASES["default"].setdefault("OPTIONS", {})
    monkeypatch.setitem(options, "prepare_threshold", 5)
    (error,) = [m for m in checks.check_pooler() if m.id == "runqueue.E005"] or [None]
    assert error is None  # POOLER_TRACKS_PREPARED still set
    settings.RUNQUEUE = listen
    (error,) = checks.check_pooler()
    assert error.id == "runqueue.E005" and "prepare_threshold" in error.msg
    settings.RUNQUEUE = {}
    assert checks.check_pooler() == []  # no pooler said: the URL's threshold is the user's


def test_a_transaction_pooler_without_a_listen_database_is_warned_about(settings) -> None:
    assert _pooler_ids(settings, {"POOLER": "transaction"}) == ["runqueue.W005"]
    assert _pooler_ids(settings, {"POOLER": "session"}) == []


def test_pgbouncers_port_without_a_pooler_said_is_asked_about(
    settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(settings.DATABASES["default"], "PORT", "6432")
    assert _pooler_ids(settings, {}) == ["runqueue.W006"]
    assert _pooler_ids(settings, {"POOLER": "session"}) == []
