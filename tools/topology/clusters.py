"""Real PostgreSQL clusters of the machine's own PostgreSQL (Debian's
``postgresql-15``): a primary and a streaming standby made with
``pg_basebackup -R``, on free loopback ports, in a temporary folder, for the
failover tests, the chaos soak's failover profile and the bench. Never the
cluster on 5432: each user makes its own and drops it.

Run as root (as ``.ci/run`` is), the servers run as the ``postgres`` user;
otherwise as the current user.
"""

from __future__ import annotations

import datetime
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from tools.topology import free_port

BIN = Path("/usr/lib/postgresql/15/bin")


def available() -> bool:
    return (BIN / "initdb").exists() and (BIN / "pg_basebackup").exists()


def _as_server_user(args: list[str]) -> list[str]:
    if os.geteuid() == 0:
        return ["runuser", "-u", "postgres", "--", *args]
    return args


def run(*args: str | Path, timeout: float = 120) -> str:
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
        run(BIN / "pg_ctl", "-D", self.datadir, "-l", self.log, "-w", "-t", "60", "start")

    def stop(self, mode: str = "fast") -> None:
        """``immediate`` is a crash: no shutdown checkpoint, no last WAL sent."""
        run(BIN / "pg_ctl", "-D", self.datadir, "-m", mode, "-w", "stop")

    def promote(self) -> None:
        run(BIN / "pg_ctl", "-D", self.datadir, "-w", "promote")

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
        primary, standby = ports or (free_port(), free_port())
        self.primary = Node("primary", folder / "primary", primary)
        self.standby = Node("standby", folder / "standby", standby)

    def create(self) -> Pair:
        p = self.primary
        run(BIN / "initdb", "-D", p.datadir, "-U", "postgres", "--auth=trust", "-N")
        with (p.datadir / "postgresql.conf").open("a") as conf:
            conf.write(
                f"port = {p.port}\nlisten_addresses = '127.0.0.1'\n"
                f"unix_socket_directories = '{self.folder}'\n"
                "wal_level = replica\nmax_wal_senders = 5\nfsync = off\n"
                "synchronous_commit = local\nfull_page_writes = on\n"
            )
        p.start()
        s = self.standby
        run(
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

    def sql(self, node: Node, text: str, params: list | None = None) -> list[tuple]:
        """One autocommit statement on ``node`` (its rows, if it returns any)."""
        import psycopg

        with psycopg.connect(
            f"host=127.0.0.1 port={node.port} user=postgres", autocommit=True
        ) as conn:
            cur = conn.execute(text, params)
            return cur.fetchall() if cur.description else []

    def synchronous(self, on: bool) -> None:
        """Synchronous replication to the standby on (a commit waits until
        the standby has flushed it) or off. ``synchronous_commit`` goes with
        it: the clusters are made with ``local``, under which a commit waits
        for no standby whatever ``synchronous_standby_names`` says."""
        names, commit = ("*", "on") if on else ("", "local")
        self.sql(self.primary, f"ALTER SYSTEM SET synchronous_standby_names = '{names}'")
        self.sql(self.primary, f"ALTER SYSTEM SET synchronous_commit = '{commit}'")
        self.sql(self.primary, "SELECT pg_reload_conf()")

    def failover(self) -> datetime.datetime:
        """Crash the primary (``-m immediate``: no last WAL sent), promote the
        standby, and return the new primary's ``now()`` at promotion. The
        pair is then the new primary alone (``standby`` is the dead node);
        ``rebuild_standby`` makes it a standby again on its old port."""
        old, new = self.primary, self.standby
        old.stop("immediate")
        new.promote()
        self.primary, self.standby = new, old
        self.sql(new, "ALTER SYSTEM SET synchronous_standby_names = ''")
        self.sql(new, "ALTER SYSTEM SET synchronous_commit = 'local'")
        self.sql(new, "SELECT pg_reload_conf()")
        return self.sql(new, "SELECT now()")[0][0]

    def rebuild_standby(self, synchronous: bool = False) -> None:
        """A new standby of the primary on the dead node's folder and port
        (``pg_basebackup -R``), so a multi-host URL stays right."""
        dead = self.standby
        if dead.running():
            dead.stop("immediate")
        shutil.rmtree(dead.datadir)
        run(
            BIN / "pg_basebackup",
            "-h",
            "127.0.0.1",
            "-p",
            str(self.primary.port),
            "-U",
            "postgres",
            "-D",
            dead.datadir,
            "-R",
            "-c",
            "fast",
            "-X",
            "stream",
        )
        with (dead.datadir / "postgresql.auto.conf").open("a") as conf:
            conf.write(f"port = {dead.port}\nsynchronous_standby_names = ''\n")
        dead.start()
        if synchronous:
            self.synchronous(True)

    def drop(self) -> None:
        for node in (self.primary, self.standby):
            if node.running():
                try:
                    node.stop("immediate")
                except RuntimeError:
                    pass
        shutil.rmtree(self.folder, ignore_errors=True)
