"""``manage.py runqueue_replay --kind K --last N [--handler-version V]``: replay the
last N finished runs of a kind against the handler as it is now, writing
nothing (``runqueue.history.replay``), and say per run whether it matched or where
it diverged. Exit status 1 if any diverged: a check to run before a deploy."""

from __future__ import annotations

import argparse
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from runqueue import registry
from runqueue.errors import UnknownKind
from runqueue.history import replay
from runqueue.management.options import whole_number

#: The most runs one command replays.
MOST = 10_000


#: ``--last``'s parser.
count = whole_number(1, MOST)


class Command(BaseCommand):
    help = (
        "Replay the last N finished (succeeded or failed) runs of a kind against its handler "
        "as this code has it, in a dry mode: each tool call, spawn and patch decision must be "
        "the recorded one and gets the recorded outcome; nothing is written. Prints per run "
        "match, or diverged with the step and the difference; exits 1 if any diverged."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--kind", required=True, help="The kind whose runs to replay.")
        parser.add_argument(
            "--last", type=count, required=True, metavar="N", help="How many runs, newest first."
        )
        parser.add_argument(
            "--handler-version",
            type=count,
            metavar="V",
            help="The handler version to replay them against (default: the newest here).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        kind, version = options["kind"], options["handler_version"]
        try:
            version = registry.registration(kind, version).version
        except UnknownKind as exc:
            raise CommandError(str(exc)) from None
        results = replay.replay(kind, options["last"], version)
        self.stdout.write(
            f"Replaying {len(results)} finished run(s) of {kind} against version {version}"
        )
        for result in results:
            self.stdout.write(result.line())
        diverged = sum(r.verdict == "diverged" for r in results)
        self.stdout.write(f"{len(results) - diverged} matched, {diverged} diverged")
        if diverged:
            raise CommandError(f"{diverged} of {len(results)} run(s) diverged", returncode=1)
