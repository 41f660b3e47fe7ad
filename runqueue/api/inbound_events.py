"""``POST /api/events/<name>/``: an inbound event, recorded once per key by
``runqueue.send_event`` once it passes the checks that let it in (the
quota, the accepted names, the size, the signature, the JSON object)."""

from __future__ import annotations

import logging

from django.http import HttpRequest, HttpResponse, JsonResponse

import runqueue
from runqueue.api import admission, parsing
from runqueue.api.auth import Caller
from runqueue.api.endpoint import api_view
from runqueue.api.errors import ApiError, request_id, validation_failed
from runqueue.api.render import run_url
from runqueue.conf import get_settings
from runqueue.errors import InvalidArgument
from runqueue.events import inbound as events_in

logger = logging.getLogger("runqueue.api")


@api_view("POST")
def receive_event(request: HttpRequest, caller: Caller, name: str) -> HttpResponse:
    """Record inbound event ``name`` for the caller's tenant: 201 with the
    runs its triggers started; the same key again (a repeated delivery)
    200 with the first answer, ``Idempotent-Replayed: true``. Checked in
    order: the quota, the name (``API_EVENTS``), the size
    (``EVENT_MAX_BYTES``), the signature (``EVENT_VERIFIERS``) on the raw
    body, the JSON object, the key. Nothing is written unless all pass."""
    admission.take_quota(caller)
    conf = get_settings()
    if name not in conf.API_EVENTS:
        raise ApiError("event-not-accepted", f"Events named {name[:255]!r} are not accepted here.")
    raw = parsing.read_body(request, conf.EVENT_MAX_BYTES)
    if not events_in.verify(name, request.headers, raw):
        raise ApiError(
            "event-signature-invalid",
            "The event's signature is missing or does not match its body; nothing was recorded.",
        )
    body = parsing.parse_json(request, raw)
    if not isinstance(body, dict):
        raise validation_failed([{"pointer": "", "detail": "an event's body is a JSON object"}])
    key = parsing.event_key(request, name, body)
    try:
        received = runqueue.send_event(
            name, body, key=key, tenant=caller.tenant, principal=caller.principal
        )
    except events_in.EventKeyReused as exc:
        raise ApiError(
            "idempotency-key-reused",
            f"Event {name!r} with key {key!r} was received with other data.",
        ) from exc
    except events_in.TriggerFailed as exc:
        logger.error("Event %r not recorded: %s request=%s", name, exc, request_id(request))
        raise ApiError(
            "event-trigger-failed",
            f"Trigger {exc.trigger} could not start its run; nothing was recorded. "
            "Retry once the trigger is fixed.",
        ) from exc
    except InvalidArgument as exc:
        raise validation_failed([{"pointer": "", "detail": str(exc)}]) from exc
    event = received.event
    response = JsonResponse(
        {
            "name": event.name,
            "key": event.key,
            "received_at": event.received_at.isoformat(),
            "started": [str(run) for run in received.started],
            "started_runs": [run_url(run) for run in received.started],
        },
        status=200 if received.replayed else 201,
    )
    if received.replayed:
        response["Idempotent-Replayed"] = "true"
    return response
