"""New runs written: the one statement (``create_runs``) that inserts a
submit's runs, a ``submit_many`` chunk's, and a spawn's child, with their
events, keys and NOTIFYs. ``runqueue.submission`` routes a submit to it;
``runqueue.leases`` writes a child with it behind the parent's fence."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Mapping, Sequence
from contextlib import nullcontext
from typing import TYPE_CHECKING

import psycopg
from django.db import IntegrityError, transaction
from django.utils import timezone

from runqueue.conf import get_settings
from runqueue.db import constraint_name
from runqueue.errors import ActiveRunConflict
from runqueue.models import (
    PriorityClass,
    Run,
    RunStatus,
    SubmitOutcome,
    TreeSpend,
    WebhookTarget,
)
from runqueue.models.rows import inserted_runs
from runqueue.sql import json_rows, pipelined, prepared

if TYPE_CHECKING:
    from runqueue.submission.rules import CheckedSubmission

#: The unique constraints a new run can meet: one active run per session,
#: one key per (tenant, principal).
SESSION_CONSTRAINT = "runqueue_run_one_active_per_session"
KEY_CONSTRAINT = "runqueue_idempotency_key_unique"


def insert_runs(
    requests: Sequence[CheckedSubmission],
    hashes: Sequence[str],
    *,
    traceparent: str,
    parent_id: uuid.UUID | None = None,
    place: int | None = None,
    key_outcome: SubmitOutcome = SubmitOutcome.CREATED,
    interrupted_id: uuid.UUID | None = None,
) -> list[Run]:
    """``create_runs``: the runs, their events, keys and NOTIFYs in one
    statement. With a ``place`` (one request): a pending turn, which wakes
    no worker."""
    ids = [uuid.uuid4() for _ in requests]
    shared: dict[str, object] = {
        "traceparent": traceparent,
        "parent_id": parent_id,
        "place": place,
        "interrupted_id": interrupted_id,
        "key_outcome": str(key_outcome),
    }
    params = _params(requests, ids, hashes, shared)
    with transaction.atomic() if _has_rows_beside(requests) else nullcontext():
        with prepared("create_runs", params) as cursor:
            runs = _inserted(requests, ids, traceparent, parent_id)
            _set_server_values(runs, cursor)
        _insert_rows_beside(requests, ids)
    if place is not None:
        for run in runs:
            run.status, run.place, run.interrupted_id = RunStatus.PENDING, place, interrupted_id
    return runs


def insert_plain(chunks: Iterable[Sequence[CheckedSubmission]], *, traceparent: str) -> list[Run]:
    """``create_runs`` for each chunk of new runs without an idempotency key
    or a session (``submit_many``'s fan-out: no unique constraint to meet,
    so no chunk needs a savepoint to fall back from), pipelined: the server
    inserts one chunk while this process checks (``chunks`` may check as it
    yields), encodes and builds the Runs of the next. Inside the caller's
    transaction, which an error of any chunk leaves to roll back."""
    sent: list[tuple[psycopg.Cursor, list[Run]]] = []
    requests: list[CheckedSubmission] = []
    ids: list[uuid.UUID] = []
    shared: dict[str, object] = dict.fromkeys(("parent_id", "place", "interrupted_id"))
    shared |= {"traceparent": traceparent, "key_outcome": str(SubmitOutcome.CREATED)}
    with pipelined() as send:
        for chunk in chunks:
            if any(r.idempotency_key is not None or r.session_id is not None for r in chunk):
                raise ValueError("insert_plain takes runs without a key or a session")
            chunk_ids = [uuid.uuid4() for _ in chunk]
            cursor = send("create_runs", _params(chunk, chunk_ids, [""] * len(chunk), shared))
            sent.append((cursor, _inserted(chunk, chunk_ids, traceparent, None)))
            requests.extend(chunk)
            ids.extend(chunk_ids)
    runs: list[Run] = []
    for cursor, chunk_runs in sent:
        with cursor:
            _set_server_values(chunk_runs, cursor)
        runs.extend(chunk_runs)
    _insert_rows_beside(requests, ids)
    return runs


def _params(
    requests: Sequence[CheckedSubmission],
    ids: Sequence[uuid.UUID],
    hashes: Sequence[str],
    shared: Mapping[str, object],
) -> dict[str, object]:
    """``create_runs``'s parameters: what every run of the statement shares
    (``shared``: traceparent, parent, place, interrupted run, key outcome)
    and the runs themselves."""
    conf = get_settings()
    due: set[str] = set()
    if shared["place"] is None:
        now = timezone.now()
        # The classes' NOTIFY payloads (leases.notify_payload), looked up
        # once per priority.
        priorities = {
            r.priority for r in requests if not r.scheduled_for or r.scheduled_for <= now
        }
        due = {PriorityClass.of(p).slug for p in priorities}
    return {
        **shared,
        "runs": _runs_document(requests, ids, hashes),
        "key_retention_seconds": float(conf.IDEMPOTENCY_KEY_RETENTION_SECONDS),
        "channel": conf.NOTIFY_CHANNEL,
        "notify": sorted(due),
        "lock_timeout": f"{conf.SUBMIT_LOCK_TIMEOUT_MS}ms"
        if any(r.idempotency_key is not None for r in requests)
        else None,
    }


def _has_rows_beside(requests: Sequence[CheckedSubmission]) -> bool:
    return any(r.spend_cap or r.webhook for r in requests)


def _insert_rows_beside(requests: Sequence[CheckedSubmission], ids: Sequence[uuid.UUID]) -> None:
    """The trees' spend caps (usage.py) and the runs' own webhook URLs
    (webhooks), in the runs' transaction."""
    if not _has_rows_beside(requests):
        return
    pairs = list(zip(ids, requests, strict=True))
    TreeSpend.objects.bulk_create(
        TreeSpend(run_id=i, spend_cap=r.spend_cap) for i, r in pairs if r.spend_cap
    )
    WebhookTarget.objects.bulk_create(
        WebhookTarget(run_id=i, endpoint_id=r.webhook[0], url=r.webhook[1])
        for i, r in pairs
        if r.webhook
    )


def _set_server_values(runs: Sequence[Run], cursor: psycopg.Cursor) -> None:
    """What only the server knows of a new run: created_at, start_by and
    created_event_id, from ``create_runs``'s rows."""
    made = {run_id: rest for run_id, *rest in cursor}
    for run in runs:
        run.created_at, run.start_by, run.created_event_id = made[run.id]


def _runs_document(
    requests: Sequence[CheckedSubmission], ids: Sequence[uuid.UUID], hashes: Sequence[str]
) -> str:
    """``create_runs``'s runs (``runqueue.sql.json_rows``): one array per run
    in the statement's column order, the payload's checked text last."""
    return json_rows(
        (
            [
                str(run_id),
                r.tenant,
                r.principal,
                r.session_id,
                r.kind,
                r.priority,
                r.max_attempts,
                r.scheduled_for.isoformat() if r.scheduled_for is not None else None,
                r.idempotency_key,
                request_hash or None,
                r.concurrency_key,
                r.budget[0] if r.budget else None,
                r.budget[1] if r.budget else None,
                r.start_within,
                r.max_duration,
            ],
            (r.payload_text or json.dumps(r.payload),),
        )
        for r, run_id, request_hash in zip(requests, ids, hashes, strict=True)
    )


def insert_child(request: CheckedSubmission, *, parent_id: uuid.UUID, traceparent: str) -> Run:
    """A spawn's child, in a savepoint of its parent's fenced transaction;
    ActiveRunConflict if it names a session that has an active run."""
    try:
        with transaction.atomic():
            (child,) = insert_runs([request], [""], traceparent=traceparent, parent_id=parent_id)
    except IntegrityError as exc:
        if constraint_name(exc) != SESSION_CONSTRAINT:
            raise
        active = Run.objects.active().filter(tenant=request.tenant, session_id=request.session_id)
        found = active.values_list("id", "status").first()
        raise ActiveRunConflict(request.session_id or "", *(found or (None, None))) from exc
    return child


def _inserted(
    requests: Sequence[CheckedSubmission],
    ids: Sequence[uuid.UUID],
    tp: str,
    parent_id: uuid.UUID | None,
) -> list[Run]:
    """The Runs ``create_runs`` inserts, as ``Run.objects.get`` would read
    them once ``_set_server_values`` has put in what the server chose.
    (Hydrating RETURNING * cost more than the insert.)"""
    return inserted_runs(
        {
            "id": run_id,
            "tenant": request.tenant,
            "principal": request.principal,
            "session_id": request.session_id,
            "kind": request.kind,
            "payload": request.payload,
            "priority": request.priority,
            "max_attempts": request.max_attempts,
            "scheduled_for": request.scheduled_for,
            "traceparent": tp,
            "concurrency_key": request.concurrency_key,
            "budget_key": request.budget[0] if request.budget else None,
            "budget_tokens": request.budget[1] if request.budget else None,
            "parent_id": parent_id,
            "max_duration": request.max_duration,
        }
        for request, run_id in zip(requests, ids, strict=True)
    )
