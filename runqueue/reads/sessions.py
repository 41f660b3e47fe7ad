"""A session read whole at one moment: its newest turns in submit order,
how each ended, its active run and its line, and what it spent
(``runqueue.session``; ``GET /api/sessions/<id>/``; the admin's session
page).

A session can last years, so a read is bounded: the newest ``limit``
turns, through the index of a session's runs by submit time
(``runqueue_run_session_turns_idx``, migration 0030), and ``older``, a
cursor to the page before. The line is read apart (the active run and up
to ``LINE_LIMIT`` pending turns, in the order they will be queued), so a
long line never pushes the turns out of the page, nor the reverse.
"""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass

from django.db import transaction
from django.db.models import Q, QuerySet

from runqueue import events, reads
from runqueue.errors import InvalidArgument
from runqueue.history import usage
from runqueue.leases.turns import turn_payloads
from runqueue.models import Run, RunEvent, RunStatus
from runqueue.stream.sse import EPOCH, stamp
from runqueue.types import JSON
from runqueue.validation import text_problem

#: Turns a read shows unless told otherwise, and at most.
DEFAULT_LIMIT = 20
MAX_LIMIT = 100
#: Pending turns a read lists at most (the line's own bound is
#: ``SESSION_MAX_PENDING``, which may be None).
LINE_LIMIT = 100
#: The longest session id a run holds (its column's length).
SESSION_ID_MAX_LENGTH: int = Run._meta.get_field("session_id").max_length or 255


@dataclass(frozen=True, slots=True, kw_only=True)
class Ending:
    """How a finished turn ended: its status, and why. ``reason``: a
    cancel's (``interrupted``, ``rolled_back``, ``expired``, or what the
    canceller wrote) or a failure's classification; ``by``: the turn that
    interrupted or rolled it back; ``actor``: who cancelled it."""

    status: str
    reason: str | None = None
    by: uuid.UUID | None = None
    actor: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Turn:
    """One run of the session: what was typed (``payloads``: a merged
    turn's in the order they were sent), where it is, what it answered."""

    id: uuid.UUID
    kind: str
    status: str
    #: Its place in the line while pending (kept once promoted).
    place: int | None
    payloads: list[JSON]
    #: The handler's result, once succeeded.
    result: JSON
    #: None while the turn is live.
    ended: Ending | None
    #: The turn this one interrupted or rolled back.
    interrupted_id: uuid.UUID | None
    created_at: dt.datetime | None
    started_at: dt.datetime | None
    finished_at: dt.datetime | None


@dataclass(frozen=True, slots=True, kw_only=True)
class Session:
    """A session at one moment. ``turns``: the newest turns of this page,
    oldest first; ``older``: the cursor of the page before (None: this page
    starts at the first turn). ``active`` and ``pending``: the line now,
    whatever page; ``pending_more``: more pending turns than listed."""

    tenant: str
    session_id: str
    turns: list[Turn]
    older: str | None
    active: Turn | None
    pending: list[Turn]
    pending_more: bool
    usage: usage.Totals


def session(
    session_id: str,
    *,
    tenant: str = "default",
    limit: int = DEFAULT_LIMIT,
    before: str | None = None,
) -> Session | None:
    """The session ``session_id`` of ``tenant`` (None: it has no run), its
    newest ``limit`` turns (1 to ``MAX_LIMIT``) or those before the cursor
    ``before`` (a previous read's ``older``). Read in one snapshot: a turn
    promoted between two reads would otherwise show in neither the line nor
    the turns, or in both. Raises InvalidArgument for a bad limit or cursor."""
    if not isinstance(session_id, str) or not session_id:
        raise InvalidArgument("session", "session_id", "must be a non-empty string")
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise InvalidArgument("session", "limit", f"must be an integer from 1 to {MAX_LIMIT}")
    position = parse_position(before) if before is not None else None
    if session_unstorable(session_id):
        return None  # no run could have it
    connection = reads.read_connection()  # the primary outside a read scope
    outermost = not connection.in_atomic_block
    with transaction.atomic(using=connection.alias):
        if outermost:
            with connection.cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        return _read(tenant, session_id, limit, position)


def session_unstorable(session_id: str) -> bool:
    """No run can have this session id: too long for its column, or text
    PostgreSQL cannot store (a read of it would fail, not find nothing)."""
    return len(session_id) > SESSION_ID_MAX_LENGTH or text_problem(session_id) is not None


def _read(
    tenant: str, session_id: str, limit: int, position: tuple[dt.datetime, uuid.UUID] | None
) -> Session | None:
    page = list(newest_turns(tenant, session_id, position)[: limit + 1])
    older = position_of(page[limit - 1]) if len(page) > limit else None
    page = page[:limit]
    line = list(Run.objects.session_line(tenant, session_id)[: LINE_LIMIT + 2])
    if not page and not line and (position is None or not _exists(tenant, session_id)):
        return None
    endings = _endings([r for r in [*page, *line] if r.status == RunStatus.CANCELLED])
    active = line[0] if line and line[0].status != RunStatus.PENDING else None
    pending = [r for r in line if r.status == RunStatus.PENDING]
    return Session(
        tenant=tenant,
        session_id=session_id,
        turns=[_turn(r, endings) for r in reversed(page)],
        older=older,
        active=_turn(active, endings) if active is not None else None,
        pending=[_turn(r, endings) for r in pending[:LINE_LIMIT]],
        pending_more=len(pending) > LINE_LIMIT,
        usage=usage.session_totals(tenant, session_id),
    )


def newest_turns(
    tenant: str, session_id: str, position: tuple[dt.datetime, uuid.UUID] | None = None
) -> QuerySet[Run]:
    """A session's runs newest first (submit time, then id), before
    ``position`` if given: a backward walk of
    ``runqueue_run_session_turns_idx`` on each partition, never a sort of
    the session's whole history."""
    runs = Run.objects.filter(tenant=tenant, session_id=session_id)
    if position is not None:
        at, run_id = position
        # created_at <= at is the index's bound; the tie on id a filter.
        runs = runs.filter(Q(created_at__lte=at) & (Q(created_at__lt=at) | Q(id__lt=run_id)))
    return runs.order_by("-created_at", "-id")


def _exists(tenant: str, session_id: str) -> bool:
    return Run.objects.filter(tenant=tenant, session_id=session_id).exists()


def _endings(cancelled: list[Run]) -> dict[uuid.UUID, dict[str, JSON]]:
    """The ``run.cancelled`` event's data of each cancelled run, read by
    run through the events' key (run, id): the newest such event wins."""
    if not cancelled:
        return {}
    rows = (
        RunEvent.objects.filter(run_id__in={r.id for r in cancelled}, type=events.CANCELLED)
        .order_by("run_id", "-id")
        .distinct("run_id")
        .values_list("run_id", "data")
    )
    return {run_id: data for run_id, data in rows if isinstance(data, dict)}


def _text(value: JSON) -> str | None:
    return value if isinstance(value, str) else None


def ending(run: Run, cancelled: dict[str, JSON] | None) -> Ending | None:
    """How ``run`` ended (None while live); ``cancelled``: its
    ``run.cancelled`` event's data, for a cancelled run."""
    if run.status == RunStatus.SUCCEEDED:
        return Ending(status=run.status)
    if run.status == RunStatus.FAILED:
        failure = run.failure if isinstance(run.failure, dict) else {}
        return Ending(status=run.status, reason=_text(failure.get("classification")))
    if run.status != RunStatus.CANCELLED:
        return None
    data = cancelled or {}
    by = _text(data.get("by"))
    try:
        by_id = uuid.UUID(by) if by else None
    except ValueError:
        by_id = None
    return Ending(
        status=run.status,
        reason=_text(data.get("reason")),
        by=by_id,
        actor=_text(data.get("actor")),
    )


def _turn(run: Run, endings: dict[uuid.UUID, dict[str, JSON]]) -> Turn:
    return Turn(
        id=run.id,
        kind=run.kind,
        status=run.status,
        place=run.place,
        payloads=turn_payloads(run),
        result=run.result if run.status == RunStatus.SUCCEEDED else None,
        ended=ending(run, endings.get(run.id)),
        interrupted_id=run.interrupted_id,
        created_at=run.created_at,
        started_at=run.started_at,
        finished_at=run.finished_at,
    )


# -- the cursor of a page: (submit time, id) of its oldest turn ---------------


def position_of(run: Run) -> str:
    """The cursor that reads the turns before ``run``: its submit time in
    microseconds (base 36) and its id."""
    return f"{stamp(run.created_at)}.{run.id.hex}"


def parse_position(text: str) -> tuple[dt.datetime, uuid.UUID]:
    """``position_of``'s text back; InvalidArgument for anything else."""
    mark, dot, hex_id = text.partition(".") if isinstance(text, str) else ("", "", "")
    ok = (
        dot
        and 0 < len(mark) <= 13
        and mark.isascii()
        and mark.isalnum()
        and mark == mark.lower()
        and len(hex_id) == 32
        and all(c in "0123456789abcdef" for c in hex_id)
    )
    if not ok:
        raise InvalidArgument("session", "before", "must be a cursor a previous read returned")
    try:
        at = EPOCH + dt.timedelta(microseconds=int(mark, 36))
    except OverflowError:
        raise InvalidArgument(
            "session", "before", "must be a cursor a previous read returned"
        ) from None
    return at, uuid.UUID(hex_id)
