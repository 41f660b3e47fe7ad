"""What a submit did (``Submission``), and the idempotency keys that
remember it: a known key replays its first answer, the same key with
another request is IdempotencyConflict, and a same-key request that
committed first makes the writer start over (``Retry``). A submit's keys
and an answer's share one store (docs/decisions/sessions.md, "Submit")."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from dataclasses import dataclass
from typing import Literal

from django.db import IntegrityError, connection, transaction
from django.db.models import (
    BooleanField,
    ExpressionWrapper,
    Q,
)
from django.db.models.functions import Now

from runqueue.conf import get_settings
from runqueue.db import constraint_name
from runqueue.errors import (
    IdempotencyConflict,
)
from runqueue.models import (
    IdempotencyKey,
    Run,
    SubmitOutcome,
)
from runqueue.sql import set_config
from runqueue.submission import fields as submission_fields
from runqueue.submission.inserts import KEY_CONSTRAINT
from runqueue.submission.rules import (
    CheckedSubmission,
)

Outcome = Literal[
    "created",
    "replayed",
    "input_delivered",
    "enqueued",
    "merged",
    "interrupted",
    "rolled_back",
    "steered",
]


#: The outcomes a key's row records, as a Submission names them.
KEY_OUTCOMES: dict[str, Outcome] = {
    SubmitOutcome.CREATED: "created",
    SubmitOutcome.INPUT_DELIVERED: "input_delivered",
    SubmitOutcome.ENQUEUED: "enqueued",
    SubmitOutcome.MERGED: "merged",
    SubmitOutcome.INTERRUPTED: "interrupted",
    SubmitOutcome.ROLLED_BACK: "rolled_back",
    SubmitOutcome.STEERED: "steered",
}


@dataclass(frozen=True, slots=True, kw_only=True)
class Submission:
    """What a submit did: ``outcome`` is created, replayed, input_delivered,
    or what ``on_busy`` did with a busy session: enqueued (``run`` is a
    pending turn), merged (``run`` is the turn the payload joined),
    interrupted or rolled_back (``run`` is the new run, queued; the active
    run it replaced is cancelled).

    For a replay, ``original_outcome`` says what the first request did, so
    an API can answer as it did then.
    """

    run: Run
    outcome: Outcome
    original_outcome: Outcome


def request_hash_of(request: CheckedSubmission) -> str:
    """SHA-256 of the canonical request (``submission_fields.canonical``):
    sorted keys, no whitespace, UTC times."""
    text = json.dumps(
        submission_fields.canonical(request),
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    return hashlib.sha256(text.encode()).hexdigest()


class Retry(Exception):
    pass


def set_lock_timeout() -> None:
    set_config(connection, "lock_timeout", f"{get_settings().SUBMIT_LOCK_TIMEOUT_MS}ms")


def replay_request(request: CheckedSubmission, request_hash: str) -> Submission | None:
    """The original run for a known key, IdempotencyConflict, or None."""
    return replay_key(
        request.tenant, request.principal, request.idempotency_key or "", request_hash
    )


def replay_key(tenant: str, principal: str, key: str, request_hash: str) -> Submission | None:
    """The original run for a known key (a submit's or an answer's: one
    store), IdempotencyConflict for another request, or None."""
    found = (
        IdempotencyKey.objects.filter(tenant=tenant, principal=principal, key=key)
        .select_related("run")
        .annotate(expired=ExpressionWrapper(Q(expires_at__lte=Now()), BooleanField()))
        .first()
    )
    if found is None:
        return None
    if found.expired:
        found.delete()  # expired: the key is free again
        return None
    if found.request_hash != request_hash:
        raise IdempotencyConflict(key)
    original = KEY_OUTCOMES.get(found.outcome, "created")
    return Submission(run=found.run, outcome="replayed", original_outcome=original)


def remember_key(request: CheckedSubmission, request_hash: str, run: Run, outcome: str) -> None:
    if request.idempotency_key is None:
        return
    store_key(
        request.tenant, request.principal, request.idempotency_key, request_hash, run, outcome
    )


def store_key(
    tenant: str, principal: str, key: str, request_hash: str, run: Run, outcome: str
) -> None:
    """The key's row in a savepoint; Retry if a same-key request wrote it first."""
    retention = dt.timedelta(seconds=get_settings().IDEMPOTENCY_KEY_RETENTION_SECONDS)
    try:
        with transaction.atomic():
            IdempotencyKey.objects.create(
                tenant=tenant,
                principal=principal,
                key=key,
                request_hash=request_hash,
                run=run,
                outcome=outcome,
                expires_at=Now() + retention,
            )
    except IntegrityError as exc:
        if constraint_name(exc) != KEY_CONSTRAINT:
            raise
        raise Retry from exc
