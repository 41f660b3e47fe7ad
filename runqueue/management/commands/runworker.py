"""``manage.py runworker``: parse options, build a Pool, run it."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from runqueue.conf import get_settings
from runqueue.management.options import seconds_within, whole_number
from runqueue.models import PriorityClass
from runqueue.worker.config import (
    CLAIM_AHEAD,
    CLAIM_LANES,
    CLAIM_LANES_MAX,
    METRICS_HOST,
    PoolConfig,
    default_worker_id,
)
from runqueue.worker.pool import Pool, settle_heap
from runqueue.worker.processes import CHILD_ENV, PROCESSES_MAX, Supervisor, child_args, split
from runqueue.worker.spec import DEFAULT_SLOTS, SlotSpec


def slot_spec(text: str) -> SlotSpec:
    try:
        return SlotSpec.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


seconds = seconds_within(lambda value: 0 < value <= 86400, "more than 0 and at most 86400")


ahead = whole_number(0, 256)
processes = whole_number(1, PROCESSES_MAX)
lanes = whole_number(1, CLAIM_LANES_MAX)


def port(text: str) -> int:
    if not (text.isascii() and text.isdigit() and 0 < int(text) < 65536):
        raise argparse.ArgumentTypeError(f"expected a TCP port (1-65535), got {text!r}")
    return int(text)


#: The longest worker id: it is the Worker row's key and each lease's owner.
WORKER_ID_MAX = 255


def worker_id(text: str) -> str:
    if not 0 < len(text) <= WORKER_ID_MAX or not text.isprintable():
        raise argparse.ArgumentTypeError(
            f"expected 1-{WORKER_ID_MAX} printable characters, got {len(text)} characters"
            if len(text) > WORKER_ID_MAX or not text
            else f"expected 1-{WORKER_ID_MAX} printable characters, got {text!r}"
        )
    return text


def grace(text: str) -> float:
    return 0.0 if text.strip() in ("0", "0.0") else seconds(text)


def heartbeat_for(lease_seconds: float, given: float | None) -> float:
    """The heartbeat interval: the one given, else HEARTBEAT_SECONDS, but at
    most a third of the lease, so ``--lease-seconds 5`` alone starts a worker
    whose leases survive a missed heartbeat (an interval given explicitly is
    checked by PoolConfig, as before)."""
    if given is not None:
        return given
    return min(get_settings().HEARTBEAT_SECONDS, lease_seconds / 3)


class Command(BaseCommand):
    help = (
        "Run a runqueue worker: slot groups with reserved capacity per priority class. "
        "SIGTERM/SIGINT stop claiming and let running work finish within the grace period; "
        "a second signal exits at once."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        conf = get_settings()
        parser.add_argument(
            "--slots",
            action="append",
            type=slot_spec,
            metavar="CLASSES=N[:loop]",
            help=f"N slots (N runs at once, up to 10000) that claim only from CLASSES "
            f"({', '.join(PriorityClass.slugs())}, or a comma list). An async def handler runs "
            "on the event loop and holds no thread; a sync one runs on one of the group's "
            "threads (one per slot, at most 256), or with ':loop' in a thread of its own "
            "(the slots are then coroutines); repeatable. Default: " + " ".join(DEFAULT_SLOTS),
        )
        # The options that take one value, in --help's order: the flag, its
        # parser, its default, its help.
        valued: tuple[tuple[str, Callable[[str], object], object, str], ...] = (
            (
                "--lease-seconds",
                seconds,
                conf.LEASE_SECONDS,
                "lease length (default: %(default)s)",
            ),
            (
                "--heartbeat-seconds",
                seconds,
                None,
                f"how often held leases are renewed (default: {conf.HEARTBEAT_SECONDS}, "
                "or a third of a lease shorter than three times that)",
            ),
            (
                "--sweep-seconds",
                seconds,
                conf.SWEEP_SECONDS,
                "how often expired leases are swept (default: %(default)s)",
            ),
            (
                "--poll-seconds",
                seconds,
                conf.POLL_SECONDS,
                "fallback poll when no NOTIFY arrives (default: %(default)s)",
            ),
            (
                "--grace-seconds",
                grace,
                conf.GRACE_SECONDS,
                "on SIGTERM, how long running work may finish (default: %(default)s)",
            ),
            (
                "--claim-ahead",
                ahead,
                CLAIM_AHEAD,
                "leases a non-interactive slot group may hold beyond its idle slots while its "
                "runs are short, 0 to turn off (default: %(default)s)",
            ),
            (
                "--claim-lanes",
                lanes,
                CLAIM_LANES,
                "claim lanes per non-interactive slot group: each lane is a share of its slots "
                "with its own claim thread and database connection, so one lane's statement "
                "overlaps the others' work; 1 for one lane (default: %(default)s)",
            ),
            (
                "--processes",
                processes,
                1,
                "run the slots in this many worker processes, each --slots value shared out "
                "among them (async=8 with 2: async=4 in each); the command supervises them, "
                "forwards its signals and exits with them, 1 if one exits unasked. Each process "
                "is a worker of its own (id <worker-id>-<n>, metrics port <port>+<n>) "
                "(default: %(default)s)",
            ),
        )
        for flag, parse, default, text in valued:
            parser.add_argument(flag, type=parse, default=default, help=text)
        parser.add_argument(
            "--burst", action="store_true", help="drain the runs that are due, then exit 0"
        )
        parser.add_argument(
            "--metrics-port",
            type=port,
            default=None,
            help="serve this worker's Prometheus metrics on this port (path /metrics)",
        )
        parser.add_argument(
            "--metrics-host",
            default=METRICS_HOST,
            help="the address the metrics port binds (default: %(default)s)",
        )
        parser.add_argument(
            "--worker-id",
            type=worker_id,
            default=None,
            help="this worker's name in the Worker table (default: host-pid-random)",
        )

    # argparse's values are untyped, as BaseCommand.handle's stub says.
    def handle(self, *args: Any, **options: Any) -> None:
        self._configure_logging(options["verbosity"])
        try:
            config = PoolConfig(
                slots=tuple(options["slots"] or [SlotSpec.parse(s) for s in DEFAULT_SLOTS]),
                lease_seconds=options["lease_seconds"],
                heartbeat_seconds=heartbeat_for(
                    options["lease_seconds"], options["heartbeat_seconds"]
                ),
                sweep_seconds=options["sweep_seconds"],
                poll_seconds=options["poll_seconds"],
                grace_seconds=options["grace_seconds"],
                claim_ahead=options["claim_ahead"],
                claim_lanes=options["claim_lanes"],
                burst=options["burst"],
                worker_id=options["worker_id"] or default_worker_id(),
                metrics_port=options["metrics_port"],
                metrics_host=options["metrics_host"],
            )
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        if not any(PriorityClass.MAINTENANCE in spec.classes for spec in config.slots) and not (
            os.environ.get(CHILD_ENV)  # its supervisor warned for all its processes
        ):
            # Housekeeping (retention's pruning) runs as maintenance runs: a
            # fleet of such workers never runs it, and history grows.
            # A log record, not a line of its own: the project's log format
            # (RUNQUEUE_LOG_FORMAT=json) applies to it as to every other.
            logging.getLogger("runqueue.worker").warning(
                "No slot of this worker takes maintenance runs (--slots "
                "maintenance=1, or a list naming maintenance): runqueue's housekeeping "
                "runs as maintenance runs, so unless another worker has such a slot "
                "they stay queued and finished runs are never pruned."
            )
        if options["processes"] > 1:
            shares = split(config.slots, options["processes"])
            children = [child_args(options, share, i) for i, share in enumerate(shares)]
            code = Supervisor(children).run()
            if code:
                sys.exit(code)
            return
        pool = Pool(config)
        try:
            pool.serve()  # before the worker registers: a bad port claims nothing
        except (OSError, ValueError) as exc:  # a NUL or an unencodable host: ValueError
            raise CommandError(
                f"cannot serve metrics on {options['metrics_host']}:"
                f"{options['metrics_port']}: {exc}"
            ) from exc
        pool.install_signal_handlers()
        settle_heap()
        code = pool.run()
        if code:
            sys.exit(code)

    def _configure_logging(self, verbosity: int) -> None:
        logger = logging.getLogger("runqueue")
        if not logger.handlers and not logging.getLogger().handlers:
            handler = logging.StreamHandler(self.stdout)
            handler.setFormatter(
                logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s")
            )
            logger.addHandler(handler)
        if verbosity >= 2:
            logger.setLevel(logging.DEBUG)
        elif logger.level == logging.NOTSET:
            logger.setLevel(logging.INFO)
