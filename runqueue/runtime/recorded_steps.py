"""The steps a handler records that are not tool calls, the ``RunContext``
part for a schedule made (``schedule``), a code change's branch taken
(``patched``) and the messages that steer the turn (``steers``). Each is
numbered in call order like a tool call, so a later attempt meets the same
step at the same point, and a fenced handler records none."""

from __future__ import annotations

import datetime as dt
import uuid

from runqueue import leases
from runqueue.runtime.context_base import ContextBase
from runqueue.runtime.tools import PATCH_TOOL, is_patch, patch_name_problem
from runqueue.schedules import owned
from runqueue.types import JSON


class RecordedSteps(ContextBase):
    """``schedule``, ``patched`` and ``steers``."""

    def schedule(
        self,
        kind: str,
        payload: JSON = None,
        *,
        cron: str | None = None,
        timezone: str | None = None,
        run_at: dt.datetime | dt.timedelta | None = None,
        session_id: str | None = None,
        on_busy: str | None = None,
        priority: int | None = None,
        overlap: str | None = None,
        runs_may_schedule: bool = False,
    ) -> uuid.UUID:
        """Make a schedule in this run's tenant: ``cron`` (in ``timezone``)
        or once at ``run_at`` (a datetime, or a timedelta from now), its
        runs ``kind`` with ``payload``, turns of ``session_id`` if given;
        its id (the one ``/api/schedules/<id>/`` shows). Recorded in order
        like a tool call: a handler run again gets the same schedule back.
        ScheduleRefused in a run a schedule started, unless that schedule
        allows it (docs/handlers-runs.md, "Schedules from a handler")."""
        self.check()
        seq, recorded = self._number()
        if recorded is not None:
            return owned.replayed(recorded, kind)
        made = owned.create_for_run(
            self.lease,
            seq,
            kind=kind,
            payload=payload,
            cron_expr=cron,
            timezone=timezone,
            run_at=run_at,
            session_id=session_id,
            on_busy=on_busy,
            priority=priority,
            overlap=overlap,
            runs_may_schedule=runs_may_schedule,
        )
        if made is None:
            raise self._lost()
        return made

    def patched(self, name: str) -> bool:
        """Branch in place for a change of code: True when this run reaches
        this point for the first time in code that has the patch ``name``
        (the decision is recorded as a step, so every later attempt gets
        True again); False when the run recorded another step here, made by
        code without the patch, so its replay takes the old path. ValueError
        for a name that is not 1-255 characters of text."""
        self.check()
        seq, known = self._patch_number(name)
        return known if known is not None else self._record_patch(seq, name)

    def _patch_number(self, name: str) -> tuple[int, bool | None]:
        """The patch decision at the next call's number: True or False when
        the run's records decide it, None when it is decided now, as call
        ``seq`` (``_record_patch``). A False takes no number: the recorded
        step here is the old code's next call."""
        if (problem := patch_name_problem(name)) is not None:
            raise ValueError(f"a patch's name {problem}")
        seq = self._seq
        recorded = self._recorded.get(seq)
        if recorded is not None and not is_patch(recorded, name):
            return seq, False
        self._seq += 1
        if recorded is not None:
            del self._recorded[seq]
            return seq, True
        return seq, None

    def _record_patch(self, seq: int, name: str) -> bool:
        """Record that this run took patch ``name`` as call ``seq``; True.
        A fenced handler records nothing (RunCancelled)."""
        if not leases.record_step(
            self.lease, seq=seq, tool=PATCH_TOOL, arguments={"name": name}, result=True
        ):
            raise self._lost()
        return True

    def steers(self) -> list[JSON]:
        """The messages sent to steer this turn (``on_busy="steer"``) since
        it last looked, oldest first; [] when there are none. Call it at a
        step boundary (an agent adapter does, before each model request).
        Taking messages is a step of the run: a retry gets the same
        messages at the same point, and a fenced worker takes none
        (RunCancelled). A point that found none takes no step, so a retry
        finds none there either; a message not taken before the turn ends
        runs as the session's next turn."""
        self.check()
        seq = self._seq
        recorded = self._recorded.get(seq)
        if recorded is not None:
            if recorded.tool != leases.STEERS_TOOL:
                return []  # the first attempt found none here
            del self._recorded[seq]
            self._seq += 1
            result = recorded.result if isinstance(recorded.result, dict) else {}
            return list(result.get("payloads") or [])
        if not leases.has_steers(self.run):
            return []
        taken = leases.take_steers(self.lease, seq)
        if taken is None:
            raise self._lost()
        if taken:
            self._seq += 1
        return taken
