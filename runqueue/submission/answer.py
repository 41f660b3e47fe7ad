"""An answer to a run waiting for the user that honours an
Idempotency-Key as ``submit`` does, in the submit's key store
(``POST /api/runs/<id>/input/``)."""

from __future__ import annotations

import hashlib
import json
import uuid

from django.db import OperationalError, transaction

from runqueue import leases
from runqueue.db import sqlstate
from runqueue.errors import (
    IdempotencyInProgress,
    InvalidSubmission,
    InvalidTransition,
)
from runqueue.leases.base import moved_by_another
from runqueue.models import (
    Run,
    SubmitOutcome,
)
from runqueue.submission.keys import (
    Retry,
    Submission,
    replay_key,
    set_lock_timeout,
    store_key,
)
from runqueue.submission.rules import (
    idempotency_key_problem,
)
from runqueue.types import JSON


def answer(
    run_id: uuid.UUID | str,
    data: JSON = None,
    *,
    tenant: str = "default",
    principal: str = "",
    idempotency_key: str | None = None,
) -> Submission:
    """``deliver_input`` (answer a run waiting for the user) that honours an
    Idempotency-Key as ``submit`` does, in the same key store: the same
    answer to the same run again is the first one's run, ``outcome``
    ``replayed`` (``original_outcome`` ``input_delivered``), not an
    InvalidTransition; the key with another answer, another run or a submit
    is IdempotencyConflict. Without a key it is ``deliver_input``.

    Raises InvalidArgument (nothing written), RunNotFound, InvalidTransition
    (the run does not wait for the user), IdempotencyConflict or
    IdempotencyInProgress.
    """
    if idempotency_key is None:
        run = leases.deliver_input(run_id, data)
        return Submission(run=run, outcome="input_delivered", original_outcome="input_delivered")
    if (problem := idempotency_key_problem(idempotency_key)) is not None:
        raise InvalidSubmission("idempotency_key", problem)
    parsed = leases.checked_input(run_id, data)
    canonical = json.dumps(
        {"answer": str(parsed), "input": data}, sort_keys=True, separators=(",", ":")
    )
    request_hash = hashlib.sha256(canonical.encode()).hexdigest()
    for _ in range(3):
        try:
            return _answer_once(parsed, data, tenant, principal, idempotency_key, request_hash)
        except Retry:
            continue
    raise IdempotencyInProgress(idempotency_key)


def _answer_once(
    run_id: uuid.UUID, data: JSON, tenant: str, principal: str, key: str, request_hash: str
) -> Submission:
    try:
        with transaction.atomic(durable=True):
            set_lock_timeout()
            replay = replay_key(tenant, principal, key, request_hash)
            if replay is not None:
                return replay
            try:
                leases.deliver_waiting(run_id, data)
            except InvalidTransition:
                # A same-key answer may have committed while we waited for
                # the run's lock: a statement's fresh snapshot shows its key.
                replay = replay_key(tenant, principal, key, request_hash)
                if replay is not None:
                    return replay
                raise
            run = Run.objects.get(id=run_id)
            store_key(tenant, principal, key, request_hash, run, SubmitOutcome.INPUT_DELIVERED)
            return Submission(
                run=run, outcome="input_delivered", original_outcome="input_delivered"
            )
    except OperationalError as exc:
        if moved_by_another(exc):
            raise Retry from exc  # the run moved (it ended) while we waited for it
        if sqlstate(exc) == "55P03":  # lock_not_available
            raise IdempotencyInProgress(key) from exc
        raise
