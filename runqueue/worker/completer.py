"""The completer: one thread per pool that writes the slots' finishes
(succeed, fail) in batches, one statement each (``leases.finish_many``).

A slot that ends a run hands its finish over and takes its next run; the
run is not finished yet. Until the completer's batch commits, the pool keeps
holding the lease: the heartbeat renews it and a shutdown gives it back if
it is still unfinished. "Finished run" is logged, and the lease dropped,
only once the batch committed (or found the run fenced). A crash before the
commit leaves the run to lease expiry, as a crash during its handler would.

Batches are whatever was handed over while the last one was written: no
timer, no wait when the pool is idle. At most ``max_queued`` finishes wait;
a slot handing over more waits for room, so a slow database slows the
slots instead of piling up finished runs.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.db import DatabaseError, close_old_connections, connection

from runqueue import leases

logger = logging.getLogger("runqueue.worker")

#: Called once per handed-over finish: the lease and its outcome
#: (succeeded, failed, fenced, or error: left to lease expiry).
Done = Callable[[leases.Lease, str], None]


@dataclass(frozen=True, eq=False)
class _Handed:
    finish: leases.Finish
    outcome: str  # what the run becomes if the finish commits


class Completer(threading.Thread):
    def __init__(self, done: Done, *, max_batch: int = 100, max_queued: int = 100) -> None:
        super().__init__(name="runqueue-completer", daemon=True)
        self._done = done
        self.max_batch = max(1, max_batch)
        self.max_queued = max(1, max_queued)
        self._cond = threading.Condition()
        self._queue: list[_Handed] = []
        self._open = False
        self._closing = False
        #: Statements written and finishes in them (logged at shutdown).
        self.batches = 0
        self.finishes = 0

    # --- slots ---------------------------------------------------------------

    def succeed(self, lease: leases.Lease, result: Any = None) -> bool | None:
        """Hand a success over: None once handed over (the completer reports
        it), or, once the completer is closed, ``leases.succeed``'s answer."""
        params = leases.succeed_params(lease, result)  # ValueError before handing over
        if self._hand(leases.Finish(lease, "succeed", params), "succeeded"):
            return None
        return leases.succeed(lease, result)

    def fail(self, lease: leases.Lease, failure: dict[str, Any]) -> bool | None:
        """Hand a permanent failure over; as ``succeed``."""
        params = leases.fail_params(lease, failure)
        if self._hand(leases.Finish(lease, "fail", params), "failed"):
            return None
        return leases.fail(lease, failure)

    def _hand(self, finish: leases.Finish, outcome: str) -> bool:
        if leases.hooks.inside_fence is not None or connection.in_atomic_block:
            return False  # a test pausing inside the fence, or a caller's transaction
        with self._cond:
            while self._open and len(self._queue) >= self.max_queued:
                self._cond.wait()
            if not self._open:
                return False
            self._queue.append(_Handed(finish, outcome))
            self._cond.notify_all()
            return True

    # --- the thread ------------------------------------------------------------

    def start(self) -> None:
        with self._cond:
            self._open = True
        super().start()

    def close(self, timeout: float | None = None) -> None:
        """Write what was handed over, then stop; later finishes are written
        by their slots, one by one."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        if self.is_alive():
            self.join(timeout)
        logger.info("Completer wrote %d finishes in %d statements", self.finishes, self.batches)

    def run(self) -> None:
        try:
            while True:
                with self._cond:
                    while not self._queue and not self._closing:
                        self._cond.wait()
                    if not self._queue:
                        self._open = False
                        self._cond.notify_all()
                        return
                    batch = self._queue[: self.max_batch]
                    del self._queue[: self.max_batch]
                    self._cond.notify_all()
                # As a slot does per run: drop a connection that is broken
                # or too old before writing on it.
                close_old_connections()
                self._write(batch)
        finally:
            with self._cond:
                self._open = False
                self._cond.notify_all()
            connection.close()

    def _write(self, batch: list[_Handed]) -> None:
        try:
            ok = leases.finish_many([h.finish for h in batch])
        except DatabaseError as exc:
            # The commit may or may not have happened: nothing here can be
            # trusted, so the runs are left to lease expiry and the sweeper.
            logger.warning(
                "Completer: database error (%s); leaving %d runs to the sweeper", exc, len(batch)
            )
            connection.close()
            outcomes = ["error"] * len(batch)
        except Exception:
            logger.exception("Completer: writing %d finishes failed", len(batch))
            outcomes = ["error"] * len(batch)
        else:
            outcomes = [h.outcome if done else "fenced" for h, done in zip(batch, ok, strict=True)]
        self.batches += 1
        self.finishes += len(batch)
        for handed, outcome in zip(batch, outcomes, strict=True):
            try:
                self._done(handed.finish.lease, outcome)
            except Exception:
                logger.exception(
                    "Completer: reporting run id=%s failed", handed.finish.lease.run_id
                )
