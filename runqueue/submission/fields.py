"""The fields of a submit, declared once (as ``conf/table.py`` declares the
settings): each one's place in ``submit()``'s signature, whether and how
the idempotency hash holds it, and, for the members ``POST /api/runs/``
takes, its JSON schema (the OpenAPI document's ``SubmitRun``) and how the
API passes it on. The API's body parsing, the OpenAPI document and the
hash read this table; ``tests/unit/test_submission_fields.py`` holds
``submit()``, ``submit_in_transaction()``, ``check_submission()``,
``SubmitRequest`` and the API's typed bodies to it.

Python's keyword arguments stay written out in ``submit()`` (an editor and
a type checker read a signature, not a table); the test makes a field
missing there, or one the table does not know, fail.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from runqueue.conf import ON_BUSY
from runqueue.limits import BUDGET_KEY_MAX_LENGTH, BUDGET_TOKENS_MAX, MAX_WAIT_SECONDS
from runqueue.models import PRIORITY_MAX, PriorityClass
from runqueue.models.webhooks import URL_MAX_LENGTH
from runqueue.submission.rules import TEXT_LIMITS, CheckedSubmission
from runqueue.types import JSON

_NO_NUL = "^[^\\u0000]+$"


class _Omit:
    """Left out of the idempotency hash (so a key stored before the field
    existed still matches)."""


OMIT = _Omit()

Schema = Callable[[Sequence[str]], dict[str, JSON]]
Canonical = Callable[[CheckedSubmission], object]


@dataclass(frozen=True, slots=True)
class SubmitField:
    name: str
    #: Its JSON schema as a member of ``POST /api/runs/``, given the kinds
    #: the API may submit; None: Python only.
    schema: Schema | None = None
    #: What the idempotency hash holds of it (OMIT: nothing this time);
    #: None: never in the hash (a retry may change it and still replay).
    canonical: Canonical | None = None
    #: What the API passes ``check_submission`` when the body lacks it.
    api_default: object = None
    #: The API passes the checked value on only when the body gave one:
    #: the kind's and the project's defaults are ``submit()``'s to apply.
    api_own_only: bool = False
    #: The API checks its form only: ``submit()`` checks the rest with the
    #: caller's tenant (a webhook's endpoint, the SSRF rule).
    api_form_only: bool = False


def _utc(value: dt.datetime | None) -> str | None:
    return value.astimezone(dt.UTC).isoformat() if value else None


def _nullable_seconds(description: str) -> Schema:
    return lambda _kinds: {
        "type": ["number", "null"],
        "exclusiveMinimum": 0,
        "maximum": MAX_WAIT_SECONDS,
        "description": description,
    }


FIELDS: tuple[SubmitField, ...] = (
    SubmitField(
        "kind",
        schema=lambda kinds: {
            "type": "string",
            "enum": list(kinds),
            "description": "the handler's name",
        },
        canonical=lambda r: r.kind,
    ),
    SubmitField(
        "payload",
        schema=lambda _kinds: {
            "description": "any JSON; its strings must be valid Unicode (no unpaired "
            "surrogate escapes) without NUL characters"
        },
        canonical=lambda r: r.payload,
    ),
    SubmitField(
        "session_id",
        schema=lambda _kinds: {
            "type": ["string", "null"],
            "minLength": 1,
            "maxLength": TEXT_LIMITS["session_id"],
            "pattern": _NO_NUL,
        },
        canonical=lambda r: r.session_id,
    ),
    SubmitField("tenant"),
    SubmitField("principal"),
    SubmitField(
        "priority",
        schema=lambda _kinds: {
            "oneOf": [
                {"type": "integer", "minimum": 0, "maximum": PRIORITY_MAX},
                {"type": "string", "enum": list(PriorityClass.slugs())},
            ],
            "description": f"{PriorityClass.describe()}; at most "
            "the caller's ceiling (a token's highest priority class), which is also "
            "the default",
        },
        canonical=lambda r: r.priority,
        api_default=int(PriorityClass.INTERACTIVE),
    ),
    SubmitField("idempotency_key"),
    SubmitField(
        "scheduled_for",
        schema=lambda _kinds: {
            "type": ["string", "null"],
            "format": "date-time",
            "description": "an RFC 3339 time with an offset, between 0001-01-01 and "
            "9999-12-31 once in UTC",
        },
        canonical=lambda r: _utc(r.scheduled_for),
    ),
    SubmitField("max_attempts"),
    SubmitField(
        "concurrency_key",
        # Only when it is not the default, so keys stored before it existed still match.
        canonical=lambda r: r.concurrency_key if r.concurrency_key != r.tenant else OMIT,
    ),
    SubmitField(
        "budget",
        schema=lambda _kinds: {
            "type": ["object", "null"],
            "additionalProperties": False,
            "required": ["key", "tokens"],
            "properties": {
                "key": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": BUDGET_KEY_MAX_LENGTH,
                    "pattern": _NO_NUL,
                },
                "tokens": {"type": "integer", "minimum": 0, "maximum": BUDGET_TOKENS_MAX},
            },
            "description": "the run's first model call: it is claimed only once one "
            "request and these tokens are reserved on this budget (an existing "
            "budget; at most its tokens per window)",
        },
        canonical=lambda r: list(r.budget) if r.budget is not None else OMIT,
    ),
    SubmitField(
        "start_within",
        schema=_nullable_seconds(
            "seconds: a run not claimed this long after it is due "
            "ends cancelled with reason expired (its session freed); counts for its "
            "first start only (a pending turn's from its submit). Default: the "
            "kind's, then the project's (none)"
        ),
        api_own_only=True,
    ),
    SubmitField("max_duration"),
    SubmitField(
        "spend_cap",
        schema=lambda _kinds: {
            "type": ["number", "null"],
            "exclusiveMinimum": 0,
            "description": "the run tree's spend cap, in the currency of "
            "RUNQUEUE['PRICES']: once the cost its runs record reaches it, its live "
            "runs are cancelled with reason spend_cap",
        },
        canonical=lambda r: str(r.spend_cap) if r.spend_cap is not None else OMIT,
    ),
    SubmitField(
        "on_busy",
        schema=lambda _kinds: {
            "type": ["string", "null"],
            "enum": [*ON_BUSY, None],
            "description": "what a submit to a session whose active run is busy "
            "(queued, running or waiting) does: reject (409 session-busy), enqueue "
            "(201, a pending run queued when the active run ends; 409 "
            "session-queue-full past the project's cap), interrupt (201, the active "
            "run is cancelled and this run starts now, told what it did), rollback "
            "(the same, told nothing), merge (202, the payload joins the session's "
            "turn not started yet: its payloads; else as enqueue), steer (201, a "
            "pending run the running turn may read at its next step, else the next "
            "turn), answer (the input of a run waiting for the user, else as "
            "enqueue), debounce (joins the turn not started yet and pushes its start "
            "back by the window; an idle session's turn waits a window), latest "
            "(replaces the messages of the turn not started yet). A run waiting for "
            "the user takes a submit without on_busy (or "
            "with answer) as its input; any other policy is honoured as for a busy "
            "run. Default: the project's (reject)",
        },
    ),
    SubmitField(
        "debounce",
        schema=_nullable_seconds(
            "with on_busy debounce: seconds a turn waits for more "
            "messages (each one pushes its start back, never past the kind's longest "
            "wait, ten windows by default). Default: the kind's"
        ),
        api_own_only=True,
    ),
    SubmitField(
        "webhook",
        schema=lambda _kinds: {
            "type": ["string", "null"],
            "maxLength": URL_MAX_LENGTH,
            "description": "an http(s) URL that receives this run's events (succeeded, "
            "failed, cancelled, waiting for the user, uncertain), signed as Standard "
            "Webhooks signs, with the secret of the tenant's active webhook endpoint "
            "whose URL it starts with; a host resolving to a non-public address is "
            "refused (422) unless the operator allows it",
        },
        canonical=lambda r: r.webhook[1] if r.webhook is not None else OMIT,
        api_form_only=True,
    ),
)

#: Every field's name, in ``submit()``'s order.
NAMES: tuple[str, ...] = tuple(f.name for f in FIELDS)
#: The members ``POST /api/runs/`` takes, in the table's order.
API_FIELDS: tuple[SubmitField, ...] = tuple(f for f in FIELDS if f.schema is not None)
API_NAMES = frozenset(f.name for f in API_FIELDS)


def canonical(request: CheckedSubmission) -> dict[str, object]:
    """What the idempotency hash of ``request`` holds (sorted by the hash)."""
    held: dict[str, object] = {}
    for field in FIELDS:
        if field.canonical is not None and (value := field.canonical(request)) is not OMIT:
            held[field.name] = value
    return held


def api_properties(kinds: Sequence[str]) -> dict[str, JSON]:
    """The OpenAPI ``SubmitRun`` schema's properties."""
    return {f.name: f.schema(kinds) for f in API_FIELDS if f.schema is not None}
