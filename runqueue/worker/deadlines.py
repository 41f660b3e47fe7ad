"""The deadline service: each worker resumes the waits whose deadline has
passed (``ctx.sleep_until``, a signal's or the user's timeout), and
cancels as expired the queued runs whose start deadline passed
(``start_within``), within about ``MAX_SLEEP_SECONDS`` of the time on the
database's clock.

It sleeps until the earliest deadline the deadline index holds, but never
longer than ``MAX_SLEEP_SECONDS``, so a wait begun meanwhile by another
process with an earlier deadline is still found in time. Deadlines are
rows, so they survive any worker's restart; every worker runs the service
and the resume steps over rows another is resuming (SKIP LOCKED).
"""

from __future__ import annotations

import logging
import threading

from django.db import DatabaseError, connection

from runqueue import leases
from runqueue.db import connection_lost
from runqueue.worker.services import ConnectionCheck

logger = logging.getLogger("runqueue.worker")

#: The longest the service sleeps between two looks for due deadlines.
MAX_SLEEP_SECONDS = 0.5
#: The shortest: a deadline a few milliseconds away is waited for.
MIN_SLEEP_SECONDS = 0.005
#: How often the service lets Django check its connection (with
#: CONN_HEALTH_CHECKS a ``SELECT 1`` before the next query). Not every look:
#: at two looks a second that was a round trip and a transaction per look,
#: for a connection whose loss the look itself finds (and reconnects after).
CHECK_SECONDS = 5.0


class Deadlines(threading.Thread):
    """Resumes due waits until ``until`` is set."""

    def __init__(self, until: threading.Event) -> None:
        super().__init__(name="runqueue-deadlines", daemon=True)
        self.until = until
        #: Waits resumed by this thread (tests and the bench read it).
        self.resumed = 0
        #: Runs expired by this thread (start_within).
        self.expired = 0
        self._check = ConnectionCheck(every=CHECK_SECONDS)

    def run(self) -> None:
        try:
            while not self.until.is_set():
                self.until.wait(self.tick())
        finally:
            connection.close()

    def tick(self) -> float:
        """Resume what is due; seconds to sleep before the next look."""
        try:
            self._check()
            seconds = leases.next_deadline()  # one probe of the deadline index
            if seconds is not None and seconds <= 0:
                self.resumed += leases.resume_due()
                self.expired += len(leases.expire_unstarted())
                seconds = leases.next_deadline()
        except DatabaseError as exc:
            what = "connection lost" if connection_lost(exc) else "database error"
            logger.warning("deadlines: %s (%s); retrying", what, exc)
            connection.close()
            return MAX_SLEEP_SECONDS
        if seconds is None:
            return MAX_SLEEP_SECONDS
        return min(max(seconds, MIN_SLEEP_SECONDS), MAX_SLEEP_SECONDS)
