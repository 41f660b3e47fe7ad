"""The budget soak (issue 23's measurement, ``--parts budgets``): three
tenants with shares 1:1:2 on one budget, kept saturated, drained by two
``runworker`` processes of four async slots each for ``budget_seconds``,
against a fake provider (``tools.bench.handlers.budget_call``: a sleep, a random
used count settled after it, sometimes a second call reserved with
``ctx.reserve`` or waited for, and a 429 now and then that pauses the key
for its Retry-After).

What it checks, and from what:

- tokens and calls in the worst window of the budget, against the budget
  plus one reservation (the largest call a run declares), and the calls
  reserved past that: ``tools.chaos.verify.budget_overruns``, the replay of the
  event log the chaos soak uses;
- calls reserved while the key was paused (must be 0): every fake call and
  every pause is recorded by the handler (a JSON line per event, a file per
  worker process), and a call's reservation time is compared with the pauses
  in force. The reservation time is a lower bound (the claim's transaction
  start, ``run.claimed``; or the moment before ``ctx.reserve``) and a pause's
  start an upper bound (read after ``pause_budget`` returned), so a call
  counted here was certainly reserved under the pause. Calls reserved before
  a pause began and started after it (in flight when the 429 came) are
  counted apart;
- claim-then-reject cycles (must be 0): claims of the soak's runs (each
  ``run.claimed``, by run and epoch) after which the handler made no call,
  but for those a worker gave back itself (a lease claimed ahead that
  waited too long, or the soak's stop: counted apart);
- each tenant's share of the tokens used against its configured share;
- runs/s, commits per finished run (``pg_stat_database`` of the bench
  database over the soak, workers' start-up and shutdown included, less the
  bench's own polls and top-ups) and the workers' CPU per finished run.
"""

from __future__ import annotations

import json
import os
import random
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from tools.bench import measure, rq_db, rq_drain
from tools.bench.common import BUDGET_LOG_ENV, Profile

KEY = "bench:model"
KIND = "bench.budget_call"
#: Tenants and their configured shares of the budget.
SHARES = {"bench-a": 1, "bench-b": 1, "bench-c": 2}
#: The budget per second of its window (tokens, requests): the window's
#: budget is these times ``profile.budget_window``.
TOKENS_PER_SECOND = 2000
REQUESTS_PER_SECOND = 6
#: A call's declared estimate (uniform); the largest is "one reservation".
ESTIMATE = (200, 1000)
#: The fake call's length, the share of calls that get a 429, the share
#: that use more than they declared (up to 1.3 times), and the share of
#: runs that make a second call.
CALL_SECONDS = (0.05, 0.25)
P429 = 0.01
OVER = 0.1
SECOND_CALL = 0.3
#: Queued runs per tenant: topped up to HIGH whenever one falls below LOW.
LOW, HIGH = 15, 30
PROCESSES, SLOTS = 2, 4
#: Seconds between the bench's polls of the queue (each a counted commit).
POLL_SECONDS = 0.5
CPU_SOURCE = rq_drain.CPU_SOURCE
#: The queued runs of the soak, per tenant.
QUEUED = (
    "SELECT tenant, count(*) FROM runqueue_run WHERE status = 'queued' AND kind = %s"
    " GROUP BY tenant"
)


def _requests(n: dict[str, int], rng: random.Random) -> list[Any]:
    import runqueue
    from runqueue.models import PriorityClass

    out = []
    for tenant, count in n.items():
        for _ in range(count):
            estimate = rng.randint(*ESTIMATE)
            payload = {
                "key": KEY,
                "tokens": estimate,
                "calls": 2 if rng.random() < SECOND_CALL else 1,
                "sleep": list(CALL_SECONDS),
                "p429": P429,
                "over": OVER,
            }
            out.append(
                runqueue.SubmitRequest(
                    kind=KIND,
                    payload=payload,
                    tenant=tenant,
                    priority=PriorityClass.ASYNC,
                    budget=(KEY, estimate),
                )
            )
    return out


def _top_up(queued: dict[str, int], rng: random.Random) -> bool:
    """Submit up to HIGH for every tenant below LOW, in one call (submit_many
    is one durable transaction: one commit); True if it submitted."""
    import runqueue

    wanted = {t: HIGH - queued.get(t, 0) for t in SHARES if queued.get(t, 0) < LOW}
    if not wanted:
        return False
    runqueue.submit_many(_requests(wanted, rng))
    return True


def soak(profile: Profile, url: str, log, seconds: float | None = None) -> dict[str, Any]:
    """The soak in the database ``url`` (Django's connection points at it)."""
    from django.db import connections

    from runqueue.models import Budget

    seconds = profile.budget_seconds if seconds is None else seconds
    window_s = profile.budget_window
    tokens, requests = TOKENS_PER_SECOND * window_s, REQUESTS_PER_SECOND * window_s
    rng = random.Random(23)
    rq_db.reset()
    Budget.objects.filter(key=KEY).delete()
    Budget.objects.create(
        key=KEY, tokens=tokens, requests=requests, per_seconds=window_s, shares=SHARES
    )
    _top_up({}, rng)  # the backlog, ahead of the workers
    connections.close_all()
    folder = tempfile.TemporaryDirectory(prefix="bench-budgets-")
    window = measure.CommitWindow(url)
    top_ups = 0
    try:
        connect = window.calibrate()
        window.start()
        probe = window.probe()
        load_before = os.getloadavg()
        workers = rq_drain.Workers(
            url, PROCESSES, SLOTS, "budgets", env={BUDGET_LOG_ENV: folder.name}
        )
        try:
            _wait_registered(probe, workers)
            cpu_before = workers.cpu_seconds()
            started_wall, started = time.time(), time.monotonic()
            next_log = started + max(10.0, seconds / 10)
            while (now := time.monotonic()) < started + seconds:
                workers.check_alive()
                queued: dict[str, int] = dict(probe.execute(QUEUED, [KIND]).fetchall())
                top_ups += _top_up(queued, rng)
                if now >= next_log:
                    done = probe.value(
                        "SELECT count(*) FROM runqueue_run WHERE kind = %s"
                        " AND status = 'succeeded'",
                        [KIND],
                    )
                    log(f"runqueue: budget soak, {now - started:.0f} s, {done} runs finished")
                    next_log += max(10.0, seconds / 10)
                time.sleep(POLL_SECONDS)
            ended_wall = time.time()
            elapsed = time.monotonic() - started
            cpu = workers.cpu_seconds() - cpu_before
        finally:
            workers.stop()
        connections.close_all()
        # The bench's own: its probe (the window subtracts it), each top-up's
        # transaction and its connection's opening.
        commits = window.stop() - top_ups - (connect if top_ups else 0)
        load_after = os.getloadavg()
    finally:
        window.close()
    try:
        records = _read_records(Path(folder.name))
    finally:
        folder.cleanup()
    out = _figures(records, started_wall, ended_wall, tokens, requests, window_s)
    runs = out.pop("runs_finished")
    return (
        measure.figures(runs, elapsed, commits=commits, cpu_seconds=cpu, cpu_source=CPU_SOURCE)
        | out
        | {
            "tenants": SHARES,
            "processes": PROCESSES,
            "slots_per_process": SLOTS,
            "budget": {
                "key": KEY,
                "tokens": tokens,
                "requests": requests,
                "per_seconds": window_s,
            },
            "top_ups": top_ups,
            "load_average_before_after": [round(load_before[0], 2), round(load_after[0], 2)],
        }
    )


def _wait_registered(probe: measure.Probe, workers: rq_drain.Workers) -> None:
    end = time.monotonic() + 120
    query = "SELECT count(*) FROM runqueue_worker WHERE stopped_at IS NULL"
    while probe.value(query) < PROCESSES:
        workers.check_alive()
        if time.monotonic() > end:
            raise RuntimeError("budget soak: runworker processes did not start")
        time.sleep(0.05)


def _read_records(folder: Path) -> list[dict[str, Any]]:
    return [
        json.loads(line)
        for path in sorted(folder.glob("*.jsonl"))
        for line in path.read_text().splitlines()
        if line
    ]


def _claims() -> list[tuple[str, int, float]]:
    """(run, epoch, when) of every claim of the soak's runs."""
    with rq_db.cursor() as cur:
        cur.execute(
            "SELECT e.run_id::text, e.lease_epoch, extract(epoch FROM e.created_at)::float8"
            " FROM runqueue_event_log e JOIN runqueue_run r ON r.id = e.run_id"
            " WHERE e.type = 'run.claimed' AND r.kind = %s",
            [KIND],
        )
        return [(run, int(epoch), float(at)) for run, epoch, at in cur.fetchall()]


def _given_back() -> set[tuple[str, int]]:
    """(run, epoch) of the soak's claims a worker gave back itself: a lease
    claimed ahead that waited too long (no handler ran; its reservation is
    refunded), or the soak's own stop (``run.requeued`` with that reason, at
    the next epoch). Nothing rejected them."""
    with rq_db.cursor() as cur:
        cur.execute(
            "SELECT e.run_id::text, e.lease_epoch - 1 FROM runqueue_event_log e"
            " JOIN runqueue_run r ON r.id = e.run_id"
            " WHERE e.type = 'run.requeued' AND r.kind = %s"
            " AND e.data->>'reason' IN ('claimed_ahead', 'shutdown')",
            [KIND],
        )
        return {(run, int(epoch)) for run, epoch in cur.fetchall()}


def _figures(
    records: list[dict[str, Any]],
    started: float,
    ended: float,
    tokens: int,
    requests: int,
    window_s: int,
) -> dict[str, Any]:
    from tools.chaos.verify import budget_overruns

    calls = [r for r in records if r["e"] == "call"]
    pauses = sorted((r["set"], r["until"]) for r in records if r["e"] == "pause")
    claims = _claims()
    claimed_at = {(run, epoch): at for run, epoch, at in claims}

    # Calls reserved under a pause (must be 0), and calls in flight at one.
    under_pause = in_flight = 0
    for call in calls:
        reserved = call["reserved"]
        if reserved is None:
            reserved = claimed_at.get((call["run"], call["epoch"]), call["at"])
        if any(begun < reserved < until for begun, until in pauses):
            under_pause += 1
        elif any(begun < call["at"] < until for begun, until in pauses):
            in_flight += 1

    # Claims made during the soak after which the handler called nothing,
    # apart from those a worker gave back itself (counted apart).
    called = {(c["run"], c["epoch"]) for c in calls}
    given_back = _given_back()
    in_soak = [(run, epoch) for run, epoch, at in claims if at <= ended]
    returned = sum(1 for claim in in_soak if claim not in called and claim in given_back)
    cycles = sum(1 for claim in in_soak if claim not in called and claim not in given_back)

    # The replay of the event log: against the budget plus one reservation
    # (the bound) and against the budget alone.
    bound = tokens + ESTIMATE[1]
    overruns, worst = budget_overruns(
        lambda key: (bound, requests, window_s) if key == KEY else None
    )
    overruns_alone, _ = budget_overruns(
        lambda key: (tokens, requests, window_s) if key == KEY else None
    )
    worst_tokens, worst_calls = worst.get(KEY, (0, 0))

    used: Counter[str] = Counter()
    for call in calls:
        if call["at"] <= ended:
            used[call["tenant"]] += call["used"]
    total_used = sum(used.values())
    total_shares = sum(SHARES.values())
    shares = {}
    for tenant, share in SHARES.items():
        configured = share / total_shares
        actual = used[tenant] / total_used if total_used else 0.0
        shares[tenant] = {
            "configured": round(configured, 4),
            "tokens": used[tenant],
            "share": round(actual, 4),
            "error_percent": round((actual / configured - 1) * 100, 1),
        }
    minutes = (ended - started) / 60
    with rq_db.cursor() as cur:
        cur.execute(
            "SELECT count(*) FROM runqueue_run WHERE kind = %s AND status = 'succeeded'"
            " AND finished_at <= to_timestamp(%s)",
            [KIND, ended],
        )
        finished = cur.fetchone()[0]
        cur.execute(
            "SELECT count(*) FROM runqueue_run_event e JOIN runqueue_run r ON r.id = e.run_id"
            " WHERE e.type = 'run.requeued' AND e.data->>'reason' = 'budget' AND r.kind = %s",
            [KIND],
        )
        budget_waits = cur.fetchone()[0]
    return {
        "runs_finished": finished,
        "calls": len(calls),
        "calls_429": sum(1 for c in calls if c["status"] == 429),
        "calls_over_estimate": sum(1 for c in calls if c["used"] > c["estimate"]),
        "pauses": len(pauses),
        "budget_waits": budget_waits,
        "tokens_used": total_used,
        "tokens_per_minute": round(total_used / minutes) if minutes else 0,
        "budget_tokens_per_minute": round(tokens * 60 / window_s),
        "largest_reservation": ESTIMATE[1],
        "worst_window": {
            "tokens": worst_tokens,
            "calls": worst_calls,
            "budget_tokens": tokens,
            "budget_plus_one_reservation": bound,
            "budget_requests": requests,
        },
        "budget_overruns": overruns,
        "overruns_of_the_budget_alone": overruns_alone,
        "calls_reserved_while_paused": under_pause,
        "calls_in_flight_when_paused": in_flight,
        "claims": len(in_soak),
        "claim_then_reject_cycles": cycles,
        "claims_given_back": returned,
        "shares": shares,
        "worst_share_error_percent": max(abs(s["error_percent"]) for s in shares.values()),
    }
