"""factory-boy factories for rows the tests set up directly."""

from __future__ import annotations

import datetime as dt

import factory
from django.utils import timezone

from runqueue.models import IdempotencyKey, Run, RunStatus, SubmitOutcome


class RunFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Run

    kind = "test.echo"
    payload = factory.Dict({"n": factory.Sequence(int)})
    tenant = "default"
    concurrency_key = factory.SelfAttribute("tenant")

    class Params:
        finished = factory.Trait(
            status=RunStatus.SUCCEEDED, finished_at=factory.LazyFunction(timezone.now)
        )


class IdempotencyKeyFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = IdempotencyKey

    tenant = "default"
    principal = "alice"
    key = factory.Sequence(lambda n: f"key-{n}")
    request_hash = "0" * 64
    run = factory.SubFactory(RunFactory)
    outcome = SubmitOutcome.CREATED
    expires_at = factory.LazyFunction(lambda: timezone.now() + dt.timedelta(days=1))
