"""``manage.py runqueue_demo``: submit a realistic mix of runs over the three
classes, spread over a while, so the admin shows a live system."""

from __future__ import annotations

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


class Command(BaseCommand):
    help = (
        "Submit demo runs: agent turns (some ask, fail, retry or end uncertain), "
        "research and digests; define the demo-digest schedule (every five minutes)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--runs", type=int, default=40, help="how many runs (default 40)")
        parser.add_argument(
            "--spread-seconds",
            type=float,
            default=120,
            help="schedule runs over this many seconds from now (default 120)",
        )
        parser.add_argument("--seed", type=int, default=None)

    def handle(self, *args: Any, **options: Any) -> None:
        rng = random.Random(options["seed"])  # noqa: S311 - demo data
        now = timezone.now()
        counts: Counter[str] = Counter()
        for i in range(options["runs"]):
            when = now + dt.timedelta(seconds=rng.uniform(0, options["spread_seconds"]))
            roll = rng.random()
            if roll < 0.6:
                scenario = rng.choice(SCENARIOS)
                sub = runqueue.submit(
                    kind="demo.agent_turn",
                    payload={"scenario": scenario, "order_id": f"A-{100 + i}"},
                    session_id=f"demo-{uuid.uuid4().hex[:8]}",
                    principal=f"user:{rng.randint(1, 9)}",
                    priority=PriorityClass.INTERACTIVE,
                    scheduled_for=when,
                    max_attempts=3,
                )
                counts[f"agent_turn/{scenario}"] += 1
            elif roll < 0.9:
                sub = runqueue.submit(
                    kind="demo.research",
                    payload={"topic": f"topic {i}", "steps": rng.randint(2, 5)},
                    priority=PriorityClass.ASYNC,
                    scheduled_for=when,
                )
                counts["research"] += 1
            else:
                sub = runqueue.submit(
                    kind="demo.digest",
                    payload={"day": str(now.date())},
                    priority=PriorityClass.MAINTENANCE,
                    scheduled_for=when,
                )
                counts["digest"] += 1
            del sub
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
            "Submitted {} demo runs over {:.0f}s: {}".format(
                options["runs"],
                options["spread_seconds"],
                ", ".join(f"{k}={v}" for k, v in sorted(counts.items())),
            )
            + "; schedule demo-digest fires every five minutes"
        )
