"""``manage.py runqueue_chaos``: the reliability soak. Prints figures; exits
non-zero when a figure that must be zero is not, or a run was lost."""

from __future__ import annotations

import json
import os
import tempfile
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection

from chaos import ledger
from chaos.runner import PROFILES, ChaosRun, Pooled, database_url, new_database
from chaos.verify import MUST_BE_ZERO


class Command(BaseCommand):
    help = (
        "Run workers under faults (SIGKILL, SIGSTOP past the lease, SIGTERM, terminated "
        "backends, a database restart) in a database of its own, then verify: nothing lost, "
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
        parser.add_argument("--keep-database", action="store_true")
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
        seed = options["seed"] if options["seed"] is not None else int.from_bytes(os.urandom(4))
        restart = None
        if not options["no_db_restart"] and not os.environ.get("DATABASE_URL"):
            from config.database import restart_embedded

            def restart() -> None:
                restart_embedded("immediate")

        name = new_database()
        original = connection.settings_dict["NAME"]
        with connection.cursor() as cursor:
            cursor.execute(f'CREATE DATABASE "{name}"')
        self.stdout.write(f"chaos: profile={options['profile']} seed={seed} database={name}")
        try:
            connection.close()
            connection.settings_dict["NAME"] = name
            call_command("migrate", verbosity=0)
            with connection.cursor() as cursor:
                cursor.execute(ledger.DDL)
            log_dir = Path(tempfile.mkdtemp(prefix="runqueue-chaos-"))
            with ExitStack() as stack:
                pooled = None
                if options["pooler"]:
                    pooled = self._pooler(stack, options["pooler"], options["pool_size"], name)
                result = ChaosRun(
                    profile,
                    database=name,
                    restart_db=restart,
                    seed=seed,
                    log_dir=log_dir,
                    pooled=pooled,
                ).run()
        finally:
            connection.close()
            connection.settings_dict["NAME"] = original
            if not options["keep_database"]:
                with connection.cursor() as cursor:
                    cursor.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        result = {"profile": options["profile"], "seed": seed} | result
        width = max(map(len, result))
        for key, value in result.items():
            self.stdout.write(f"  {key:<{width}}  {value}")
        self.stdout.write(f"  {'worker logs':<{width}}  {log_dir}")
        if options["json"]:
            options["json"].write_text(json.dumps(result, indent=2, default=str))
        failed = [k for k in MUST_BE_ZERO if result[k]]
        if failed:
            raise CommandError("chaos: these must be 0: " + ", ".join(failed))
        self.stdout.write(self.style.SUCCESS("chaos: every figure that must be 0 is 0"))

    def _pooler(self, stack: ExitStack, mode: str, pool_size: int, name: str) -> Pooled:
        """A PgBouncer in front of this server for the workers (stopped
        with ``stack``); the server restart fault restarts the server
        behind it."""
        from topology import pgbouncer

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
