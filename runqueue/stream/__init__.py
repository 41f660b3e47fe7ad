"""Watch a run live: its events as a resumable Server-Sent Events stream
(``GET /api/runs/<id>/stream/``) and the progress events handlers publish
with ``ctx.emit``."""

from __future__ import annotations

from runqueue.models import Run
from runqueue.stream.hub import process_hub
from runqueue.stream.sse import EventStream, has_events_after


class TooManyStreams(Exception):
    """This process already serves ``STREAM_MAX_PER_PROCESS`` streams."""


def open_stream(run: Run, after: int) -> EventStream | None:
    """The stream of ``run``'s events after event id ``after``; None when the
    run is finished and nothing follows ``after``. Raises TooManyStreams."""
    if run.is_terminal and not has_events_after(run.id, after):
        return None
    process = process_hub()
    if not process.acquire():
        raise TooManyStreams
    return EventStream(process, run, after)


__all__ = ["EventStream", "TooManyStreams", "open_stream"]
