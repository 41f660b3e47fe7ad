"""``manage.py runqueue_chaos``: the reliability soak. Prints figures; exits
non-zero when a figure that must be zero is not, or a run was lost."""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection

from tools.chaos import ledger
from tools.chaos.runner import PROFILES, ChaosRun, Pooled, database_url, new_database
from tools.chaos.verify import MUST_BE_ZERO, MUST_BE_ZERO_ACROSS_FAILOVERS
from tools.topology import clusters


class Command(BaseCommand):
    help = (
        "Run workers under faults (SIGKILL, SIGSTOP past the lease, SIGTERM, terminated "
        "backends, a database restart; --profile failover: failovers to a synchronous "
        "standby instead) in a database of its own, then verify: nothing lost, "
        "exactly-once transitions, no repeated non-idempotent effect."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--profile", choices=sorted(PROFILES), default="short")
        parser.add_argument("--seed", type=int, default=None)
        parser.add_argument("--json", type=Path, help="also write the figures to this file")
        parser.add_argument(
            "--no-db-restart",
            action="store_true",
            help="skip the database restart (always skipped when DATABASE_URL is set: "
            "runqueue cannot restart a server it did not start)",
        )
        parser.add_argument(
            "--keep-database",
            action="store_true",
            help="keep the soak's database (not with the failover profile: its clusters go)",
        )
        parser.add_argument(
            "--pooler",
            choices=["transaction"],
            help="run the workers through a real PgBouncer in this pool mode (their LISTEN "
            "straight to the server, the controller too); its pool far smaller than their slots",
        )
        parser.add_argument(
            "--pool-size",
            type=int,
            default=4,
            help="the pooler's server connections (default_pool_size; default 4)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        profile = PROFILES[options["profile"]]
        if profile.failovers and options["pooler"]:
            raise CommandError("--pooler is not for the failover profile (its own clusters)")
        seed = options["seed"] if options["seed"] is not None else int.from_bytes(os.urandom(4))
        name = new_database()
        self.stdout.write(f"chaos: profile={options['profile']} seed={seed} database={name}")
        log_dir = Path(tempfile.mkdtemp(prefix="runqueue-chaos-"))
        place = (
            _on_a_cluster_pair(name)
            if profile.failovers
            else _on_this_server(name, options["no_db_restart"], options["keep_database"])
        )
        # A SIGTERM (CI cancelled, a supervisor) unwinds like an error: the
        # workers stop, the database or the cluster pair goes.
        previous = signal.signal(signal.SIGTERM, _exit_on_sigterm)
        try:
            with place as faults, ExitStack() as stack:
                call_command("migrate", verbosity=0)
                with connection.cursor() as cursor:
                    cursor.execute(ledger.DDL)
                if options["pooler"]:
                    faults["pooled"] = self._pooler(
                        stack, options["pooler"], options["pool_size"], name
                    )
                result = ChaosRun(
                    profile, database=name, seed=seed, log_dir=log_dir, **faults
                ).run()
        finally:
            signal.signal(signal.SIGTERM, previous)
        result = {"profile": options["profile"], "seed": seed} | result
        width = max(map(len, result))
        for key, value in result.items():
            self.stdout.write(f"  {key:<{width}}  {value}")
        self.stdout.write(f"  {'worker logs':<{width}}  {log_dir}")
        if options["json"]:
            options["json"].write_text(json.dumps(result, indent=2, default=str))
        must_be_zero = MUST_BE_ZERO + (MUST_BE_ZERO_ACROSS_FAILOVERS if profile.failovers else ())
        failed = [k for k in must_be_zero if result[k]]
        if failed:
            raise CommandError("chaos: these must be 0: " + ", ".join(failed))
        self.stdout.write(self.style.SUCCESS("chaos: every figure that must be 0 is 0"))

    def _pooler(self, stack: ExitStack, mode: str, pool_size: int, name: str) -> Pooled:
        """A PgBouncer in front of this server for the workers (stopped
        with ``stack``); the server restart fault restarts the server
        behind it."""
        from tools.topology import pgbouncer

        server = connection.settings_dict
        try:
            bouncer = stack.enter_context(
                # After the restart fault PgBouncer waits server_login_retry
                # (15 s by default) between logins that failed while the
                # server was down, holding every worker back: 1 s, as
                # docs/reliability.md advises behind a pooler.
                pgbouncer.start(server, mode, pool_size=pool_size, extra={"server_login_retry": 1})
            )
        except pgbouncer.Unavailable as exc:
            raise CommandError(str(exc)) from exc
        return Pooled(
            url=database_url({**server, **bouncer.through}, name),
            listen_url=database_url(server, name),
            pool_size=pool_size,
        )


def _exit_on_sigterm(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


@contextmanager
def _on_this_server(name: str, no_restart: bool, keep: bool) -> Iterator[dict[str, Any]]:
    """A database of the soak's own on the configured server; the embedded
    server restarted halfway (never one runqueue did not start)."""
    restart = None
    if not no_restart and not os.environ.get("DATABASE_URL"):
        from config.database import restart_embedded

        def restart() -> None:
            restart_embedded("immediate")

    original = connection.settings_dict["NAME"]
    with connection.cursor() as cursor:
        cursor.execute(f'CREATE DATABASE "{name}"')
    try:
        connection.close()
        connection.settings_dict["NAME"] = name
        yield {"restart_db": restart}
    finally:
        connection.close()
        connection.settings_dict["NAME"] = original
        if not keep:
            with connection.cursor() as cursor:
                cursor.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextmanager
def _on_a_cluster_pair(name: str) -> Iterator[dict[str, Any]]:
    """The failover profile's database: on a primary and a synchronous
    standby of its own (tools/topology/clusters.py), reached by the controller and
    the workers through a libpq multi-host URL with
    ``target_session_attrs=read-write``. The pair is dropped at the end,
    whatever happened."""
    if not clusters.available():
        raise CommandError("the failover profile needs PostgreSQL 15's server binaries")
    pair = clusters.Pair()
    saved = dict(connection.settings_dict)
    try:
        pair.create()
        pair.sql(pair.primary, f'CREATE DATABASE "{name}"')
        pair.synchronous(True)
        pair.wait_replayed()
        connection.close()
        connection.settings_dict.update(
            NAME=name,
            USER="postgres",
            PASSWORD="",
            HOST="127.0.0.1,127.0.0.1",
            PORT=f"{pair.primary.port},{pair.standby.port}",
            OPTIONS={"target_session_attrs": "read-write", "connect_timeout": CONNECT_TIMEOUT},
        )

        def failover() -> dt.datetime:
            # What the profile promises needs a synchronous standby at the crash.
            states = pair.sql(pair.primary, "SELECT sync_state FROM pg_stat_replication")
            if states != [("sync",)]:
                raise CommandError(f"the standby is not synchronous: {states}")
            promoted_at = pair.failover()
            # The dead node as a new standby; synchronous again, and caught
            # up on what the new primary committed alone meanwhile, before
            # the next failover can come.
            pair.rebuild_standby(synchronous=True)
            pair.wait_replayed()
            return promoted_at

        url = f"{pair.url(name)}&connect_timeout={CONNECT_TIMEOUT}"
        # Workers reach the pair alone: no pooler, no listener database.
        env = {"DATABASE_URL": url, "LISTEN_DATABASE_URL": "", "RUNQUEUE_POOLER": ""}
        yield {"restart_db": None, "failover": failover, "worker_env": env}
    finally:
        connection.close()
        connection.settings_dict.clear()
        connection.settings_dict.update(saved)
        pair.drop()


#: Seconds a connect to one node may take before libpq tries the next.
CONNECT_TIMEOUT = 2
