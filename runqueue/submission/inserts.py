"""New runs written: the one statement (``create_runs``) that inserts a
submit's runs, a ``submit_many`` chunk's, and a spawn's child, with their
events, keys and NOTIFYs. ``runqueue.submission`` routes a submit to it;
``runqueue.leases`` writes a child with it behind the parent's fence."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from contextlib import nullcontext
from typing import TYPE_CHECKING

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
from runqueue.models.rows import inserted_run
from runqueue.sql import json_rows, prepared

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
    now = timezone.now()
    due = {
        # The class's NOTIFY payload (leases.notify_payload).
        PriorityClass.of(r.priority).slug
        for r in requests
        if place is None and (not r.scheduled_for or r.scheduled_for <= now)
    }
    ids = [uuid.uuid4() for _ in requests]
    params = {
        "runs": _runs_document(requests, ids, hashes),
        "traceparent": traceparent,
        "parent_id": parent_id,
        "place": place,
        "interrupted_id": interrupted_id,
        "key_outcome": str(key_outcome),
        "key_retention_seconds": float(get_settings().IDEMPOTENCY_KEY_RETENTION_SECONDS),
        "channel": get_settings().NOTIFY_CHANNEL,
        "notify": sorted(due),
        "lock_timeout": f"{get_settings().SUBMIT_LOCK_TIMEOUT_MS}ms"
        if any(r.idempotency_key is not None for r in requests)
        else None,
    }
    capped = [(i, r.spend_cap) for i, r in zip(ids, requests, strict=True) if r.spend_cap]
    hooked = [(i, r.webhook) for i, r in zip(ids, requests, strict=True) if r.webhook]
    with transaction.atomic() if capped or hooked else nullcontext():
        with prepared("create_runs", params) as cursor:
            made = {run_id: (at, start_by, event_id) for run_id, at, start_by, event_id in cursor}
        # The trees' spend caps, in the runs' transaction (usage.py).
        TreeSpend.objects.bulk_create(TreeSpend(run_id=i, spend_cap=cap) for i, cap in capped)
        # The runs' own webhook URLs, in their transaction too (webhooks).
        WebhookTarget.objects.bulk_create(
            WebhookTarget(run_id=i, endpoint_id=hook[0], url=hook[1]) for i, hook in hooked if hook
        )
    # The rows hold what was sent, and the defaults; only created_at,
    # start_by and created_event_id come from the server. (Hydrating
    # RETURNING * cost more than the insert.)
    runs = [
        _inserted(r, run_id, *made[run_id], traceparent, parent_id)
        for r, run_id in zip(requests, ids, strict=True)
    ]
    if place is not None:
        for run in runs:
            run.status, run.place, run.interrupted_id = RunStatus.PENDING, place, interrupted_id
    return runs


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
    request: CheckedSubmission,
    run_id: uuid.UUID,
    created_at: object,
    start_by: object,
    created_event_id: object,
    tp: str,
    parent_id: uuid.UUID | None = None,
) -> Run:
    """The Run ``create_runs`` inserted, as ``Run.objects.get`` would read it."""
    return inserted_run(
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
            "created_at": created_at,
            "parent_id": parent_id,
            "max_duration": request.max_duration,
            "start_by": start_by,
            "created_event_id": created_event_id,
        }
    )
