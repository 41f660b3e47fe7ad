"""The deployable project (config/): the chaos runner's app and kind only
when the chaos command asks for them, the demo's kinds in the API only
while the demo is on, and demo handlers that cap what a payload asks."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from django.conf import settings

from demo import handlers as demo
from runqueue import registry

ROOT = Path(__file__).resolve().parents[3]


def _manage(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(  # noqa: S603 - our own manage.py
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_chaos_app_and_kind_are_not_installed() -> None:
    assert "tools.chaos" not in settings.INSTALLED_APPS
    assert not registry.is_registered("chaos.turn")
    assert "demo" in settings.INSTALLED_APPS


@pytest.mark.slow
def test_only_the_chaos_command_installs_chaos() -> None:
    listed = _manage("help", "--commands")
    assert listed.returncode == 0, listed.stderr
    assert "runqueue_chaos" not in listed.stdout.split()
    chaos = _manage("runqueue_chaos", "--help")
    assert chaos.returncode == 0, chaos.stderr
    assert "--profile" in chaos.stdout


@pytest.mark.slow
def test_the_demo_kinds_are_api_kinds_only_while_the_demo_is_on() -> None:
    show = (
        "from django.conf import settings as s;"
        " print(sorted(s.RUNQUEUE.get('API_KINDS', [])), 'demo' in s.INSTALLED_APPS)"
    )
    on = _manage("shell", "--no-imports", "-c", show)
    assert on.stdout.strip() == f"{sorted(settings.DEMO_KINDS)} True", on.stderr
    off = _manage("shell", "--no-imports", "-c", show, RUNQUEUE_DEMO="0")
    assert off.stdout.strip() == "[] False", off.stderr


def test_demo_handlers_cap_their_inputs(monkeypatch) -> None:
    slept: list[float] = []
    monkeypatch.setattr(demo.time, "sleep", slept.append)
    ctx = SimpleNamespace(
        payload={"steps": demo.MAX_RESEARCH_STEPS, "step_seconds": demo.MAX_STEP_SECONDS},
        state=None,
        checkpoint=lambda s: True,
    )
    result = demo.research(ctx)
    assert slept == [demo.MAX_STEP_SECONDS] * demo.MAX_RESEARCH_STEPS
    assert sum(slept) <= 300  # a research run holds a slot for five minutes at most
    assert result["summary"] == f"{demo.MAX_RESEARCH_STEPS} findings"


@pytest.mark.slow
def test_the_projects_defaults_keep_tenants_apart() -> None:
    """Issue 26: tenant B's interactive run waited 126 s behind tenant A's
    four long ones; the project now caps each tenant's interactive runs."""
    show = (
        "from runqueue.conf import get_settings as g; from runqueue.models import PriorityClass;"
        " c = g(); print(tuple(c.default_cap(k) for k in PriorityClass),"
        " c.STREAM_MAX_PER_TOKEN, c.STREAM_MAX_PER_TENANT)"
    )
    default = _manage("shell", "--no-imports", "-c", show)
    assert default.stdout.strip() == "(1, None, None) 2 2", default.stderr
    wider = _manage("shell", "--no-imports", "-c", show, RUNQUEUE_TENANT_INTERACTIVE_CAP="3")
    assert wider.stdout.strip().startswith("(3, None, None)"), wider.stderr
    off = _manage("shell", "--no-imports", "-c", show, RUNQUEUE_SETTINGS='{"CONCURRENCY": {}}')
    assert off.stdout.strip().startswith("(None, None, None)"), off.stderr


@pytest.mark.django_db
def test_with_the_projects_cap_another_tenants_turn_is_claimed_first(settings) -> None:
    import runqueue
    from config import settings as project
    from runqueue import leases

    default_cap = project.RUNQUEUE["CONCURRENCY"]
    assert default_cap == {"interactive": 1}  # conftest leaves it out of the tests' own
    settings.RUNQUEUE = {**settings.RUNQUEUE, "CONCURRENCY": default_cap}
    first_a = runqueue.submit(kind="test.echo", tenant="a").run
    runqueue.submit(kind="test.echo", tenant="a")
    runqueue.submit(kind="test.echo", tenant="a")
    b = runqueue.submit(kind="test.echo", tenant="b").run
    claimed = {lease.run_id for lease in leases.claim("w", limit=3)}
    assert claimed == {first_a.id, b.id}
