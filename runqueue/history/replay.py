"""Replay finished runs against the code as it is now, writing nothing
(``manage.py runqueue_replay``; docs/decisions/run-trees.md, "Versions and rolling
deploys").

A run's handler runs again with a context whose steps (tool calls, spawns,
patch decisions) must be the run's recorded ones, in order, and return the
recorded outcomes: no tool runs, no child is made, no checkpoint, event or
usage is written, and the handler's own database work happens in a
read-only transaction that is rolled back. The first step that is not the
recorded one stops the replay: the run *diverged at step k*, with the
difference. When the handler asks for a step after the run's records end,
the replay stops there too: a *match* (a failed run's records end where it
failed). A handler that returns where the run made more steps diverged; a
succeeded run whose result differs diverged at its end.

Turns are replayed in order: a handler that ends its turn (``ask_user``,
a wait) resumes as the recorded run did, with the input its
``run.input_delivered`` event recorded or the timeout its ``run.resumed``
event did. A signal's data is not in the event log, so a turn that a signal
began is not replayed: the run matches up to it, and the note says so.
"""

from __future__ import annotations

import copy
import json
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Literal, NoReturn

from django.db import connection, transaction

from runqueue import events, leases, registry
from runqueue.errors import PermanentError
from runqueue.leases.outcomes import BudgetWait, ToolOutcome
from runqueue.models import Run, RunEvent, RunStatus, ToolInvocation
from runqueue.runtime import (
    AskUser,
    AsyncRunContext,
    RunContext,
    Wait,
    aio,
    respawned,
    same_tool_call,
)
from runqueue.runtime.tools import Approval, recorded_outcome
from runqueue.types import JSON

#: The statuses a replay reads: finished runs whose history is complete.
REPLAYED = (RunStatus.SUCCEEDED, RunStatus.FAILED)
#: A difference is shown up to this many characters per value.
SHOWN = 200


@dataclass(frozen=True, slots=True)
class Replayed:
    """How one run's replay went."""

    run_id: uuid.UUID
    status: str
    verdict: Literal["match", "diverged"]
    #: The step where it diverged (a tool call, spawn or patch decision,
    #: numbered from 0), or None.
    step: int | None = None
    difference: str = ""
    note: str = ""

    def line(self) -> str:
        """One line for the command's output."""
        head = f"{self.run_id} {self.status}: "
        if self.verdict == "match":
            return head + "match" + (f" ({self.note})" if self.note else "")
        where = f"at step {self.step}" if self.step is not None else "at its end"
        return head + f"diverged {where}: {self.difference}"


class _Stop(BaseException):  # noqa: N818 - not an error: it ends the handler's replay
    """Ends the handler's replay (a BaseException, so a handler's own
    ``except Exception`` does not swallow it)."""


class Diverged(_Stop):
    def __init__(self, step: int | None, difference: str) -> None:
        super().__init__(difference)
        self.step = step
        self.difference = difference


class RecordsEnd(_Stop):
    def __init__(self, step: int) -> None:
        super().__init__(f"the run's records end before step {step}")
        self.step = step


def _shown(value: object) -> str:
    text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= SHOWN else text[: SHOWN - 3] + "..."


class ReplayContext(RunContext):
    """A ``RunContext`` that writes nothing: each step must be the recorded
    one and gets its recorded outcome."""

    def __init__(self, driver: _Driver, lease: leases.Lease, state: JSON, tool_seq: int) -> None:
        recorded = {seq: t for seq, t in driver.records.items() if seq >= tool_seq}
        super().__init__(lease, state=state, tool_seq=tool_seq, recorded=recorded)
        self.driver = driver

    def _stop(self, stop: _Stop) -> NoReturn:
        self.driver.stopped = stop
        raise stop

    def tool_begin(
        self,
        seq: int,
        recorded: ToolInvocation | None,
        name: str,
        args: dict[str, JSON] | None,
        idempotency: str,
        rerun_failed: bool = False,
        asked: Approval | None = None,
    ) -> ToolOutcome | dict[str, JSON]:
        # A replay runs nothing: a recorded failure is replayed even when the
        # handler asks for a failed call to run again (``rerun_failed``); a
        # call awaiting approval, or approved and not run, ends the records.
        if recorded is None:
            self._stop(RecordsEnd(seq))
        try:
            same_tool_call(recorded, name, args)
        except PermanentError:
            self._stop(
                Diverged(
                    seq,
                    f"recorded {recorded.tool}({_shown(recorded.arguments)}), "
                    f"now {name}({_shown(args or {})})",
                )
            )
        return recorded_outcome(recorded) or self._stop(RecordsEnd(seq))

    def _spawn_numbered(
        self, seq: int, recorded: ToolInvocation | None, kind: str, payload: JSON = None, **_: Any
    ) -> uuid.UUID:
        if recorded is None:
            self._stop(RecordsEnd(seq))
        try:
            return respawned(recorded, kind, payload)
        except PermanentError:
            self._stop(
                Diverged(
                    seq,
                    f"recorded {recorded.tool}({_shown(recorded.arguments)}), "
                    f"now a spawn of {kind!r} with payload {_shown(payload)}",
                )
            )

    def steers(self) -> list[JSON]:
        """The messages the run took here, from its record; none where it
        took none (a replay takes nothing from the session's line)."""
        recorded = self._recorded.get(self._seq)
        if recorded is None or recorded.tool != leases.STEERS_TOOL:
            return []
        return super().steers()

    def _record_patch(self, seq: int, name: str) -> bool:
        return True  # a run reaching the patch afresh takes it; nothing written

    def _checkpoint_at(self, state: JSON, tool_seq: int) -> bool:
        self.state = state
        self.driver.checkpoint = (state, tool_seq)
        return True

    def heartbeat(self) -> bool:
        return True

    def emit(self, event_type: str, data: dict[str, JSON] | None = None) -> bool:
        return True

    def stream(self, text: str) -> bool:
        return True

    def reserve(self, key: str, tokens: int) -> bool:
        return True

    def settle(self, *, tokens: int, key: str | None = None) -> int | None:
        return 0

    def _record_usage_numbered(
        self, call: int, model: str, input_tokens: int, output_tokens: int, cost: Decimal | None
    ) -> Decimal | None:
        return cost


@dataclass(frozen=True, slots=True)
class _Resume:
    """How the recorded run began its next turn."""

    input: JSON
    timed_out: bool
    #: Resumed by a signal: its data is not in the event log.
    signal: bool = False


def _resumes(run_id: uuid.UUID) -> Iterator[_Resume]:
    rows = (
        RunEvent.objects.filter(run_id=run_id, type__in=[events.INPUT_DELIVERED, events.RESUMED])
        .order_by("created_at", "id")
        .values_list("type", "data")
    )
    for type_, data in rows:
        data = data if isinstance(data, dict) else {}
        if type_ == events.INPUT_DELIVERED:
            yield _Resume(data.get("input"), False)
        else:
            timed_out = bool(data.get("timed_out"))
            yield _Resume(None, timed_out, signal=data.get("reason") == "signal" and not timed_out)


class _Driver:
    """Runs one finished run's handler through its turns, as ``decide``
    would have, without writing."""

    def __init__(self, run: Run, fn: Callable[..., Any]) -> None:
        self.run = run
        self.fn = fn
        self.records = {t.seq: t for t in ToolInvocation.objects.filter(run_id=run.id)}
        self.resumes = _resumes(run.id)
        #: The last checkpoint the replay made: where the next turn resumes.
        self.checkpoint: tuple[JSON, int] = (None, 0)
        self.stopped: _Stop | None = None
        self.turns = 0

    def replay(self) -> Replayed:
        resume = _Resume(None, False)  # a run's first turn has no input
        while True:
            self.turns += 1
            ctx = self._context(resume)
            self.stopped = None
            try:
                result = self.call(ctx)
            except _Stop:
                return self._stopped()
            except Exception as exc:  # noqa: BLE001 - the handler's failure is its outcome
                if self.stopped is not None:  # the handler wrapped the stop in its own error
                    return self._stopped()
                return self._raised(ctx, exc)
            if self.stopped is not None:  # the handler swallowed the stop
                return self._stopped()
            if isinstance(result, BudgetWait):
                self.checkpoint = (result.state, result.tool_seq)
                continue
            if isinstance(result, AskUser | Wait):
                if result.state is not None:
                    self.checkpoint = (result.state, ctx._seq)
                # Records past this point are the later turns' (a turn the
                # run made longer diverges at the next turn's first step).
                nxt = next(self.resumes, None)
                if nxt is None:
                    return self._left(ctx) or self._verdict("match", note="the run ended waiting")
                if nxt.signal:
                    note = f"replayed {self.turns} turn(s); the next began with a signal's data, "
                    return self._verdict("match", note=note + "which the event log does not keep")
                resume = nxt
                continue
            return self._returned(ctx, result)

    def _context(self, resume: _Resume) -> ReplayContext:
        run = copy.copy(self.run)
        run.input, run.timed_out = resume.input, resume.timed_out
        run.attempts = 1
        lease = leases.Lease(run=run, owner="replay", lease_seconds=0)
        state, seq = self.checkpoint
        return ReplayContext(self, lease, state, seq)

    def call(self, ctx: ReplayContext) -> Any:
        if aio.is_async(self.fn):
            return aio.run(self.fn(AsyncRunContext(ctx))).result()
        return self.fn(ctx)

    def _stopped(self) -> Replayed:
        stop = self.stopped
        if isinstance(stop, Diverged):
            return self._verdict("diverged", stop.step, stop.difference)
        assert isinstance(stop, RecordsEnd)
        steps = len(self.records)
        return self._verdict("match", note=f"its {steps} recorded step(s) replayed")

    def _left(self, ctx: ReplayContext, ended: str = "ended its turn") -> Replayed | None:
        """Diverged if the run recorded steps the handler did not make."""
        if not ctx._recorded:
            return None
        step = min(ctx._recorded)
        tool = ctx._recorded[step].tool
        return self._verdict(
            "diverged", step, f"the handler {ended}; the run recorded {tool} next"
        )

    def _raised(self, ctx: ReplayContext, exc: Exception) -> Replayed:
        if (left := self._left(ctx, f"raised {type(exc).__name__}: {exc}")) is not None:
            return left
        if self.run.status == RunStatus.FAILED:
            return self._verdict("match", note=f"failed again: {type(exc).__name__}")
        return self._verdict(
            "diverged", None, f"raised {type(exc).__name__}: {exc}; the run succeeded"
        )

    def _returned(self, ctx: ReplayContext, result: JSON) -> Replayed:
        if (left := self._left(ctx, "returned")) is not None:
            return left
        if self.run.status == RunStatus.FAILED:
            return self._verdict("match", note="it returned where the run failed")
        now = json.loads(json.dumps(result, default=str))
        if now != self.run.result:
            return self._verdict(
                "diverged",
                None,
                f"returned {_shown(now)}, the run returned {_shown(self.run.result)}",
            )
        return self._verdict("match")

    def _verdict(
        self,
        verdict: Literal["match", "diverged"],
        step: int | None = None,
        difference: str = "",
        note: str = "",
    ) -> Replayed:
        return Replayed(self.run.id, self.run.status, verdict, step, difference, note)


@contextmanager
def _read_only() -> Iterator[None]:
    """A transaction that writes nothing: read-only, then rolled back."""
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET TRANSACTION READ ONLY")
        try:
            yield
        finally:
            transaction.set_rollback(True)


def replay_run(run: Run, version: int | None = None) -> Replayed:
    """Replay one finished run against ``version`` of its kind's handler
    (None: the newest this process has); UnknownKind without it."""
    fn = registry.lookup(run.kind, version)
    with _read_only():
        return _Driver(run, fn).replay()


def last_finished(kind: str, last: int) -> list[Run]:
    """The newest ``last`` finished (succeeded or failed) runs of ``kind``,
    newest first by creation (the kind's index on finished days)."""
    return list(
        Run.objects.filter(kind=kind, status__in=REPLAYED).order_by("-created_at", "-id")[:last]
    )


def replay(kind: str, last: int, version: int | None = None) -> list[Replayed]:
    """Replay the last ``last`` finished runs of ``kind``."""
    registry.lookup(kind, version)  # UnknownKind before anything is read
    return [replay_run(run, version) for run in last_finished(kind, last)]
