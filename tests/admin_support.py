"""Runs and staff users for the admin tests (test client and browser)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import Permission, User

import runqueue
from runqueue import leases, testing
from runqueue.models import Run, ToolInvocation

PASSWORD = "correct horse battery staple"  # noqa: S105 - test-only login

#: Every permission support staff can hold.
ALL_PERMS = (
    "view_run",
    "requeue_run",
    "cancel_run",
    "resolve_uncertain",
    "pause_kind",
    "operate_schedule",
    "add_schedule",
    "change_schedule",
)


def staff(username: str, *perms: str, is_staff: bool = True) -> User:
    """A staff user holding exactly these runqueue permissions."""
    user = User.objects.create_user(username, password=PASSWORD, is_staff=is_staff)
    user.user_permissions.set(
        Permission.objects.filter(content_type__app_label="runqueue", codename__in=perms)
    )
    return user


def dead_lettered(
    *, session_id: str | None = None, message: str = "card declined", **kwargs: Any
) -> Run:
    """A run that failed permanently: the dead letter."""
    sub = runqueue.submit(kind="test.echo", session_id=session_id, **kwargs)
    lease = leases.claim_one("w-test")
    assert lease is not None and lease.run_id == sub.run.id
    testing.fail(lease, leases.permanent_failure(ValueError(message), lease.attempt))
    return Run.objects.get(id=sub.run.id)


def uncertain(**kwargs: Any) -> tuple[Run, ToolInvocation]:
    """A run whose payment tool ended uncertain (it may have charged)."""
    sub = runqueue.submit(kind="test.pay", **kwargs)
    lease = leases.claim_one("w-test")
    assert lease is not None and lease.run_id == sub.run.id
    testing.execute(lease)
    run = Run.objects.get(id=sub.run.id)
    return run, run.tool_invocations.get()
