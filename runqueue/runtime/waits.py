"""How a handler ends its turn to wait, the ``RunContext`` part that builds
the value a handler returns for it: for the user's answer (``ask_user``), a
signal, an inbound event or a time. The wait is written when the turn's
outcome is (``runqueue.runtime.running``); a bad name or match is refused
here, at the call."""

from __future__ import annotations

import datetime as dt

from runqueue import leases
from runqueue.leases.outcomes import positive_seconds, wake_time
from runqueue.models import WaitReason
from runqueue.runtime.context_base import ContextBase
from runqueue.runtime.returns import AskUser, Wait
from runqueue.types import JSON


class Waits(ContextBase):
    """``ask_user``, ``wait_for_signal``, ``wait_for_event`` and ``sleep_until``."""

    def ask_user(
        self, question: JSON, state: JSON = None, timeout: float | dt.timedelta | None = None
    ) -> AskUser:
        """Return this from the handler to wait for the user's answer; with
        ``timeout`` (seconds or a timedelta) at most that long, then it
        resumes with ``ctx.timed_out`` true and ``ctx.input`` None."""
        self.check()
        return AskUser(
            question=question,
            state=self._state(state),
            timeout=positive_seconds(timeout),
        )

    def wait_for_signal(
        self,
        name: str,
        *,
        timeout: float | dt.timedelta | None = None,
        state: JSON = None,
    ) -> Wait:
        """Return this from the handler to end the turn until signal
        ``name`` comes (``runqueue.signal``; its data is ``ctx.input``), or
        ``timeout`` passes (``ctx.timed_out``). A signal sent earlier, even
        before the run started, was kept for it and ends the wait at once."""
        return self._wait_named(WaitReason.SIGNAL, name, "a signal's", timeout, state)

    def wait_for_event(
        self,
        name: str,
        *,
        match: dict[str, JSON] | None = None,
        timeout: float | dt.timedelta | None = None,
        state: JSON = None,
    ) -> Wait:
        """Return this from the handler to end the turn until an inbound
        event ``name`` of the run's tenant whose data contains ``match``
        (PostgreSQL's jsonb ``@>``; ``{}`` or None: any) arrives, or
        ``timeout`` passes (``ctx.timed_out``). The event is ``ctx.input``
        (name, key, data, received_at). One received within
        ``EVENT_RETENTION_SECONDS`` before the wait, and not taken by this
        run yet, ends it at once: an event that came first is not lost."""
        match = {} if match is None else match
        return self._wait_named(WaitReason.EVENT, name, "an event's", timeout, state, match)

    def _wait_named(
        self,
        reason: str,
        name: str,
        whose: str,
        timeout: float | dt.timedelta | None,
        state: JSON,
        match: dict[str, JSON] | None = None,
    ) -> Wait:
        """A wait for the signal or event ``name`` (``whose`` name, in a
        ValueError), checked in order: the run, the name, an event's
        ``match``, the state and the timeout."""
        self.check()
        if (problem := leases.signal_name_problem(name)) is not None:
            raise ValueError(f"{whose} name {problem}")
        if match is not None and (problem := leases.event_match_problem(match)) is not None:
            raise ValueError(f"an event wait's match {problem}")
        return Wait(
            reason=reason,
            state=self._state(state),
            name=name,
            timeout=positive_seconds(timeout),
            match=match,
        )

    def sleep_until(self, when: dt.datetime, state: JSON = None) -> Wait:
        """Return this from the handler to end the turn until ``when`` (an
        aware datetime, compared with the database's clock, at most
        9999-12-31 in UTC; ValueError if not)."""
        self.check()
        return Wait(reason=WaitReason.TIMER, state=self._state(state), until=wake_time(when))
