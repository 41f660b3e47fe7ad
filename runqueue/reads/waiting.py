"""Why runs wait: due runs held back by paused kinds, keys at their cap,
budgets whose window has no room for their call, classes no worker claims,
kinds and versions no live worker has (``runqueue.reads.versions``);
and runs that wait by their own choice (their children, a signal, a time,
the user), counted by reason.

The dashboard and ``/metrics`` read this so that "oldest due run waiting
111 s" comes with its cause, and the run page (``why``) names what holds
one queued run back, in the same words. Every count is capped (``CAP``) and
every list bounded: the causes are few (paused kinds, capped keys, budgets,
three classes) and the runs they hold back are counted up to the cap, never
all.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

from django.db.models import Q, QuerySet
from django.db.models.functions import Now
from django.utils import timezone

from runqueue import db, reads
from runqueue.conf import get_settings
from runqueue.db import db_now
from runqueue.models import (
    ConcurrencyLimit,
    PausedKind,
    PriorityClass,
    Run,
    RunStatus,
    WaitReason,
)
from runqueue.reads import versions
from runqueue.sql import execute

#: Runs held back are counted up to this many per cause.
CAP = 1_000
#: At most this many causes of each sort are looked at.
MOST = 100

PAUSED_KIND = "paused_kind"
KEY_AT_CAP = "key_at_cap"
BUDGET = "budget"
NO_WORKER = "no_worker"
NO_HANDLER = "no_handler"
#: Every cause's reason, as /metrics labels them.
REASONS = (PAUSED_KIND, KEY_AT_CAP, BUDGET, NO_WORKER, NO_HANDLER)


@dataclass(frozen=True, slots=True)
class Cause:
    """One reason due runs of a class wait, and how many it holds back."""

    cls: PriorityClass
    reason: str
    subject: str
    waiting: int
    detail: str


def due_queued(cls: PriorityClass) -> QuerySet[Run]:
    low, high = cls.bounds
    return Run.objects.filter(
        Q(scheduled_for__isnull=True) | Q(scheduled_for__lte=Now()),
        status=RunStatus.QUEUED,
        priority__gte=low,
        priority__lte=high,
    )


def _count(queryset: QuerySet[Run]) -> int:
    """Due runs counted up to CAP in the claim's order, so the count walks
    the claim index (or the key index) rather than the live partition."""
    return db.capped_count(queryset, CAP, "priority", "created_at")


def _many(n: int) -> str:
    return f"more than {CAP:,}" if n > CAP else f"{n:,}"


def paused_kinds() -> list[Cause]:
    causes = []
    for paused in PausedKind.objects.order_by("kind", "priority_class")[:MOST]:
        classes = (
            list(PriorityClass)
            if paused.priority_class is None
            else [PriorityClass(paused.priority_class)]
        )
        for cls in classes:
            n = _count(due_queued(cls).filter(kind=paused.kind))
            if n:
                causes.append(
                    Cause(
                        cls,
                        PAUSED_KIND,
                        paused.kind,
                        n,
                        f"{_paused_words(paused)}: {_many(n)} due run(s) wait",
                    )
                )
    return causes


def keys_at_cap() -> list[Cause]:
    """Keys whose running runs fill their cap (a limit row or the class's
    default), or whose limit is 0, while due runs of theirs wait (among
    the first CAP due runs of their class, as the other causes look)."""
    conf = get_settings()
    limits = {
        (row.key, row.priority_class): row.max_running
        for row in ConcurrencyLimit.objects.order_by("key")[: MOST * 10]
    }
    running: dict[tuple[str, int], int] = {}
    # The keys of the first CAP due runs of each class, each one's running
    # runs counted up to one past the largest cap (which it then fills).
    caps = [*limits.values(), *(conf.default_cap(c) for c in PriorityClass)]
    largest = max((c for c in caps if c is not None), default=0)
    params = {"head": CAP, "cap": largest + 1, "most": MOST * 10}
    with reads.read_connection().cursor() as cursor:
        for key, idx, n in execute(cursor, "keys_running", params).fetchall():
            running[(key, PriorityClass.by_index(idx).value)] = n
    candidates = set(running) | {k for k, cap in limits.items() if cap == 0}
    causes = []
    for key, value in sorted(candidates)[:MOST]:
        cls = PriorityClass(value)
        cap = limits.get((key, value), conf.default_cap(cls))
        held = running.get((key, value), 0)
        if cap is None or held < cap:
            continue
        n = _count(due_queued(cls).filter(concurrency_key=key))
        if n:
            words = _cap_words(key, held, cap)
            causes.append(Cause(cls, KEY_AT_CAP, key, n, f"{words}: {_many(n)} due run(s) wait"))
    return causes


def budgets_held() -> list[Cause]:
    """Budgets (the first MOST by key) whose window has no room for the
    call of due runs of theirs, per class: paused, no request left, or the
    runs' tokens do not fit (one statement; ``budget_held``)."""
    params = {"cap": CAP + 1, "most": MOST}
    with reads.bounded() as cursor:  # through the budget index, never a bitmap of every run
        rows = execute(cursor, "budget_held", params).fetchall()
    causes = []
    for key, idx, n, sampled, *window_row in rows:
        window = BudgetWindow.of(key, window_row)
        words = window.words() or window.tokens_words()
        cls = PriorityClass.by_index(idx)
        # The budget's first CAP + 1 due runs were read: past that, a floor.
        many = f"at least {n:,}" if sampled > CAP else _many(n)
        causes.append(Cause(cls, BUDGET, key, n, f"{words}: {many} due run(s) wait"))
    return causes


@dataclass(frozen=True, slots=True, kw_only=True)
class BudgetWindow:
    """A budget's pause and use in its window now, as the causes word them."""

    key: str
    paused_until: dt.datetime | None
    requests: int | None
    used_requests: int
    tokens: int | None
    used_tokens: int
    per_seconds: int

    @classmethod
    def of(cls, key: str, row: Sequence) -> BudgetWindow:
        """From a statement's columns: paused_until, requests, used_requests,
        tokens, used_tokens, per_seconds (``budget_window``, ``budget_held``)."""
        paused_until, requests, used_requests, tokens, used_tokens, per = row
        return cls(
            key=key,
            paused_until=paused_until,
            requests=requests,
            used_requests=used_requests,
            tokens=tokens,
            used_tokens=used_tokens,
            per_seconds=per,
        )

    def words(self) -> str | None:
        """Why no call of the budget is reserved now, or None."""
        if self.paused_until is not None:
            until = timezone.localtime(self.paused_until)
            return f"budget {self.key} is paused until {until:%Y-%m-%d %H:%M:%S}"
        if self.requests is not None and self.used_requests + 1 > self.requests:
            return (
                f"budget {self.key} has used {self.used_requests} of {self.requests} "
                f"request(s) in its {self.per_seconds} s window"
            )
        return None

    def tokens_words(self) -> str:
        return (
            f"budget {self.key} has used {self.used_tokens} of {self.tokens} "
            f"token(s) in its {self.per_seconds} s window"
        )

    def holds(self, tokens: int) -> str | None:
        """Why a call of ``tokens`` is not reserved now, or None (as
        ``runqueue_budget_take`` decides, but a tenant's turn)."""
        if (words := self.words()) is not None:
            return words
        if (
            self.tokens is not None
            and self.used_tokens > 0
            and self.used_tokens + tokens > self.tokens
        ):
            return f"{self.tokens_words()}; its call of {tokens} tokens does not fit"
        return None


def budget_window(key: str) -> BudgetWindow | None:
    """One budget's window now; None without such a budget (its runs are
    claimed without accounting)."""
    with reads.read_connection().cursor() as cursor:
        row = execute(cursor, "budget_window", {"key": key}).fetchone()
    return None if row is None else BudgetWindow.of(key, row)


def _paused_words(paused: PausedKind) -> str:
    return f"kind {paused.kind} is paused ({paused.reason}, by {paused.paused_by})"


def _cap_words(key: str, held: int, cap: int) -> str:
    what = "is paused (limit 0)" if cap == 0 else f"has {held} running, its cap is {cap}"
    return f"key {key} {what}"


def _no_worker_words(cls: PriorityClass) -> str:
    return f"no live worker has a slot for {cls.slug}"


def slots_per_class() -> dict[str, int]:
    """Slots the live workers (the first MOST) have per class slug: a
    group that claims several classes counts for each, a group of
    coroutines (``async:loop``) as its classes."""
    per: dict[str, int] = {}
    for slots in versions.live_workers().values_list("slots", flat=True)[:MOST]:
        if not isinstance(slots, dict):
            continue
        for label, count in slots.items():
            for slug in str(label).partition(":")[0].split(","):
                n = count if isinstance(count, int) and not isinstance(count, bool) else 0
                per[slug] = per.get(slug, 0) + n
    return per


def unclaimed_classes() -> list[Cause]:
    """Classes with due runs that no live worker has a slot for."""
    served = {slug for slug, n in slots_per_class().items() if n > 0}
    causes = []
    for cls in PriorityClass:
        if cls.slug in served:
            continue
        n = _count(due_queued(cls))
        if n:
            causes.append(
                Cause(
                    cls,
                    NO_WORKER,
                    "",
                    n,
                    f"{_no_worker_words(cls)}: {_many(n)} due run(s) wait",
                )
            )
    return causes


def unhandled() -> list[Cause]:
    """Due runs of a kind, or pinned to a version of it, that no live
    worker has a handler for (the first CAP due runs of each class read)."""
    return [
        Cause(
            held.cls,
            NO_HANDLER,
            held.subject,
            held.n,
            f"{held.detail}: {'at least ' if held.floor else ''}{held.n:,} due run(s) wait",
        )
        for held in versions.held(CAP)
    ]


def causes() -> list[Cause]:
    """Every cause found, in class order."""
    found = [
        *unclaimed_classes(),
        *paused_kinds(),
        *keys_at_cap(),
        *budgets_held(),
        *unhandled(),
    ]
    return sorted(found, key=lambda c: c.cls.index)


def waiting_by_reason(cap: int = CAP) -> dict[str, int]:
    """Runs waiting (status waiting or waiting_for_user) per WaitReason,
    each counted up to ``cap + 1`` through the waiting index. They hold no
    slot and no lease."""
    params = {"reasons": list(WaitReason.values), "cap": cap + 1}
    with reads.read_connection().cursor() as cursor:
        return dict(execute(cursor, "waiting_by_reason", params).fetchall())


def slot_holders(limit: int = 50) -> list[Run]:
    """The running runs that have held their slot longest (this attempt's
    claim), with the worker holding each: the head of the leased index."""
    return list(
        # The owner >= '' (always true) proves the leased index's guard.
        Run.objects.filter(status=RunStatus.RUNNING, lease_owner__gte="")
        .order_by("claimed_at", "id")
        .only("id", "kind", "priority", "tenant", "concurrency_key", "lease_owner", "claimed_at")[
            :limit
        ]
    )


def why(run: Run) -> list[str]:
    """Why a queued run has not started, in the dashboard's words: not due
    yet, each cause that holds it back, or (nothing does) that it waits for
    a slot of its class. A few bounded reads of its own kind, key, budget
    and class."""
    if run.status != RunStatus.QUEUED:
        return []
    cls = PriorityClass.of(run.priority)
    found = []
    if run.scheduled_for is not None and run.scheduled_for > db_now():
        found.append(f"Not due before {timezone.localtime(run.scheduled_for):%Y-%m-%d %H:%M:%S}.")
    if run.attempts >= run.max_attempts:
        found.append(f"It has used its {run.max_attempts} attempt(s): no claim takes it.")
    paused = (
        PausedKind.objects.filter(kind=run.kind)
        .filter(Q(priority_class__isnull=True) | Q(priority_class=cls.value))
        .first()
    )
    if paused is not None:
        found.append(_paused_words(paused) + ".")
    found.extend(_capped(run, cls))
    if run.budget_key:
        window = budget_window(run.budget_key)
        held = window.holds(run.budget_tokens or 0) if window is not None else None
        if held is not None:
            found.append(held + ".")
    slots = slots_per_class().get(cls.slug, 0)
    if not slots:
        found.append(_no_worker_words(cls) + ".")
    elif (words := versions.why(run)) is not None:
        found.append(words)
    if found:
        return found
    running = _running(cls)
    return [
        "Due, and nothing holds it back: a worker's next claim of its class takes it, in "
        f"priority then age order. {_many(running)} {cls.slug} run(s) running; live workers "
        f"have {slots} slot(s) for {cls.slug}."
    ]


def _capped(run: Run, cls: PriorityClass) -> list[str]:
    """The run's key at its cap in its class, in words (or nothing)."""
    key = run.concurrency_key
    limit = (
        ConcurrencyLimit.objects.filter(key=key, priority_class=cls.value)
        .values_list("max_running", flat=True)
        .first()
    )
    cap = limit if limit is not None else get_settings().default_cap(cls)
    if cap is None:
        return []
    held = _running(cls, concurrency_key=key) if cap else 0
    return [_cap_words(key, held, cap) + "."] if held >= cap else []


def _running(cls: PriorityClass, **filters: str) -> int:
    """Running runs of a class (and filters), counted up to CAP + 1."""
    low, high = cls.bounds
    queryset = Run.objects.filter(
        status=RunStatus.RUNNING,
        # Always true: proves the leased index's guard, for filters that are
        # not a key.
        lease_owner__gte="",
        priority__gte=low,
        priority__lte=high,
        **filters,
    )
    return db.capped_count(queryset, CAP)
