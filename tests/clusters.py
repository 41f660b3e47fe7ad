"""Real PostgreSQL clusters of the machine's own PostgreSQL (Debian's
``postgresql-15``): a primary and a streaming standby made with
``pg_basebackup -R``, on free loopback ports, in a temporary folder, for the
failover tests. Never the cluster on 5432: each test makes its own and drops
it.

Run as root (as ``.ci/run`` is), the servers run as the ``postgres`` user;
otherwise as the current user.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

BIN = Path("/usr/lib/postgresql/15/bin")


def available() -> bool:
    return (BIN / "initdb").exists() and (BIN / "pg_basebackup").exists()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _as_server_user(args: list[str]) -> list[str]:
    if os.geteuid() == 0:
        return ["runuser", "-u", "postgres", "--", *args]
    return args


def _run(*args: str | Path, timeout: float = 120) -> str:
    done = subprocess.run(
        _as_server_user([str(a) for a in args]),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{args[0]} failed: {done.stdout}{done.stderr}")
    return done.stdout


@dataclass
class Node:
    name: str
    datadir: Path
    port: int
    log: Path = field(init=False)

    def __post_init__(self) -> None:
        self.log = self.datadir.parent / f"{self.name}.log"

    def start(self) -> None:
        _run(BIN / "pg_ctl", "-D", self.datadir, "-l", self.log, "-w", "-t", "60", "start")

    def stop(self, mode: str = "fast") -> None:
        """``immediate`` is a crash: no shutdown checkpoint, no last WAL sent."""
        _run(BIN / "pg_ctl", "-D", self.datadir, "-m", mode, "-w", "stop")

    def promote(self) -> None:
        _run(BIN / "pg_ctl", "-D", self.datadir, "-w", "promote")

    def running(self) -> bool:
        return (self.datadir / "postmaster.pid").exists()


class Pair:
    """A primary and an asynchronous streaming standby of it."""

    def __init__(self, folder: Path | None = None, ports: tuple[int, int] | None = None) -> None:
        """A new pair in a new folder; or, with ``folder`` and ``ports``, the
        pair already made there (a scenario process given them)."""
        if folder is None:
            folder = Path(tempfile.mkdtemp(prefix="rq-clusters-"))
            folder.chmod(0o755)
            if os.geteuid() == 0:
                shutil.chown(folder, "postgres", "postgres")
        self.folder = folder
        primary, standby = ports or (_free_port(), _free_port())
        self.primary = Node("primary", folder / "primary", primary)
        self.standby = Node("standby", folder / "standby", standby)

    def create(self) -> Pair:
        p = self.primary
        _run(BIN / "initdb", "-D", p.datadir, "-U", "postgres", "--auth=trust", "-N")
        with (p.datadir / "postgresql.conf").open("a") as conf:
            conf.write(
                f"port = {p.port}\nlisten_addresses = '127.0.0.1'\n"
                f"unix_socket_directories = '{self.folder}'\n"
                "wal_level = replica\nmax_wal_senders = 5\nfsync = off\n"
                "synchronous_commit = local\nfull_page_writes = on\n"
            )
        p.start()
        s = self.standby
        _run(
            BIN / "pg_basebackup",
            "-h",
            "127.0.0.1",
            "-p",
            str(p.port),
            "-U",
            "postgres",
            "-D",
            s.datadir,
            "-R",
            "-c",
            "fast",
            "-X",
            "stream",
        )
        with (s.datadir / "postgresql.conf").open("a") as conf:
            conf.write(f"port = {s.port}\n")
        s.start()
        return self

    def url(self, dbname: str = "postgres") -> str:
        """A libpq multi-host URL: both nodes, the read-write one chosen."""
        return (
            f"postgres://postgres@127.0.0.1:{self.primary.port},127.0.0.1:{self.standby.port}"
            f"/{dbname}?target_session_attrs=read-write"
        )

    def wait_replayed(self, timeout: float = 30) -> None:
        """Until the standby has replayed everything the primary wrote."""
        import psycopg

        deadline = time.monotonic() + timeout
        with psycopg.connect(
            f"host=127.0.0.1 port={self.primary.port} user=postgres", autocommit=True
        ) as conn:
            target = conn.execute("SELECT pg_current_wal_lsn()").fetchone()[0]
        while time.monotonic() < deadline:
            with psycopg.connect(
                f"host=127.0.0.1 port={self.standby.port} user=postgres", autocommit=True
            ) as conn:
                replayed = conn.execute(
                    "SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", [target]
                ).fetchone()[0]
            if replayed:
                return
            time.sleep(0.05)
        raise TimeoutError("the standby did not catch up")

    def drop(self) -> None:
        for node in (self.primary, self.standby):
            if node.running():
                try:
                    node.stop("immediate")
                except RuntimeError:
                    pass
        shutil.rmtree(self.folder, ignore_errors=True)
