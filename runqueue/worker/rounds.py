"""A slot group's round: every outcome its slots handed over since the last
one, written, and the next runs claimed, in one statement
(``leases.finish_and_claim``, one commit however many runs it carries),
fenced per run as always. A transient give-up or a wait for the user is
written alone (``write_alone``), in the same round, before it; so is each
finish when the statement that carried them together failed.

The round writes; the group thread (``runqueue.worker.group``) decides
when, holds what it claimed and ends the leases it reports."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from django.db import DatabaseError, DataError, IntegrityError

from runqueue import leases
from runqueue.db import connection_lost
from runqueue.errors import PERMANENT
from runqueue.leases.failures import failure_record
from runqueue.leases.outcomes import Failed, Outcome, Reported, Succeeded
from runqueue.worker.boxes import Done

logger = logging.getLogger("runqueue.worker")

#: How a lease ended, told to the group as soon as it is known.
Report = Callable[[leases.Lease, Reported], None]


@dataclass(frozen=True, slots=True)
class Written:
    """A round's statement, sent: the leases it claimed, and what each run
    it finished became (to report once the claimed leases are held)."""

    claimed: list[leases.Lease]
    finished: list[tuple[leases.Lease, Reported]]


def write(
    outcomes: list[Done],
    want: int,
    spec: Callable[[int], leases.ClaimSpec],
    report: Report,
    name: str,
) -> Written | None:
    """Write ``outcomes`` and claim ``want`` runs; None when there was no
    statement to send (nothing to finish together, nothing to claim).

    The outcomes written alone, and those left to lease expiry, are
    reported here. On a database error every outcome not yet reported is
    reported as left to lease expiry (the statement may or may not have
    committed), and the error is raised."""
    reported: set[leases.Lease] = set()

    def report_once(lease: leases.Lease, label: Reported) -> None:
        reported.add(lease)
        report(lease, label)

    finishes: list[tuple[leases.Lease, Succeeded | Failed]] = []
    try:
        for lease, outcome in outcomes:
            if outcome is None:
                report_once(lease, Reported.ERROR)
            elif isinstance(outcome, Succeeded | Failed):
                finishes.append((lease, outcome))
            else:
                report_once(lease, write_alone(lease, outcome))
        if not finishes and not want:
            return None
        try:
            written, claimed = leases.finish_and_claim(finishes, spec(want))
        except DatabaseError as exc:
            if connection_lost(exc) or not finishes:
                raise
            # One run's finish may be what the statement refused: each
            # is written alone, so it costs no other run its outcome.
            logger.warning(
                "%s: finishing %d runs together failed (%s); one at a time",
                name,
                len(finishes),
                exc,
            )
            for lease, outcome in finishes:
                report_once(lease, write_alone(lease, outcome))
            finishes, written = [], []
            claimed = leases.finish_and_claim([], spec(want))[1] if want else []
    except Exception:
        for lease, _outcome in outcomes:
            if lease not in reported:
                report(lease, Reported.ERROR)
        raise
    return Written(
        claimed,
        [
            (lease, Reported(outcome.name) if ok else Reported.FENCED)
            for (lease, outcome), ok in zip(finishes, written, strict=True)
        ],
    )


def write_alone(lease: leases.Lease, outcome: Outcome) -> Reported:
    """Write one run's outcome in a transaction of its own; what it became.

    A lost connection is raised (the round's error: nothing more can be
    written now). Any other error is this run's alone: an outcome the
    database or the checks refuse (``_unwritable``: bad input, which no
    attempt would write either) fails the run at once with a failure record
    that says why; another (a lock or statement timeout) leaves this run
    alone to lease expiry. The round's other outcomes are written either way.
    """
    try:
        return leases.label(lease, outcome, leases.write(lease, outcome))
    except Exception as exc:
        if isinstance(exc, DatabaseError) and connection_lost(exc):
            raise
        if not _unwritable(exc):
            logger.warning(
                "Run id=%s: its %s outcome could not be written (%s); left to lease expiry",
                lease.run_id,
                outcome.name,
                exc,
            )
            return Reported.ERROR
        logger.warning(
            "Run id=%s: its %s outcome could not be written (%s); failing the run",
            lease.run_id,
            outcome.name,
            exc,
        )
        failed = Failed(
            failure_record(
                exc,
                classification=PERMANENT,
                attempt=lease.attempt,
                message=f"the run's {outcome.name} outcome could not be written: {exc}",
            )
        )
    try:
        return leases.label(lease, failed, leases.write(lease, failed))
    except Exception as exc:
        if isinstance(exc, DatabaseError) and connection_lost(exc):
            raise
        logger.exception("Run id=%s: its failure could not be written either", lease.run_id)
        return Reported.ERROR


def _unwritable(exc: BaseException) -> bool:
    """The outcome itself is at fault: a value the database refuses (a
    data exception, a constraint) or one the checks refuse first."""
    return isinstance(exc, DataError | IntegrityError | ValueError | TypeError)
