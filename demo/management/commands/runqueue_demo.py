"""``manage.py runqueue_demo``: submit a realistic mix of runs over the three
classes, spread over a while, so the admin shows a live system.

Every start also submits a showcase: one run bound for each state a
newcomer should find in the console once a worker runs (succeeded,
dead-lettered, uncertain, waiting for the user, running, queued), so no view
is empty by chance. ``--seed`` makes the mix repeatable (kinds, scenarios,
payloads, principals, schedule); run and session ids stay unique.
"""

from __future__ import annotations

import argparse
import datetime as dt
import random
import uuid
from collections import Counter
from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from django.utils import timezone

import runqueue
from runqueue import PriorityClass, schedules

SCENARIOS = ["ok"] * 6 + ["ask", "decline", "flaky", "timeout"]

#: The most --runs and --spread-seconds may ask for.
MAX_RUNS = 10_000
MAX_SPREAD_SECONDS = 86_400
#: How long the showcase's running research job runs (a worker holds it).
RUNNING_SECONDS = 300
#: When the showcase's queued digest is due: a newcomer finds it waiting.
QUEUED_DELAY = dt.timedelta(hours=12)


def agent_turn(scenario: str, order_id: str, principal: str, when: dt.datetime) -> dict:
    return {
        "kind": "demo.agent_turn",
        "payload": {"scenario": scenario, "order_id": order_id},
        "session_id": f"demo-{uuid.uuid4().hex[:8]}",
        "principal": principal,
        "priority": PriorityClass.INTERACTIVE,
        "scheduled_for": when,
        "max_attempts": 3,
    }


def showcase(now: dt.datetime) -> list[tuple[str, dict]]:
    """One run for each state: (the state it reaches, submit arguments)."""
    return [
        ("succeeded", agent_turn("ok", "A-001", "user:1", now)),
        ("dead-lettered", agent_turn("decline", "A-002", "user:2", now)),
        ("uncertain", agent_turn("timeout", "A-003", "user:3", now)),
        ("waiting for user", agent_turn("ask", "A-004", "user:4", now)),
        (
            "running",
            {
                "kind": "demo.research",
                "payload": {
                    "topic": "quarterly churn deep dive",
                    "steps": RUNNING_SECONDS // 5,
                    "step_seconds": 5,
                },
                "priority": PriorityClass.ASYNC,
                "scheduled_for": now,
            },
        ),
        (
            "queued",
            {
                "kind": "demo.digest",
                "payload": {"day": str((now + QUEUED_DELAY).date())},
                "priority": PriorityClass.MAINTENANCE,
                "scheduled_for": now + QUEUED_DELAY,
            },
        ),
    ]


def mix(rng: random.Random, runs: int, spread: float, now: dt.datetime) -> list[tuple[str, dict]]:
    """The random mix: (label, submit arguments), decided by ``rng`` alone."""
    planned = []
    for i in range(runs):
        when = now + dt.timedelta(seconds=rng.uniform(0, spread))
        roll = rng.random()
        if roll < 0.6:
            scenario = rng.choice(SCENARIOS)
            principal = f"user:{rng.randint(1, 9)}"
            planned.append(
                (f"agent_turn/{scenario}", agent_turn(scenario, f"A-{100 + i}", principal, when))
            )
        elif roll < 0.9:
            payload = {"topic": f"topic {i}", "steps": rng.randint(2, 5)}
            planned.append(
                (
                    "research",
                    {
                        "kind": "demo.research",
                        "payload": payload,
                        "priority": PriorityClass.ASYNC,
                        "scheduled_for": when,
                    },
                )
            )
        else:
            planned.append(
                (
                    "digest",
                    {
                        "kind": "demo.digest",
                        "payload": {"day": str(now.date())},
                        "priority": PriorityClass.MAINTENANCE,
                        "scheduled_for": when,
                    },
                )
            )
    return planned


def count(text: str) -> int:
    """--runs: a whole number of runs, 0-10000."""
    if not (text.isascii() and text.isdigit() and len(text) <= 5 and int(text) <= MAX_RUNS):
        raise argparse.ArgumentTypeError(
            f"expected a whole number from 0 to {MAX_RUNS}, got {text[:20]!r}"
        )
    return int(text)


def spread(text: str) -> float:
    """--spread-seconds: 0 to a day."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not 0 <= value <= MAX_SPREAD_SECONDS:  # also refuses nan
        raise argparse.ArgumentTypeError(
            f"must be from 0 to {MAX_SPREAD_SECONDS} seconds, got {text!r}"
        )
    return value


class Command(BaseCommand):
    help = (
        "Submit demo runs: one bound for each state (succeeded, dead-lettered, uncertain, "
        "waiting for user, running, queued), then a random mix of agent turns (some ask, "
        "fail, retry or end uncertain), research and digests; define the demo-digest "
        "schedule (every five minutes)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--runs", type=count, default=40, help="random runs (default 40)")
        parser.add_argument(
            "--spread-seconds",
            type=spread,
            default=120,
            help="schedule runs over this many seconds from now (default 120)",
        )
        parser.add_argument(
            "--seed", type=int, default=None, help="repeat the same mix (default: random)"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        seed = options["seed"]
        if seed is None:
            seed = random.SystemRandom().randrange(2**31)
        rng = random.Random(seed)  # noqa: S311 - demo data
        now = timezone.now()
        counts: Counter[str] = Counter()
        for label, arguments in showcase(now):
            runqueue.submit(**arguments)
            counts[f"showcase:{label}"] += 1
        for label, arguments in mix(rng, options["runs"], options["spread_seconds"], now):
            runqueue.submit(**arguments)
            counts[label] += 1
        # The demo's one schedule: a digest every five minutes, Paris time.
        schedules.define(
            "demo-digest",
            cron="*/5 * * * *",
            timezone="Europe/Paris",
            kind="demo.digest",
            payload={"day": "today"},
            priority=PriorityClass.MAINTENANCE,
        )
        self.stdout.write(
            "Submitted {} demo runs (seed {}; --seed {} repeats the mix) over {:.0f}s: {}".format(
                sum(counts.values()),
                seed,
                seed,
                options["spread_seconds"],
                ", ".join(f"{k}={v}" for k, v in sorted(counts.items())),
            )
            + "; schedule demo-digest fires every five minutes"
        )
