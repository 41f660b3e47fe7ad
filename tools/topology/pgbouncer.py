"""A real PgBouncer in front of a server (Debian's ``pgbouncer``; ``.ci/run``
installs it), for the tests of a pooled deployment, the chaos soak through a
pooler and the bench's pooled drain.

It runs as the user that owns the database server's socket folder (PgBouncer
refuses to run as root), listens on a free loopback port, and trusts every
client, as the test server does.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tools.topology import free_port, stop


@dataclass(frozen=True)
class Bouncer:
    host: str
    port: int
    dbname: str
    log: Path

    @property
    def through(self) -> dict[str, object]:
        """DATABASES keys that send a client through this PgBouncer."""
        return {"HOST": self.host, "PORT": str(self.port)}

    def conninfo(self) -> str:
        return f"host={self.host} port={self.port} dbname={self.dbname} user=postgres"


def _run_as(server_host: str) -> str | None:
    """The user PgBouncer runs as when this process is root: the owner of
    the server's socket folder (so it can reach the socket), else postgres."""
    if os.geteuid() != 0:
        return None
    if server_host.startswith("/"):
        return pwd.getpwuid(Path(server_host).stat().st_uid).pw_name
    return "postgres"


class Unavailable(RuntimeError):
    """PgBouncer is not installed here."""


def binary() -> str | None:
    return shutil.which("pgbouncer") or (
        "/usr/sbin/pgbouncer" if Path("/usr/sbin/pgbouncer").exists() else None
    )


@contextmanager
def start(
    db: Mapping[str, object],
    pool_mode: str = "transaction",
    pool_size: int = 2,
    extra: Mapping[str, object] | None = None,
) -> Iterator[Bouncer]:
    """A PgBouncer in ``pool_mode`` with ``pool_size`` server connections per
    database and user, in front of the server of ``db`` (Django DATABASES
    keys). Every database name passes through (``*``), so a database made
    after it started (a test database, the chaos soak's) is reachable too.
    ``extra``: more ``[pgbouncer]`` settings (``server_login_retry``)."""
    program = binary()
    if program is None:
        raise Unavailable("pgbouncer is not installed (apt-get install pgbouncer; .ci/run does)")
    port = free_port()
    folder = Path(tempfile.mkdtemp(prefix="rq-pgbouncer-"))
    folder.chmod(0o755)
    (folder / "userlist.txt").write_text('"postgres" ""\n')
    ini = folder / "pgbouncer.ini"
    ini.write_text(
        "[databases]\n"
        f"* = host={db['HOST'] or '127.0.0.1'} port={db['PORT'] or 5432} "
        f"user={db['USER'] or 'postgres'}\n"
        "[pgbouncer]\n"
        "listen_addr = 127.0.0.1\n"
        f"listen_port = {port}\n"
        "unix_socket_dir =\n"
        "auth_type = trust\n"
        f"auth_file = {folder / 'userlist.txt'}\n"
        f"pool_mode = {pool_mode}\n"
        f"default_pool_size = {pool_size}\n"
        "min_pool_size = 0\n"
        "reserve_pool_size = 0\n"
        "max_client_conn = 200\n"
        "server_reset_query =\n"
        "ignore_startup_parameters = extra_float_digits,options,application_name\n"
        + "".join(f"{key} = {value}\n" for key, value in (extra or {}).items())
    )
    log = folder / "pgbouncer.log"
    args = [program, str(ini)]
    user = _run_as(str(db["HOST"] or ""))
    if user is not None:
        args[1:1] = ["-u", user]
    with log.open("wb") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 20
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"pgbouncer did not start: {log.read_text()}") from None
            time.sleep(0.05)
    try:
        yield Bouncer("127.0.0.1", port, str(db["NAME"]), log)
    finally:
        stop(proc, 10)
        shutil.rmtree(folder, ignore_errors=True)
