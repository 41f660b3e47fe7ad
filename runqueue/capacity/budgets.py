"""Budgets for model calls: the limits staff set, whether they may apply to
a claim (``runqueue.leases.claim.capped_claim`` chooses), pausing a key,
and what the dashboard and metrics show of each window.

A run that declares a budget (``submit(..., budget=(key, tokens))``) is
claimed only once one request and its tokens are reserved on the key's
window, in the claim statement (``runqueue_budget_take``, called by the
walk of ``runqueue_claim_capped``; docs/decisions/queue.md, "Budgets"). The plain
claim never takes such a run, so a worker that does not know of budgets yet
cannot claim past one; a claim takes the walk while budgets may apply (a
Budget row, a ``RUNQUEUE["BUDGETS"]`` entry, or a queued run with a budget),
cached per process like the caps (``runqueue.capacity.concurrency``): read again
after a budget is saved or deleted here (a ``NOTIFY`` tells other
processes) and on every sweeper tick.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from django.db import connection, transaction
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver
from django.utils import timezone

from runqueue import reads
from runqueue.capacity.cached import Cached
from runqueue.conf import get_settings
from runqueue.db import db_now
from runqueue.errors import InvalidArgument
from runqueue.events import wakeups
from runqueue.limits import BUDGET_KEY_MAX_LENGTH, BUDGET_TOKENS_MAX
from runqueue.models import Budget, Run, RunStatus
from runqueue.sql import execute


def _budgets_exist() -> bool:
    """Whether budgets may apply: settings name one, a Budget row exists, or
    a queued run declares one."""
    return (
        bool(get_settings().BUDGETS)
        or Budget.objects.exists()
        or Run.objects.filter(status=RunStatus.QUEUED, budget_key__isnull=False).exists()
    )


_known = Cached(_budgets_exist)


def may_apply() -> bool:
    """True when a claim must take the walk, which reserves budgets (cached)."""
    return _known.get()


def invalidate() -> None:
    """Budgets changed (a NOTIFY, a save here): read again before the next claim."""
    _known.invalidate()


def refresh() -> None:
    """Read whether budgets may apply now (the sweeper's tick)."""
    _known.refresh()


def declared(operation: str, key: object, tokens: object) -> tuple[str, int]:
    """A budget declaration (key, tokens) checked (``problem``), or
    InvalidArgument naming what is wrong."""
    detail = problem(key, tokens)
    if detail is not None:
        raise InvalidArgument(operation, "budget", detail)
    assert isinstance(key, str) and isinstance(tokens, int)  # noqa: S101 - problem() said so
    return key, tokens


def problem(key: object, tokens: object) -> str | None:
    """Why a call of ``tokens`` on budget ``key`` cannot be declared, or
    None: an unknown key, or more tokens than the budget allows per window
    (the call could never be reserved). Makes the key's Budget row from
    ``RUNQUEUE["BUDGETS"]`` if it has none yet."""
    if not isinstance(key, str) or not key or len(key) > BUDGET_KEY_MAX_LENGTH:
        return f"key must be a 1-{BUDGET_KEY_MAX_LENGTH} character string, got {key!r}"
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
        return f"tokens must be an integer >= 0, got {tokens!r}"
    if tokens > BUDGET_TOKENS_MAX:
        return f"tokens must be at most {BUDGET_TOKENS_MAX}, got {tokens}"
    budget = ensure(key)
    if budget is None:
        return f"{key!r} is no budget: add it in the admin (Budgets) or RUNQUEUE['BUDGETS']"
    if budget.tokens is not None and tokens > budget.tokens:
        return f"{tokens} tokens are more than {key!r} allows per window ({budget.tokens})"
    return None


def ensure(key: str) -> Budget | None:
    """The key's Budget, made from its ``RUNQUEUE["BUDGETS"]`` entry on
    first use (None: neither exists). From then on the row is the budget."""
    budget = Budget.objects.filter(key=key).first()
    if budget is not None:
        return budget
    spec = get_settings().BUDGETS.get(key)
    if spec is None:
        return None
    budget, _ = Budget.objects.get_or_create(
        key=key,
        defaults={
            "requests": spec.requests,
            "tokens": spec.tokens,
            "per_seconds": spec.per_seconds,
            "shares": dict(spec.shares),
        },
    )
    return budget


def pause_budget(key: str, until: dt.datetime | dt.timedelta | float) -> dt.datetime:
    """Stop every claim and reservation on ``key`` until ``until`` (a time,
    or a delay such as a provider's ``Retry-After`` in seconds): what a
    handler calls on a 429. A pause already longer stays. Returns the pause
    in force; InvalidArgument for an unknown key or a bad ``until``."""
    moment = _moment(until)
    if ensure(key) is None:
        raise InvalidArgument("pause_budget", "key", f"no budget {key!r}")
    with connection.cursor() as cursor:
        row = execute(cursor, "budget_pause", {"key": key, "until": moment}).fetchone()
    return row[0]


def resume_budget(key: str) -> bool:
    """End a budget's pause now (the admin's resume); False: no such budget.
    Wakes the workers: its runs may be claimable again."""
    with transaction.atomic():
        resumed = Budget.objects.filter(key=key).update(paused_until=None) == 1
        if resumed:
            _notify()
    return resumed


def _moment(until: dt.datetime | dt.timedelta | float) -> dt.datetime:
    if isinstance(until, dt.datetime):
        if timezone.is_naive(until):
            raise InvalidArgument("pause_budget", "until", "must be an aware datetime")
        return until
    if isinstance(until, dt.timedelta):
        return db_now() + until  # a Retry-After counts on the database's clock
    if isinstance(until, bool) or not isinstance(until, int | float) or not until >= 0:
        raise InvalidArgument(
            "pause_budget", "until", f"must be a datetime, timedelta or seconds, got {until!r}"
        )
    return db_now() + dt.timedelta(seconds=until)


@dataclass(frozen=True, slots=True, kw_only=True)
class Window:
    """A budget's use in its window now, for the dashboard and the metrics."""

    key: str
    requests: int | None
    tokens: int | None
    per_seconds: int
    paused_until: dt.datetime | None
    used_tokens: int
    used_requests: int
    #: Queued runs with this budget, and those whose call cannot be reserved
    #: now (paused, or not fitting the window): waiting on the budget.
    queued: int
    waiting: int


#: Runs counted per budget at most (the dashboard shows "10,000+").
COUNT_CAP = 10_000


def windows(limit: int = 200) -> list[Window]:
    """Every budget's window now, by key (at most ``limit`` budgets)."""
    with reads.read_connection().cursor() as cursor:
        rows = execute(cursor, "budget_windows", {"cap": COUNT_CAP, "limit": limit}).fetchall()
    return [
        Window(
            key=row[0],
            requests=row[1],
            tokens=row[2],
            per_seconds=row[3],
            paused_until=row[4],
            used_tokens=row[5],
            used_requests=row[6],
            queued=row[7],
            waiting=row[8],
        )
        for row in rows
    ]


def _notify() -> None:
    wakeups.send(wakeups.Changed(setting="budgets"))


@receiver(post_save, sender=Budget)
@receiver(post_delete, sender=Budget)
def _budgets_changed(**kwargs: object) -> None:
    """Read again here, and tell the workers (on commit): a first budget
    makes their claims take the walk, a raised one may make runs claimable."""
    invalidate()
    transaction.on_commit(invalidate)
    _notify()
