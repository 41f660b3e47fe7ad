"""Structured log lines: the worker's per-run lines carry their fields
(``run_id``, ``kind``, ``class``, ``epoch``, ``attempt``, ``outcome``, ...)
as LogRecord attributes, and ``JsonFormatter`` writes each record as one
JSON object per line with them. The deployable project switches to it with
``RUNQUEUE_LOG_FORMAT=json``; any project can name it in ``LOGGING``::

    "formatters": {"json": {"()": "runqueue.observability.logfmt.JsonFormatter"}}
"""

from __future__ import annotations

import datetime as dt
import json
import logging

#: Attributes every LogRecord has: anything else on a record came in ``extra``.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {
    "message",
    "asctime",
}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time (UTC, ISO 8601), level, logger,
    message, every ``extra`` field, and the exception if any."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, object] = {
            "time": dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD and key not in out:
                out[key] = value
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            out["stack"] = self.formatStack(record.stack_info)
        # default=str: run ids stay UUIDs until a line is actually written.
        return json.dumps(out, default=str, ensure_ascii=False)
