"""Concurrency caps per key and class: whether they may apply to a claim
(``runqueue.leases.claim.capped_claim`` chooses), the limits staff set,
and how workers learn of them.

A cap bounds how many runs with one concurrency key (by default the run's
tenant) are ``running`` at once in one priority class: the default per class
is ``RUNQUEUE["CONCURRENCY"]`` and a ``ConcurrencyLimit`` row overrides it
for one key (0 pauses the key). Only a claim moves a run into running, so
only the claim enforces caps: ``finish_and_claim_capped`` runs the walk of
``runqueue_claim_capped`` (its source: ``runqueue/sql/fn_claim.sql``). A
claim from classes with no cap (no default cap, no limit row in them) runs
the plain ``finish_and_claim`` and pays nothing for it.

Whether a cap may apply is cached per process: a default cap comes from the
settings; which classes have a ``ConcurrencyLimit`` row is read again after a
limit is saved or deleted here (a ``NOTIFY`` tells the workers of other
processes) and on every sweeper tick.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.db import transaction
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver

from runqueue.capacity.cached import Cached
from runqueue.conf import get_settings
from runqueue.events import wakeups
from runqueue.models import ConcurrencyLimit, PriorityClass, Run, RunStatus


def _limited_classes() -> frozenset[int]:
    """The classes (by value) in which some ConcurrencyLimit row exists."""
    return frozenset(ConcurrencyLimit.objects.values_list("priority_class", flat=True).distinct())


_limits = Cached(_limited_classes)


def caps_may_apply(classes: Iterable[PriorityClass] = tuple(PriorityClass)) -> bool:
    """True when a claim from ``classes`` must take the capped path: one of
    them has a default cap, or some key has a limit in one of them (cached;
    see the module docstring). Caps are per key and class, so a group that
    claims only uncapped classes keeps the plain claim."""
    conf = get_settings()
    wanted = [PriorityClass(c) for c in classes]
    if any(conf.default_cap(c) is not None for c in wanted):
        return True
    limited = _limits.get()
    return any(c.value in limited for c in wanted)


def invalidate() -> None:
    """Limits changed (a NOTIFY, a save here): read them again before the next claim."""
    _limits.invalidate()


def refresh() -> None:
    """Read whether limits exist now (the sweeper's tick)."""
    _limits.refresh()


def claim_params() -> dict[str, object]:
    """The capped claim's extra parameter: the default cap of every class, in
    class order (the function reads a class's at its index)."""
    conf = get_settings()
    return {"default_caps": [conf.default_cap(member) for member in PriorityClass]}


def default_cap(priority_class: PriorityClass) -> int | None:
    return get_settings().default_cap(PriorityClass(priority_class))


def cap_for(key: str, priority_class: PriorityClass) -> int | None:
    """The cap in force for a key in a class (None: no cap)."""
    limit = (
        ConcurrencyLimit.objects.filter(key=key, priority_class=priority_class)
        .values_list("max_running", flat=True)
        .first()
    )
    return limit if limit is not None else default_cap(priority_class)


def running(key: str, priority_class: PriorityClass) -> int:
    """Runs of the key running (or waiting for an expired lease) in the class."""
    low, high = priority_class.bounds
    return Run.objects.filter(
        status=RunStatus.RUNNING, concurrency_key=key, priority__gte=low, priority__lte=high
    ).count()


@receiver(post_save, sender=ConcurrencyLimit)
@receiver(post_delete, sender=ConcurrencyLimit)
def _limits_changed(**kwargs: object) -> None:
    """Read the limits again here, and tell the workers (on commit): a new
    limit makes their claims take the capped path, a raised one may make
    runs claimable."""
    invalidate()
    transaction.on_commit(invalidate)  # a claim in between may have read the old state
    wakeups.send(wakeups.Changed(setting="concurrency"))
