"""Real PostgreSQL topologies for the tests, the chaos soak and the bench:
a primary with a streaming standby of the machine's PostgreSQL, and a
PgBouncer in front of a server. Never part of the installed package."""

from __future__ import annotations

import socket
import subprocess


def free_port() -> int:
    """A loopback port nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop(proc: subprocess.Popen, timeout: float = 30) -> None:
    """SIGTERM, and SIGKILL if it has not ended within ``timeout`` seconds."""
    proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout)
