"""The figures every system is measured by, computed in one place: the
server's commit cost, commits per finished run, CPU per run, rates.

Commits are ``pg_stat_database.xact_commit`` of the system's own database
(every system has one), read from a connection to the server's database, so
reading adds nothing. PostgreSQL 15 adds a backend's commits to that view
when the backend ends a transaction at least a second after its last report,
10 s after it went idle with commits unreported, and when it exits; a
backend that has touched no table (a LISTEN connection) reports only at
exit. So a window (:class:`CommitWindow`) starts when the backends still
connected have reported (they are the system's idle workers, settled), and
ends only once every backend of the database has exited. The bench's own
statements in the window go through a :class:`Probe`, which counts them, and
are subtracted.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict

from tools.bench import common


class Stats:
    """A connection to the server's own database that reads a bench database's
    counters and backends without adding to them."""

    def __init__(self, dbname: str) -> None:
        self.dbname = dbname
        self.conn = psycopg.connect(common.SERVER_URL, autocommit=True)
        own = self.conn.execute("SELECT current_database()").fetchone()[0]
        if own == dbname:
            raise ValueError(f"cannot measure {dbname} from a connection to it")

    def commits(self) -> int:
        row = self.conn.execute(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = %s", [self.dbname]
        ).fetchone()
        return int(row[0]) if row and row[0] is not None else 0

    def backends(self) -> set[int]:
        rows = self.conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s", [self.dbname]
        ).fetchall()
        return {pid for (pid,) in rows}

    def listeners(self) -> int:
        """Backends whose last statement was a LISTEN (a worker's wake-up connection)."""
        return self.conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND query ILIKE 'LISTEN%%'",
            [self.dbname],
        ).fetchone()[0]

    def wal_lsn(self) -> str:
        """The server's WAL insert position (cluster-wide: the bench measures one
        system at a time, with nothing else of its own writing)."""
        return self.conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0]

    def wal_since(self, lsn: str) -> int:
        return int(
            self.conn.execute("SELECT pg_current_wal_lsn() - %s::pg_lsn", [lsn]).fetchone()[0]
        )

    def server_cpu_seconds(self) -> float | None:
        """CPU the whole PostgreSQL server has used so far, read from /proc:
        its processes' own and, in the postmaster's ``cutime``/``cstime``,
        every backend's it has reaped (a drain's backends exit before its
        window ends). Cluster-wide, as the WAL figure is: the bench measures
        one system at a time. None when the server's processes cannot be read
        (another machine, another user)."""
        try:
            postmaster = _stat(self.conn.info.backend_pid)[1]
            for _ in range(10):
                # A backend reaped while the children are read would be
                # counted in neither place (or in both): read again until the
                # postmaster's reaped times did not move meanwhile.
                own = _stat(postmaster)
                total = own[2] + own[3] + own[4] + own[5]
                for entry in os.listdir("/proc"):
                    if not entry.isdigit() or int(entry) == postmaster:
                        continue
                    try:
                        ppid, utime, stime = _stat(int(entry))[1:4]
                    except (FileNotFoundError, ProcessLookupError):
                        continue
                    if ppid == postmaster:
                        total += utime + stime
                if _stat(postmaster)[4:] == own[4:]:
                    return total / os.sysconf("SC_CLK_TCK")
        except (OSError, IndexError, ValueError):
            return None
        return None

    def checkpoint(self) -> bool:
        """A CHECKPOINT, so every system's window starts with the same full-page
        state (each page's first change after it writes the whole page); False
        when the role may not (then the figure depends on when the last one ran)."""
        try:
            self.conn.execute("CHECKPOINT")
        except psycopg.errors.InsufficientPrivilege:
            return False
        return True

    def busy(self) -> int:
        """Backends running a statement or inside a transaction."""
        return self.conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s"
            " AND (state = 'active' OR state LIKE 'idle in transaction%%')",
            [self.dbname],
        ).fetchone()[0]

    def wait_gone(self, pids: set[int] | None = None, timeout: float = 60) -> None:
        """Until those backends (by default all of the database's) have exited:
        an exiting backend reports its counters before it leaves the view."""
        end = time.monotonic() + timeout
        while True:
            left = self.backends() if pids is None else self.backends() & pids
            if not left:
                return
            if time.monotonic() > end:
                raise RuntimeError(f"{self.dbname}: backends {sorted(left)} did not exit")
            time.sleep(0.02)

    def close(self) -> None:
        self.conn.close()


class Probe:
    """The bench's own connection into a measured database: it counts the
    transactions it commits, so a window can subtract them."""

    def __init__(self, url: str) -> None:
        self.conn = psycopg.connect(url, autocommit=True)
        self.pid = self.conn.info.backend_pid
        self.commits = 0

    def execute(self, query: Any, params: Any = None) -> psycopg.Cursor:
        cursor = self.conn.execute(query, params)
        self.commits += 1
        return cursor

    def value(self, query: Any, params: Any = None) -> Any:
        return self.execute(query, params).fetchone()[0]

    @contextmanager
    def transaction(self) -> Iterator[psycopg.Connection]:
        """Statements inside are one transaction: one commit."""
        with self.conn.transaction():
            yield self.conn
        self.commits += 1

    def close(self) -> None:
        self.conn.close()


class CommitWindow:
    """Commits made in one database between :meth:`start` and :meth:`stop`,
    less the bench's own (its probes', and the commit each probe's connection
    costs, measured once by :meth:`calibrate`)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.stats = Stats(conninfo_to_dict(url)["dbname"])
        self.connect_commits = 0
        self.probes: list[Probe] = []
        self.before: int | None = None
        self.wal_before: str | None = None
        #: WAL bytes the server wrote from :meth:`start` (or the last
        #: :meth:`wal_start`) to :meth:`stop`, shutdown included.
        self.wal_bytes: int | None = None
        #: CPU seconds the server used over the same span (None: unreadable).
        self.server_cpu_seconds: float | None = None
        self.server_cpu_before: float | None = None
        self.checkpointed = False

    def calibrate(self) -> int:
        """What opening and closing a probe adds to ``xact_commit`` (1 on PostgreSQL 15)."""
        self.stats.wait_gone()
        before = self.stats.commits()
        Probe(self.url).close()
        self.stats.wait_gone()
        self.connect_commits = self.stats.commits() - before
        return self.connect_commits

    def start(self) -> None:
        """Count from now. The backends still connected must have reported
        their earlier commits (exited, or idle workers after a settle)."""
        self.probes = []
        self.before = self.stats.commits()
        self.wal_start()

    def wal_start(self) -> None:
        """Count WAL from now, after a CHECKPOINT: a system's load written
        before this point is not its drain's (runqueue's drains load inside the
        commit window and call this once the load has committed)."""
        self.checkpointed = self.stats.checkpoint()
        self.wal_before = self.stats.wal_lsn()
        self.server_cpu_before = self.stats.server_cpu_seconds()

    def probe(self) -> Probe:
        probe = Probe(self.url)
        self.probes.append(probe)
        return probe

    def stop(self, timeout: float = 60) -> int:
        """Close the probes, wait for every backend of the database to exit
        (the caller stops its workers first), and return the count."""
        if self.before is None:
            raise RuntimeError("stop() without start()")
        for probe in self.probes:
            probe.close()
        self.stats.wait_gone(timeout=timeout)
        own = sum(p.commits for p in self.probes) + self.connect_commits * len(self.probes)
        commits = self.stats.commits() - self.before - own
        self.wal_bytes = self.stats.wal_since(self.wal_before) if self.wal_before else None
        after, before = self.stats.server_cpu_seconds(), self.server_cpu_before
        self.server_cpu_seconds = None if after is None or before is None else after - before
        self.before = self.wal_before = self.server_cpu_before = None
        return commits

    def close(self) -> None:
        self.stats.close()


def _stat(pid: int) -> tuple[int, int, int, int, int, int]:
    """(pid, ppid, utime, stime, cutime, cstime) of a process, in clock ticks."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (pid, int(fields[1]), *(int(fields[i]) for i in (11, 12, 13, 14)))  # type: ignore[return-value]


def process_cpu_seconds(pid: int) -> float:
    """utime + stime of a process and all its threads, from /proc/<pid>/stat."""
    _pid, _ppid, utime, stime, _cutime, _cstime = _stat(pid)
    return (utime + stime) / os.sysconf("SC_CLK_TCK")


def rate(count: int, seconds: float) -> float:
    return round(count / seconds, 1) if count and seconds > 0 else 0.0


def figures(
    runs: int,
    seconds: float,
    *,
    commits: int | None = None,
    cpu_seconds: float | None = None,
    cpu_source: str | None = None,
    complete: bool = True,
    wal_bytes: int | None = None,
    server_cpu_seconds: float | None = None,
) -> dict[str, Any]:
    """Runs/s, commits per run and CPU µs per run: the same arithmetic for
    runqueue, the raw reference and the peers."""
    out: dict[str, Any] = {
        "runs": runs,
        "seconds": round(seconds, 3),
        "runs_per_s": rate(runs, seconds) if complete else 0.0,
    }
    if not complete:
        out["incomplete"] = True
    if commits is not None:
        out["commits"] = commits
        out["commits_per_run"] = round(commits / runs, 3) if runs else None
    if wal_bytes is not None:
        out["wal_bytes"] = wal_bytes
        out["wal_bytes_per_run"] = round(wal_bytes / runs) if runs else None
    if server_cpu_seconds is not None:
        out["server_cpu_us_per_run"] = round(server_cpu_seconds * 1e6 / runs, 1) if runs else None
    if cpu_seconds is not None:
        out["cpu_us_per_run"] = round(cpu_seconds * 1e6 / runs, 1) if runs else None
        out["cpu_source"] = cpu_source
    return out


def commit_cost(url: str, n: int) -> dict[str, Any]:
    """One client, one row per transaction: ``INSERT`` then its ``COMMIT`` (one
    autocommit round trip), on a scratch table. What every other figure is
    bound by on this server; divide a rate by ``commits_per_s`` to compare
    machines."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE bench_commit_cost"
            " (id bigserial PRIMARY KEY, at timestamptz NOT NULL DEFAULT now())"
        )
        insert = "INSERT INTO bench_commit_cost DEFAULT VALUES"
        for _ in range(min(20, n)):
            conn.execute(insert, prepare=True)
        samples = []
        started = time.perf_counter()
        for _ in range(n):
            t = time.perf_counter()
            conn.execute(insert, prepare=True)
            samples.append((time.perf_counter() - t) * 1000)
        seconds = time.perf_counter() - started
        conn.execute("DROP TABLE bench_commit_cost")
        settings = dict(
            conn.execute(
                "SELECT name, setting FROM pg_settings WHERE name IN"
                " ('synchronous_commit', 'fsync', 'wal_sync_method', 'commit_delay')"
            ).fetchall()
        )
    latency = common.percentiles(samples)
    return {
        "commits": n,
        "ms_per_commit": round(seconds * 1000 / n, 3),
        "commits_per_s": rate(n, seconds),
        "p50_ms": latency["p50_ms"],
        "p99_ms": latency["p99_ms"],
        "settings": settings,
    }


def in_process(
    window: common.Window, commits: int | None = None, server: CommitWindow | None = None
) -> dict[str, Any]:
    """The figures of a drain an in-process worker made (``common.Window``);
    ``server``: the commit window it ran in (its WAL and server CPU)."""
    return (
        figures(
            window.count,
            window.seconds(),
            commits=commits,
            cpu_seconds=window.cpu_seconds(),
            cpu_source=common.Window.CPU_SOURCE,
            wal_bytes=server.wal_bytes if server else None,
            server_cpu_seconds=server.server_cpu_seconds if server else None,
        )
        | window.to_return()
    )


def enqueue(
    n: int, seconds: float, commits: int, per_call: int, server: CommitWindow | None = None
) -> dict[str, Any]:
    """An enqueue's figures: runs/s, commits, WAL bytes and server CPU per
    run, ``per_call`` runs a call."""
    return figures(
        n,
        seconds,
        commits=commits,
        wal_bytes=server.wal_bytes if server else None,
        server_cpu_seconds=server.server_cpu_seconds if server else None,
    ) | {"per_call": per_call}
