"""Small things a fresh clone trips over: the embedded server's stop prints
no warning without XDG_RUNTIME_DIR, and /favicon.ico is not a 404."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def database_command(pgdata: Path, action: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "XDG_RUNTIME_DIR"}
    return subprocess.run(
        [sys.executable, "-m", "config.database", action],
        cwd=REPO,
        env={**env, "RUNQUEUE_PGDATA": str(pgdata)},
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


@pytest.mark.slow
def test_stopping_the_embedded_server_prints_no_runtime_dir_warning(tmp_path) -> None:
    pgdata = tmp_path / "pgdata"  # a server of its own, not the suite's
    started = database_command(pgdata, "url")
    assert started.returncode == 0, started.stderr
    assert (pgdata / "postmaster.pid").exists()
    stopped = database_command(pgdata, "stop")
    assert stopped.returncode == 0, stopped.stderr
    assert stopped.stderr == ""
    assert not (pgdata / "postmaster.pid").exists()


def test_the_favicon_is_served(client) -> None:
    response = client.get("/favicon.ico")
    assert response.status_code == 200
    assert response["Content-Type"] == "image/x-icon"
    assert response.content.startswith(b"\x00\x00\x01\x00")  # an ICO header
    assert "max-age=86400" in response["Cache-Control"]
