"""Which checkout's runqueue the bench measures.

``BENCH_RUNQUEUE_SRC=/path/to/other/checkout`` makes the bench process's
Django set-up and every ``runworker`` it starts import ``runqueue`` and
``config`` from that checkout, while the bench itself (and its handlers)
stay this checkout's: before/after figures from the same minutes, with the
same measurement code. Call :func:`apply` before anything imports runqueue.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ENV = "BENCH_RUNQUEUE_SRC"
HERE = Path(__file__).resolve().parents[2]


def checkout() -> Path:
    """The checkout runqueue is imported from (this one unless ``BENCH_RUNQUEUE_SRC``)."""
    value = os.environ.get(ENV, "").strip()
    if not value:
        return HERE
    path = Path(value).expanduser().resolve()
    if not (path / "runqueue" / "__init__.py").is_file() or not (path / "config").is_dir():
        raise SystemExit(f"{ENV}={value}: not a runqueue checkout (no runqueue/ and config/)")
    return path


def apply() -> Path:
    """Put the chosen checkout first on ``sys.path``; the ``bench`` package is
    already imported from this checkout, so it stays this one."""
    path = checkout()
    if path != HERE and sys.path[:1] != [str(path)]:
        sys.path.insert(0, str(path))
        if "runqueue" in sys.modules and not _under(sys.modules["runqueue"].__file__, path):
            raise RuntimeError(f"runqueue was imported before {ENV} was applied")
    return path


def verify() -> None:
    """Fail loudly if runqueue came from another checkout than the one asked for."""
    import runqueue

    if not _under(runqueue.__file__, checkout()):
        raise RuntimeError(f"runqueue imported from {runqueue.__file__}, not {checkout()}")


def describe() -> dict[str, str]:
    """The checkout and its commit, for the JSON."""
    path = checkout()
    try:
        commit = subprocess.run(
            ["git", "-C", str(path), "describe", "--always", "--dirty"],
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = "unknown"
    # Which checkout, without this machine's folders: "." for this one, else
    # the other checkout's folder name (its commit says what it holds).
    where = "." if path.resolve() == HERE.resolve() else path.name
    return {"path": where, "commit": commit}


def _under(file: str | None, root: Path) -> bool:
    return file is not None and Path(file).resolve().is_relative_to(root)
