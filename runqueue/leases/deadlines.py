"""Start deadlines (``start_within``): the one place a run not claimed in
time ends, cancelled with reason ``expired`` (docs/decisions/sessions.md, "Run
deadlines"). The worker's deadline service calls ``expire_unstarted``;
what should follow an expiry (a session's next turn, say) belongs here,
after the statement, with the ids it returns.
"""

from __future__ import annotations

import json
import uuid

from django.db import connection

from runqueue.conf import get_settings
from runqueue.errors import EXPIRED
from runqueue.leases.base import retry_moved
from runqueue.leases.failures import failure_record
from runqueue.sql import execute, prepared

#: Runs expired per statement.
EXPIRE_BATCH = 100

#: The record an expired run keeps in ``Run.failure``.
EXPIRED_FAILURE = json.dumps(
    failure_record(
        None,
        classification=EXPIRED,
        attempt=0,
        error_type="Expired",
        message="not claimed within its start_within",
    )
)


def expire_unstarted(limit: int = EXPIRE_BATCH) -> list[uuid.UUID]:
    """Cancel, as expired, every queued run whose start deadline passed on
    the database's clock, ``limit`` per statement; their ids. A run a claim
    holds is stepped over: it is claimed, or expired by a later look."""
    params = {
        "limit": limit,
        "failure": EXPIRED_FAILURE,
        "channel": get_settings().NOTIFY_CHANNEL,
    }

    def statement() -> list[uuid.UUID]:
        with prepared("expire_unstarted", params) as cursor:
            return [row[0] for row in cursor.fetchall()]

    expired: list[uuid.UUID] = []
    while True:
        # A parent moved between partitions while its join waited: again.
        batch = retry_moved(statement)
        expired.extend(batch)
        if len(batch) < limit:
            return expired


def expire_active_turn(run_id: uuid.UUID) -> bool:
    """Expire the session's active run ``run_id`` if it is still queued past
    its start deadline, in the caller's transaction (a submit's routing,
    which holds its row lock): True if it did. Its session's line moves on
    as after any expiry."""
    params = {
        "run_id": run_id,
        "failure": EXPIRED_FAILURE,
        "channel": get_settings().NOTIFY_CHANNEL,
    }
    with connection.cursor() as cursor:
        return execute(cursor, "expire_active_turn", params).fetchone() is not None
