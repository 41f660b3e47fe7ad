"""Inbound events: what other systems send (``POST /api/events/<name>/``,
``runqueue.send_event``), recorded once per (tenant, name, key), the runs
their triggers start and the waits they end (docs/decisions/schedules-webhooks.md, "Inbound
events").

One transaction per event: the (tenant, name) lock taken shared, the
event's row (or, for a key already known, nothing: a replay), a run per
matching trigger (``submit_in_transaction``, so a repeated delivery never
starts a second one), then every wait of the tenant for that name whose
match the data contains is ended (``leases.deliver_event``). A failing
trigger writes nothing at all: the sender is told, and its retry is the
event again.

The signature checks (``verify``, ``hmac_sha256``) import nothing of the
models at module level, so a project's settings module may import this
one to build ``RUNQUEUE["EVENT_VERIFIERS"]``.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from django.utils.module_loading import import_string

from runqueue.errors import InvalidArgument, RunqueueError
from runqueue.types import JSON

if TYPE_CHECKING:
    from runqueue.models import InboundEvent

logger = logging.getLogger("runqueue.events.inbound")

#: A signature check: the request's headers and its raw body; true to accept.
Verifier = Callable[[Mapping[str, str], bytes], bool]


class EventKeyReused(RunqueueError):
    """An event's key was sent again with other data: not the same event."""

    def __init__(self, name: str, key: str) -> None:
        self.name = name
        self.key = key
        super().__init__(f"event {name!r} with key {key!r} was received with other data")


class TriggerFailed(RunqueueError):
    """A trigger could not start its run (an unknown kind, a payload the
    submit refuses): nothing of the event was written."""

    def __init__(self, trigger: str, error: Exception) -> None:
        self.trigger = trigger
        self.error = error
        super().__init__(f"trigger {trigger} could not start its run: {error}")


@dataclass(frozen=True, slots=True)
class Received:
    """What ``send_event`` did: the event's row, whether it was known
    already (a replay: nothing written), the runs its triggers started and
    the waiting runs it woke (none on a replay)."""

    event: InboundEvent
    replayed: bool
    started: list[uuid.UUID] = field(default_factory=list)
    woken: list[uuid.UUID] = field(default_factory=list)


def event_input(event: InboundEvent) -> dict[str, JSON]:
    """The event as a woken run's ``ctx.input`` and a trigger's default
    payload: name, key, data, received_at (ISO 8601)."""
    return {
        "name": event.name,
        "key": event.key,
        "data": event.data,
        "received_at": event.received_at.isoformat(),
    }


def check(name: object, key: object, data: object) -> tuple[str, str, dict[str, JSON]]:
    """The event's name, key and data, or InvalidArgument naming what is
    wrong: a name and key as a signal's name and an Idempotency-Key are,
    data a JSON object of at most ``EVENT_MAX_BYTES``."""
    from runqueue.conf import get_settings
    from runqueue.leases import signal_name_problem
    from runqueue.leases.base import check_json_size
    from runqueue.submission.rules import KEY_RULE, is_idempotency_key

    if (problem := signal_name_problem(name)) is not None:
        raise InvalidArgument("send_event", "name", problem)
    if not isinstance(key, str) or not is_idempotency_key(key):
        raise InvalidArgument("send_event", "key", f"must be {KEY_RULE}, got {key!r}")
    if not isinstance(data, dict):
        raise InvalidArgument("send_event", "data", "must be a JSON object")
    check_json_size("send_event", "data", data, "event data", get_settings().EVENT_MAX_BYTES)
    assert isinstance(name, str)  # signal_name_problem said so
    return name, key, data


def send_event(
    name: str,
    data: dict[str, JSON] | None = None,
    *,
    key: str,
    tenant: str = "default",
    principal: str = "",
) -> Received:
    """Record inbound event ``name`` of ``tenant`` once per ``key``: start a
    run per matching trigger and end every matching wait, in one
    transaction. The same key again is a replay (nothing written); with
    other data it is ``EventKeyReused``. Raises InvalidArgument (nothing
    written) or TriggerFailed (nothing written)."""
    from django.db import connection, transaction
    from psycopg.types.json import Jsonb

    from runqueue import leases
    from runqueue.models import InboundEvent
    from runqueue.sql import execute

    name, key, data = check(name, key, {} if data is None else data)
    with transaction.atomic(durable=True):
        with connection.cursor() as cursor:
            execute(cursor, "event_name_shared", {"tenant": tenant, "name": name}).fetchone()
            params = {
                "tenant": tenant,
                "name": name,
                "key": key,
                "data": Jsonb(data),
                "principal": principal,
            }
            row = execute(cursor, "record_event", params).fetchone()
        if row is None:
            known = InboundEvent.objects.get(tenant=tenant, name=name, key=key)
            if known.data != data:
                raise EventKeyReused(name, key)
            started = [uuid.UUID(str(s["run"])) for s in known.started if isinstance(s, dict)]
            return Received(known, replayed=True, started=started)
        event_id, received_at = row
        event = InboundEvent(
            id=event_id,
            tenant=tenant,
            name=name,
            key=key,
            data=data,
            principal=principal,
            received_at=received_at,
        )
        started_by = _fire(event, principal)
        event.started = [{"trigger": t, "run": str(run)} for t, run in started_by]
        if started_by:
            with connection.cursor() as cursor:
                payload = {"event_id": event_id, "started": Jsonb(event.started)}
                execute(cursor, "set_event_started", payload)
        woken = leases.deliver_event(tenant, name, event_id, key, data)
    return Received(event, replayed=False, started=[r for _t, r in started_by], woken=woken)


def _fire(event: InboundEvent, principal: str) -> list[tuple[str, uuid.UUID]]:
    """Start a run for each trigger the event matches, code triggers first
    (in declaration order), then the admin's (by id), in the caller's
    transaction; (trigger, run id) each."""
    from django.db import connection
    from psycopg.types.json import Jsonb

    from runqueue import registry
    from runqueue.sql import execute
    from runqueue.submission.submit import submit_in_transaction

    as_input = event_input(event)
    todo: list[tuple[str, str, JSON, int]] = []
    code = registry.event_triggers(event.name)
    with connection.cursor() as cursor:
        if code:
            params = {"matches": Jsonb([dict(t.match) for t in code]), "data": Jsonb(event.data)}
            for (index,) in execute(cursor, "matching", params).fetchall():
                trigger = code[index]
                try:
                    kind = trigger.resolved_kind()
                    payload = trigger.payload(as_input) if trigger.payload else as_input
                except Exception as exc:  # noqa: BLE001 - the project's code: reported whole
                    raise TriggerFailed(f"code:{event.name}", exc) from exc
                todo.append((f"code:{kind}", kind, payload, trigger.priority))
        of_event = {"name": event.name, "tenant": event.tenant, "data": Jsonb(event.data)}
        for trigger_id, kind, priority in execute(cursor, "event_triggers", of_event).fetchall():
            todo.append((f"admin:{trigger_id}", kind, as_input, priority))
    started = []
    for label, kind, payload, priority in todo:
        try:
            sub = submit_in_transaction(
                kind=kind,
                payload=payload,
                tenant=event.tenant,
                principal=principal,
                priority=priority,
            )
        except (RunqueueError, ValueError) as exc:
            raise TriggerFailed(label, exc) from exc
        started.append((label, sub.run.id))
    return started


def prune(*, batch: int = 1000, heartbeat: Callable[[], bool] | None = None) -> int:
    """Delete the events received more than ``EVENT_RETENTION_SECONDS`` ago
    (and which runs took them), in batches; how many."""
    from django.db import connection, transaction

    from runqueue.conf import get_settings
    from runqueue.sql import execute

    deleted = 0
    params = {"retention": get_settings().EVENT_RETENTION_SECONDS, "limit": batch}
    while True:
        with transaction.atomic(), connection.cursor() as cursor:
            n = len(execute(cursor, "prune_events", params).fetchall())
        deleted += n
        if n < batch:
            return deleted
        if heartbeat is not None:
            heartbeat()


# Signature checks.


def verifier(name: str) -> Verifier | None:
    """The signature check of event ``name`` (``RUNQUEUE["EVENT_VERIFIERS"]``;
    a dotted path is imported), or None without one."""
    from runqueue.conf import get_settings

    found = get_settings().EVENT_VERIFIERS.get(name)
    if found is None:
        return None
    check_fn = import_string(found) if isinstance(found, str) else found
    if not callable(check_fn):
        raise TypeError(f"RUNQUEUE['EVENT_VERIFIERS'][{name!r}] is not callable")
    return check_fn


def verify(name: str, headers: Mapping[str, str], body: bytes) -> bool:
    """True when event ``name`` has no signature check or its check accepts
    ``body`` with ``headers``. A check that raises refuses (logged)."""
    check_fn = verifier(name)
    if check_fn is None:
        return True
    try:
        return check_fn(headers, body) is True
    except Exception:
        logger.exception("The signature check of event %r failed; the event is refused", name)
        return False


def hmac_sha256(
    secret_setting: str, *, header: str = "X-Signature-256", prefix: str = "sha256="
) -> Verifier:
    """A signature check: header ``header`` must be ``prefix`` followed by
    the hex HMAC-SHA256 of the raw body keyed by the Django setting named
    ``secret_setting`` (read at each check, so a rotated secret applies
    at once), compared in constant time. GitHub's ``X-Hub-Signature-256``
    is ``hmac_sha256("GITHUB_WEBHOOK_SECRET", header="X-Hub-Signature-256")``."""

    def check_signature(headers: Mapping[str, str], body: bytes) -> bool:
        from django.conf import settings

        secret = getattr(settings, secret_setting, None)
        if not isinstance(secret, str | bytes) or not secret:
            logger.error("Setting %s (an event's HMAC secret) is not set", secret_setting)
            return False
        key = secret.encode() if isinstance(secret, str) else secret
        expected = prefix + hmac.new(key, body, hashlib.sha256).hexdigest()
        given = headers.get(header)
        if given is None:
            return False
        return hmac.compare_digest(expected.encode(), given.strip().encode("utf-8", "replace"))

    check_signature.__qualname__ = f"hmac_sha256({secret_setting!r})"
    return check_signature


def sign(secret: str | bytes, body: bytes, *, prefix: str = "sha256=") -> str:
    """What ``hmac_sha256`` expects in its header for ``body``: for a
    sender's code and tests."""
    key = secret.encode() if isinstance(secret, str) else secret
    return prefix + hmac.new(key, body, hashlib.sha256).hexdigest()
