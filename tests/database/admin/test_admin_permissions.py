"""Who may see runs and act on them: the rules in runqueue.admin.permissions,
which the run ModelAdmins and the dashboard and resolve pages all ask."""

from __future__ import annotations

import pytest
from django.contrib import admin
from django.test import Client, RequestFactory
from django.urls import reverse

from runqueue.admin import permissions
from runqueue.models import DeadLetteredRun, PausedKind, Run, Schedule, UncertainRun
from tests.admin_support import PASSWORD, staff

pytestmark = pytest.mark.django_db

DASHBOARD = reverse("admin:runqueue_run_dashboard")


def request_of(username: str, *perms: str):
    request = RequestFactory().get("/")
    request.user = staff(username, *perms)
    return request


def test_view_run_shows_every_run_page() -> None:
    request = request_of("ann", "view_run")
    for model in (Run, DeadLetteredRun, UncertainRun, PausedKind, Schedule):
        assert admin.site.get_model_admin(model).has_view_permission(request), model
    assert permissions.may_view(request)


def test_a_models_own_view_or_change_permission_shows_its_pages_only() -> None:
    dead = request_of("bob", "view_deadletteredrun")
    assert permissions.may_view(dead, DeadLetteredRun._meta)
    assert not permissions.may_view(dead)  # not the dashboard, not every run
    assert permissions.may_view(request_of("cy", "change_run"))  # change implies view


def test_each_action_needs_its_own_permission() -> None:
    run_admin = admin.site.get_model_admin(Run)
    for perm, verb in (
        ("requeue_run", "requeue"),
        ("cancel_run", "cancel"),
        ("resolve_uncertain", "resolve"),
        ("pause_kind", "pause"),
    ):
        holder = request_of(f"has-{verb}", "view_run", perm)
        viewer = request_of(f"not-{verb}", "view_run")
        assert getattr(run_admin, f"has_{verb}_permission")(holder), verb
        assert not getattr(run_admin, f"has_{verb}_permission")(viewer), verb
        assert getattr(permissions, f"may_{verb}")(holder), verb


@pytest.mark.parametrize(("perms", "status"), [(("view_run",), 200), (("view_schedule",), 403)])
def test_the_dashboard_asks_the_permissions_module(perms: tuple[str, ...], status: int) -> None:
    staff("dee", *perms)
    client = Client()
    assert client.login(username="dee", password=PASSWORD)
    assert client.get(DASHBOARD).status_code == status


@pytest.mark.parametrize("url", ["/admin/runqueue/run/", DASHBOARD, "/admin/runqueue/budget/add/"])
def test_a_refused_admin_page_logs_one_line(caplog, url) -> None:
    """Issue 37: an admin 403 wrote a 35-line traceback to the log; a
    permission refusal is one line, no traceback."""
    import logging

    staff("nobody")
    client = Client()
    assert client.login(username="nobody", password=PASSWORD)
    with caplog.at_level(logging.INFO):
        response = client.get(url)
    assert response.status_code == 403
    lines = [r for r in caplog.records if r.name.startswith(("django", "runqueue"))]
    assert len(lines) == 1, [r.getMessage() for r in lines]
    [line] = lines
    assert line.exc_info is None
    assert "\n" not in caplog.text.strip()
    assert url in line.getMessage()
