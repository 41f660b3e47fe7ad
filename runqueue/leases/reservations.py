"""A handler's model calls on budgets, each behind the fence: reserve a
further call, settle one to what it used, and refund what a run given
back unstarted had reserved (docs/decisions/queue.md, "Budgets"). Giving the run
back until a call fits is an outcome
(``runqueue.leases.writes.wait_for_budget``)."""

from __future__ import annotations

from django.db import connection

from runqueue import events
from runqueue.leases.base import Lease, Reservation
from runqueue.leases.fence import fenced, renew_params
from runqueue.sql import execute

#: What runqueue_budget_take answers when the call was reserved.
_TAKEN = frozenset({"taken", "unlimited"})


def reserve(lease: Lease, key: str, tokens: int) -> bool:
    """Reserve one request and ``tokens`` on budget ``key`` for a further
    call of this run; True when it fits (the lease then holds it until it is
    settled), False when it does not or the lease is lost."""
    taken: list[Reservation] = []

    def write(_row: tuple) -> None:
        params = {"key": key, "tenant": lease.run.tenant, "tokens": tokens, "run_id": lease.run_id}
        with connection.cursor() as cursor:
            verdict, at = execute(cursor, "budget_reserve", params).fetchone()
        if verdict in _TAKEN:
            events.append(
                lease.run_id,
                events.BUDGET_RESERVED,
                lease.epoch,
                {"key": key, "tokens": tokens},
                at=at,  # the instant the budget counts it at
            )
            taken.append(Reservation(key, tokens, at))

    if fenced(lease, "budget.reserve", "fence_renew", renew_params(lease), write) is None:
        return False
    lease.reservations.extend(taken)
    return bool(taken)


def settle(lease: Lease, used: int, key: str | None = None) -> int | None:
    """Correct the oldest unsettled reservation (of ``key``, if given) to the
    ``used`` tokens: a refund or an extra charge on its budget. Returns the
    correction (used - reserved); None when the lease is lost. ValueError
    when nothing is reserved."""
    open_ = [r for r in lease.reservations if key is None or r.key == key]
    if not open_:
        raise ValueError(
            "settle: no model call is reserved" + (f" on budget {key!r}" if key else "")
        )
    reservation = open_[0]
    delta: list[int] = []

    def write(_row: tuple) -> None:
        params = {
            "key": reservation.key,
            "tenant": lease.run.tenant,
            "at": reservation.at,
            "reserved": reservation.tokens,
            "used": used,
            "run_id": lease.run_id,
        }
        with connection.cursor() as cursor:
            (correction,) = execute(cursor, "budget_settle", params).fetchone()
        events.append(
            lease.run_id,
            events.BUDGET_SETTLED,
            lease.epoch,
            {"key": reservation.key, "reserved": reservation.tokens, "used": used},
        )
        delta.append(correction)

    if fenced(lease, "budget.settle", "fence_renew", renew_params(lease), write) is None:
        return None
    lease.reservations.remove(reservation)
    return used - reservation.tokens


def refund(lease: Lease) -> None:
    """Give back every call the lease holds reserved, none of which was
    made: inside the caller's fenced transaction (a release of a run whose
    handler never started), each into the bucket it was reserved in, with
    a ``budget.refunded`` event at the lease's epoch. The lease then holds
    none."""
    for reservation in lease.reservations:
        params = {
            "key": reservation.key,
            "tenant": lease.run.tenant,
            "at": reservation.at,
            "tokens": reservation.tokens,
            "run_id": lease.run_id,
        }
        with connection.cursor() as cursor:
            execute(cursor, "budget_refund", params)
        events.append(
            lease.run_id,
            events.BUDGET_REFUNDED,
            lease.epoch,
            {"key": reservation.key, "tokens": reservation.tokens},
        )
