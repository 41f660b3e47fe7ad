"""``manage.py runqueue_prune [--older-than SECONDS]``: one retention pass,
for operators who prefer cron to the worker's housekeeping run."""

from __future__ import annotations

import argparse
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from runqueue.conf import get_settings
from runqueue.history import housekeeping
from runqueue.management.options import seconds_within

#: ``--older-than``'s parser.
retention = seconds_within(lambda value: value >= 0, "0 or more")


class Command(BaseCommand):
    help = (
        "Make the day partitions ahead and drop every day of finished runs and events "
        "wholly older than the retention (TERMINAL_RUN_RETENTION_SECONDS by default)."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--older-than",
            type=retention,
            metavar="SECONDS",
            help="Retention for this pass, instead of TERMINAL_RUN_RETENTION_SECONDS.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        older_than = options["older_than"]
        if older_than is None:
            older_than = get_settings().TERMINAL_RUN_RETENTION_SECONDS
        if older_than is None:
            raise CommandError(
                "TERMINAL_RUN_RETENTION_SECONDS is not set: keeping every run. "
                "Pass --older-than SECONDS to prune anyway."
            )
        pruned = housekeeping.prune_terminal(older_than)
        self.stdout.write(
            f"dropped {len(pruned.days)} day partitions: {pruned.runs} runs, {pruned.events} "
            f"events ({pruned.kept_events} events of kept runs moved) in {pruned.seconds:.2f} s, "
            f"{pruned.lock_seconds:.3f} s waiting for or holding the parents' locks"
        )
