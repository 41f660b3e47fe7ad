"""One slot: take a lease from the group, decide how its run ends, hand the
outcome back and take the next lease, until the group says stop.

A slot writes no outcome and ends no lease: its group does both
(``runqueue.worker.group``). What the handler writes while it runs
(checkpoints, tool records, events) goes through the fence on the slot's
own connection.
"""

from __future__ import annotations

import logging
import threading

from django.db import DatabaseError, connection

from runqueue import leases, observe, runtime
from runqueue.outcomes import Outcome
from runqueue.worker.group import Box, Dispatch, Done
from runqueue.worker.services import ConnectionCheck

logger = logging.getLogger("runqueue.worker")


class Slot(threading.Thread):
    def __init__(self, name: str, group: Dispatch) -> None:
        super().__init__(name=name, daemon=True)
        self.group = group

    def run(self) -> None:
        check = ConnectionCheck()
        box = Box()
        done: Done | None = None
        try:
            while (lease := self.group.exchange(box, done)) is not None:
                check()
                done = (lease, self._decide(lease))
        finally:
            connection.close()

    def _decide(self, lease: leases.Lease) -> Outcome | None:
        run = lease.run
        observe.claimed(lease)  # log line, metrics
        try:
            with observe.run_span(lease):  # OpenTelemetry; ended by observe.finished
                return runtime.decide(lease)
        except DatabaseError as exc:
            # Lost the database mid-run: the lease expires and the sweeper
            # requeues the run; nothing here can be trusted to have committed.
            logger.warning(
                "Run id=%s: database error (%s); leaving it to the sweeper", run.id, exc
            )
            connection.close()
        except Exception:
            logger.exception("Run id=%s: the runtime failed", run.id)
        return None
