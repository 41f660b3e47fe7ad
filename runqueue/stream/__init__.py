"""Watch a run live: its events as a resumable Server-Sent Events stream
(``GET /api/runs/<id>/stream/``) and the progress events handlers publish
with ``ctx.emit``."""

from __future__ import annotations

from collections.abc import Sequence

from runqueue.models import Run
from runqueue.stream.hub import StreamLimit, process_hub
from runqueue.stream.sse import EventStream, has_events_after, on_this_history

#: The old name: a bound on open streams is full.
TooManyStreams = StreamLimit


def open_stream(
    run: Run,
    after: int,
    owners: Sequence[tuple[str, int | None]] = (),
    *,
    mark: str | None = None,
    operator: bool = False,
) -> EventStream | None:
    """The stream of ``run``'s events after event id ``after``; None when the
    run is finished and nothing follows ``after``. ``mark``: the cursor's
    stamp (``sse.parse_cursor``); a cursor not on this server's history
    replays the run from the start after a ``stream.reset``. ``operator``:
    a staff reader, who sees the lease's internals (``events.event_body``).

    A live run's stream takes one of the process's places and one of each
    owner's (``(key, limit)``: the caller's token, its tenant). A finished
    run's stream only replays and closes, so it takes no process place: a
    live run's stream never waits behind one. It still counts for its
    owners, so one caller cannot hold every thread with replays. Raises
    ``StreamLimit`` when a bound is full.
    """
    reset = not on_this_history(run.id, after, mark)
    if reset:
        after = 0
    elif run.is_terminal and not has_events_after(run.id, after):
        return None
    process = process_hub()
    place = process.acquire(owners, live=not run.is_terminal)
    return EventStream(process, run, after, place, reset=reset, operator=operator)


__all__ = ["EventStream", "StreamLimit", "TooManyStreams", "open_stream"]
