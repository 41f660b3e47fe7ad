"""Every runqueue admin URL against hostile query strings and path values:
no 500 for a NUL, a 10 KB value, a non-number where a number is expected, or
an id of nothing, on every changelist filter and every custom URL."""

from __future__ import annotations

import re
from collections.abc import Iterator
from urllib.parse import quote

import pytest
from django.contrib import admin
from django.contrib.admin import ModelAdmin
from django.contrib.auth.models import User
from django.test import Client, RequestFactory
from django.urls import URLPattern

import runqueue
from runqueue import schedules
from runqueue.api import tokens
from runqueue.capacity import pausing
from runqueue.models import ConcurrencyLimit, PriorityClass
from tests.admin_support import PASSWORD, dead_lettered, uncertain

pytestmark = pytest.mark.django_db

HOSTILE = ["\x00", "a\x00b", "x" * 10_000, "abc", "-1", "1.5", "99999999999999999999999"]
#: Query parameters every changelist reads besides its filters.
LIST_PARAMETERS = ["q", "o", "p", "e", "all", "_changelist_filters", "_to_field", "_popup"]
#: The views Django's ModelAdmin serves; the rest are runqueue's own.
STANDARD = re.compile(r"_(changelist|add|change|delete|history)$")


@pytest.fixture
def superuser_client() -> Client:
    client = Client(raise_request_exception=False)  # a 500 is counted, not raised
    User.objects.create_superuser("root", password=PASSWORD)
    assert client.login(username="root", password=PASSWORD)
    return client


@pytest.fixture
def rows() -> dict[str, str]:
    """One row in every list, and the ids path values need."""
    dead_lettered(tenant="acme")
    _run, tool = uncertain()
    runqueue.submit(kind="test.echo")
    schedule = schedules.define(
        "hourly", cron="0 * * * *", timezone="UTC", kind="test.echo", payload={}
    )
    pausing.pause_kind("test.echo", actor="staff:t", reason="walk")
    ConcurrencyLimit.objects.create(key="acme", priority_class=PriorityClass.ASYNC, max_running=1)
    tokens.issue(user=User.objects.create_user("owner"), tenant="acme")
    return {"tool_id": str(tool.pk), "schedule": str(schedule.pk)}


def runqueue_admins() -> Iterator[tuple[type, ModelAdmin]]:
    for model, model_admin in admin.site._registry.items():
        if model._meta.app_label == "runqueue":
            yield model, model_admin


def filter_parameters(model_admin: ModelAdmin, user: User) -> list[str]:
    request = RequestFactory().get("/")
    request.user = user
    changelist = model_admin.get_changelist_instance(request)
    names = [name for spec in changelist.filter_specs for name in spec.expected_parameters()]
    assert names or not model_admin.list_filter
    return names


def custom_urls(model_admin: ModelAdmin) -> list[URLPattern]:
    return [
        p
        for p in model_admin.urls
        if isinstance(p, URLPattern) and p.name and not STANDARD.search(p.name)
    ]


def fill(route: str, value: str, valid: dict[str, str]) -> str:
    """The route with each converter given ``value`` (or a valid value when None)."""

    def one(match: re.Match[str]) -> str:
        name = match.group(2)
        chosen = value if value is not None else valid.get(name, "cancel")
        return quote(chosen, safe="")

    return re.sub(r"<(?:(\w+):)?(\w+)>", one, route)


def get(client: Client, url: str) -> int:
    response = client.get(url, follow=True)
    return response.status_code


def test_every_changelist_filter_survives_hostile_values(superuser_client, rows) -> None:
    user = User.objects.get(username="root")
    failures = []
    walked = 0
    for model, model_admin in runqueue_admins():
        base = f"/admin/runqueue/{model._meta.model_name}/"
        for name in [*filter_parameters(model_admin, user), *LIST_PARAMETERS]:
            for value in HOSTILE:
                url = f"{base}?{quote(name)}={quote(value, safe='')}"
                walked += 1
                if (status := get(superuser_client, url)) >= 500:
                    failures.append((url[:120], status))
    assert walked > 300
    assert failures == []


def test_every_custom_admin_url_survives_hostile_values(superuser_client, rows) -> None:
    user = User.objects.get(username="root")
    valid = {"tool_id": rows["tool_id"], "object_id": rows["schedule"], "verb": "cancel"}
    failures = []
    walked = []
    for model, model_admin in runqueue_admins():
        base = f"/admin/runqueue/{model._meta.model_name}/"
        parameters = [*filter_parameters(model_admin, user), "q"]
        for pattern in custom_urls(model_admin):
            route = str(pattern.pattern)
            walked.append(f"{base}{route}")
            # Path values: each hostile value in every converter.
            urls = [f"{base}{fill(route, value, valid)}" for value in HOSTILE if "<" in route]
            # Query strings on the page with valid path values.
            page = f"{base}{fill(route, None, valid)}"
            urls += [
                f"{page}?{quote(name)}={quote(value, safe='')}"
                for name in parameters
                for value in HOSTILE
            ]
            for url in urls:
                if (status := get(superuser_client, url)) >= 500:
                    failures.append((url[:120], status))
    assert {"/admin/runqueue/run/dashboard/", "/admin/runqueue/run/bulk/<str:verb>/"} <= set(
        walked
    ), walked
    assert any("run-now" in url for url in walked), walked
    assert failures == []


@pytest.mark.parametrize(
    "url",
    [
        "/admin/runqueue/run/?kind=%00",
        "/admin/runqueue/run/?tenant=%00",
        "/admin/runqueue/run/?status__exact=%00",
        "/admin/runqueue/deadletteredrun/?failure=%00",
        "/admin/runqueue/run/bulk/cancel/?kind=%00",
    ],
)
def test_a_nul_in_a_filter_is_dropped_with_a_message(superuser_client, rows, url) -> None:
    response = superuser_client.get(url)
    assert response.status_code == 302
    assert "%00" not in response["Location"]
    page = superuser_client.get(response["Location"])
    assert page.status_code == 200
    assert "null characters are not allowed" in page.content.decode()


def test_run_now_of_a_schedule_id_that_is_not_a_number_is_404(superuser_client) -> None:
    assert superuser_client.get("/admin/runqueue/schedule/abc/run-now/").status_code == 404


# --- hostile POSTs to every add and change form (issue 37 item 3) -----------

#: What staff (or a crafted request) may type into a form field: NUL, raw
#: bytes of a lone surrogate, escapes of both inside JSON, numbers too large
#: for any column or for a float, non-numbers where numbers go, overlong text.
HOSTILE_POST = [
    "\x00",
    "a\x00b",
    "x" * 10_000,
    "abc",
    "-1",
    "1.5",
    "99999999999999999999999",
    "1e400",
    "-1e400",
    "NaN",
    '{"acme": 1e400}',
    '{"acme": -1e400}',
    '{"acme": 99999999999999999999999}',
    '{"\\u0000": 1}',
    '{"a\\u0000b": 1}',
    '{"\\ud800": 1}',
    '{"acme": "\\udfff"}',
    '["\\u0000"]',
    "[1e400]",
    '"\\ud800"',
    "{" * 5000,
    "[" * 100_000,
    "9" * 5000,  # past Python's 4,300 digits: json.loads raises ValueError
    '{"acme": ' + "9" * 5000 + "}",
]
#: A lone surrogate as the bytes a client may send (not valid UTF-8).
RAW_SURROGATE = b"\xed\xa0\x80"


def _valid_forms(owner_pk: int) -> dict[str, dict[str, str]]:
    """Valid data for every runqueue admin form: one entry per model whose
    admin adds or changes rows (the walk checks none is missing)."""
    return {
        "budget": {
            "key": "walk:gpt",
            "requests": "10",
            "tokens": "1000",
            "per_seconds": "60",
            "shares": '{"acme": 2}',
            "note": "walk",
        },
        "concurrencylimit": {
            "key": "walk",
            "priority_class": str(PriorityClass.ASYNC.value),
            "max_running": "2",
            "note": "walk",
        },
        "pausedkind": {"kind": "test.record", "priority_class": "", "reason": "walk"},
        "schedule": {
            "name": "walk",
            "cron": "0 * * * *",
            "timezone": "UTC",
            "kind": "test.echo",
            "payload": "{}",
            "priority": "20",
            "tenant": "acme",
            "max_attempts": "3",
            "catch_up": "latest",
            "catch_up_limit": "10",
            "overlap": "skip",
        },
        "apitoken": {
            "name": "walk",
            "user": str(owner_pk),
            "tenant": "acme",
            "max_priority_class": "10",
            "submit_quota": "60",
            "submit_window_seconds": "60",
            "issue_nonce": "",
        },
        "webhookendpoint": {
            "name": "walk",
            "url": "https://93.184.216.34/hooks",  # a public address: no DNS asked
            "tenant": "acme",
            "subscribed": "on",
            "kinds": "[]",
            "event_types": "[]",
            "token": "",
            "max_attempts": "12",
            "active": "on",
        },
        "eventtrigger": {
            "name": "walk",
            "match": '{"plan": "pro"}',
            "kind": "test.echo",
            "priority": "10",
            "tenant": "acme",
            "enabled": "on",
            "note": "walk",
        },
    }


def _encode(data: dict[str, str | bytes]) -> bytes:
    from urllib.parse import quote_from_bytes

    def one(value: str | bytes) -> str:
        raw = value if isinstance(value, bytes) else value.encode("utf-8", "surrogatepass")
        return quote_from_bytes(raw, safe="")

    return "&".join(f"{quote(k, safe='')}={one(v)}" for k, v in data.items()).encode()


def _snapshot(model: type) -> list[tuple]:
    return sorted(map(repr, model.objects.values_list()))


class _Rollback(Exception):
    pass


def _post(client: Client, url: str, data: dict[str, str | bytes]) -> tuple[int, str]:
    response = client.generic(
        "POST", url, _encode(data), content_type="application/x-www-form-urlencoded"
    )
    return response.status_code, response.content.decode(errors="replace")


def test_every_admin_form_refuses_hostile_values_without_a_500(superuser_client, rows) -> None:
    """Issue 37: the budget form's shares {"acme": 1e400}, a NUL or a lone
    surrogate in a share name, and a token form posted with user=abc each
    answered 500. Every field of every add and change form, each hostile
    value in turn: a form error (or a clean save), never a 500 and never a
    row half written."""
    from django.db import transaction

    from runqueue.models import Budget, Schedule

    user = User.objects.get(username="root")
    owner = User.objects.get(username="owner")
    Budget.objects.create(key="walk:existing", requests=5, per_seconds=60)
    existing = {
        "budget": Budget.objects.get(key="walk:existing").pk,
        "concurrencylimit": ConcurrencyLimit.objects.get(key="acme").pk,
        "schedule": Schedule.objects.get(name="hourly").pk,
        "apitoken": __import__("runqueue.models", fromlist=["ApiToken"]).ApiToken.objects.get().pk,
    }
    valid = _valid_forms(owner.pk)
    request = RequestFactory().get("/")
    request.user = user
    walked: set[tuple[str, str]] = set()
    failures = []
    for model, model_admin in runqueue_admins():
        name = model._meta.model_name
        targets = []
        if model_admin.has_add_permission(request):
            targets.append(("add", f"/admin/runqueue/{name}/add/"))
        pk = existing.get(name)
        if pk is not None and model_admin.has_change_permission(request, model.objects.get(pk=pk)):
            targets.append(("change", f"/admin/runqueue/{name}/{pk}/change/"))
        for verb, url in targets:
            assert name in valid, f"{name}'s {verb} form has no valid data in _valid_forms"
            walked.add((name, verb))
            obj = model.objects.get(pk=pk) if verb == "change" else None
            form = model_admin.get_form(request, obj)
            for field in form.base_fields:
                for value in [*HOSTILE_POST, RAW_SURROGATE]:
                    data = {**valid[name], field: value}
                    before = _snapshot(model)
                    try:
                        with transaction.atomic():
                            status, body = _post(superuser_client, url, data)
                            after = _snapshot(model)
                            raise _Rollback
                    except _Rollback:
                        pass
                    label = (name, verb, field, value if isinstance(value, bytes) else value[:30])
                    if status >= 500:
                        failures.append((*label, status))
                    elif status == 200 and "errornote" in body and after != before:
                        failures.append((*label, "half written"))
    assert {("budget", "add"), ("budget", "change"), ("apitoken", "add")} <= walked, walked
    assert {("schedule", "add"), ("concurrencylimit", "add"), ("pausedkind", "add")} <= walked
    assert failures == [], "\n".join(map(repr, failures))


@pytest.mark.parametrize("share", ["1e-320", "0", "1e400", "2e6"])
def test_a_budget_share_that_would_overflow_a_claim_is_a_form_error(superuser_client, share):
    """A share divides each reservation (runqueue_budget_take): 1e-320 made
    every claim of the key fail with a float8 overflow."""
    from runqueue.models import Budget

    data = {"key": "k", "requests": "1", "tokens": "", "per_seconds": "60", "note": ""}
    status, body = _post(
        superuser_client, "/admin/runqueue/budget/add/", data | {"shares": f'{{"acme": {share}}}'}
    )
    assert status == 200 and "errornote" in body
    assert not Budget.objects.exists()
