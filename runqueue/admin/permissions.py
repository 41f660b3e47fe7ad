"""Who may see runs and act on them in the admin: the one home of those rules.

The run ModelAdmins answer Django's ``has_*_permission`` from here, and the
admin's own pages (the dashboard, the resolve form) ask here directly, so a
page needs no ModelAdmin to know who may open it.
"""

from __future__ import annotations

from django.contrib import admin
from django.contrib.admin.options import Action, ActionLocation
from django.contrib.auth import get_permission_codename
from django.db.models import Model
from django.db.models.options import Options
from django.http import HttpRequest

from runqueue.models import Run

VIEW = "runqueue.view_run"
REQUEUE = "runqueue.requeue_run"
CANCEL = "runqueue.cancel_run"
RESOLVE = "runqueue.resolve_uncertain"
PAUSE = "runqueue.pause_kind"
FORK = "runqueue.fork_run"
DECIDE = "runqueue.decide_tool"


def may_view(request: HttpRequest, opts: Options | None = None) -> bool:
    """``view_run`` shows every run page: the dead-lettered and uncertain
    lists, paused kinds and schedules are views of runs, and staff are not
    asked for one view permission each. A model's own view or change
    permission shows that model's pages, as anywhere in Django."""
    user = request.user
    if user.has_perm(VIEW):
        return True
    opts = opts or Run._meta
    return any(
        user.has_perm(f"{opts.app_label}.{get_permission_codename(action, opts)}")
        for action in ("view", "change")
    )


def may_requeue(request: HttpRequest) -> bool:
    return request.user.has_perm(REQUEUE)


def may_cancel(request: HttpRequest) -> bool:
    return request.user.has_perm(CANCEL)


def may_resolve(request: HttpRequest) -> bool:
    """Answer whether an uncertain tool call happened."""
    return request.user.has_perm(RESOLVE)


def may_fork(request: HttpRequest) -> bool:
    """Fork a finished run from one of its steps (a new run: it runs again)."""
    return request.user.has_perm(FORK)


def may_decide(request: HttpRequest) -> bool:
    """Approve, edit, reject or answer a tool call awaiting approval."""
    return request.user.has_perm(DECIDE)


def may_pause(request: HttpRequest) -> bool:
    """Pause and resume kinds (from a run list or the paused kinds page), and
    runs one by one (runqueue.pause_run)."""
    return request.user.has_perm(PAUSE)


class RunPermissionsMixin:
    """The run ModelAdmins' permissions: one per action, and read-only runs."""

    opts: Options

    # Each action's permission (Django asks ``has_<action>_permission``):
    # the request's, as the views that run the action check it.
    has_requeue_permission = staticmethod(may_requeue)
    has_cancel_permission = staticmethod(may_cancel)
    has_resolve_permission = staticmethod(may_resolve)
    has_pause_permission = staticmethod(may_pause)
    has_fork_permission = staticmethod(may_fork)
    has_decide_permission = staticmethod(may_decide)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # runs are submitted, never typed in

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False  # state changes go through actions and the service layer

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False  # runs are cancelled, never deleted: their history stays

    def has_view_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return may_view(request, self.opts)


class NoBulkDelete(admin.ModelAdmin):
    """No "delete selected" action: rows whose deletion would lose history
    or come back by themselves (runs, workers, tokens, pauses) are acted on
    through the service's own actions instead."""

    def get_actions(
        self, request: HttpRequest, action_location: ActionLocation = ActionLocation.CHANGE_LIST
    ) -> dict[str, Action | None]:
        actions = super().get_actions(request, action_location=action_location)
        actions.pop("delete_selected", None)
        return actions
