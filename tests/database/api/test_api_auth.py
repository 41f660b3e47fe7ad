"""API tokens (hashed, constant-time, revocable), session auth with CSRF,
and the admin's add flow that shows a token once."""

from __future__ import annotations

import hashlib
import re

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from runqueue.api import tokens
from runqueue.models import ApiToken, Run
from tests.api_helpers import RUNS, make_caller, problem, submit

pytestmark = pytest.mark.django_db

BODY = '{"kind": "test.echo"}'


def test_a_token_is_stored_as_its_hash_only() -> None:
    user = get_user_model().objects.create_user("alice")
    token, raw = tokens.issue(user=user, tenant="acme", name="ci")
    assert re.fullmatch(r"rq_[0-9a-f]{12}_[A-Za-z0-9_-]{43}", raw)
    assert raw.split("_")[1] == token.prefix
    row = ApiToken.objects.get(pk=token.pk)
    assert row.key_hash == hashlib.sha256(raw.encode()).hexdigest()
    assert raw not in str(ApiToken.objects.filter(pk=token.pk).values().get())
    assert tokens.verify(raw) == token
    assert ApiToken.objects.get(pk=token.pk).last_used_at is not None


def test_wrong_secret_revoked_token_and_inactive_user_are_refused() -> None:
    user = get_user_model().objects.create_user("alice")
    token, raw = tokens.issue(user=user, tenant="acme")
    forged = raw[:-1] + ("A" if raw[-1] != "A" else "B")
    assert tokens.verify(forged) is None
    user.is_active = False
    user.save()
    assert tokens.verify(raw) is None
    user.is_active = True
    user.save()
    tokens.revoke(token)
    assert tokens.verify(raw) is None


def test_revoked_token_answers_401(client) -> None:
    alice = make_caller("alice", "acme")
    tokens.revoke(ApiToken.objects.get())
    problem(submit(client, alice, {"kind": "test.echo"}), 401, "unauthenticated")


def _session_client(username: str = "staff") -> tuple[Client, object]:
    user = get_user_model().objects.create_user(username, password="pw")
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    return client, user


def test_session_post_without_csrf_token_is_refused(settings) -> None:
    client, _user = _session_client()
    response = client.post(
        RUNS, data=BODY, content_type="application/json", headers={"Idempotency-Key": "k"}
    )
    body = problem(response, 403, "csrf-failed")
    assert body["detail"].startswith("CSRF check failed: CSRF cookie not set.")
    assert Run.objects.count() == 0


def test_session_post_with_csrf_token_acts_in_the_session_tenant(settings) -> None:
    settings.RUNQUEUE = {**settings.RUNQUEUE, "API_SESSION_TENANT": "staff-tenant"}
    client, user = _session_client()
    client.cookies["csrftoken"] = "a" * 32
    response = client.post(
        RUNS,
        data=BODY,
        content_type="application/json",
        headers={"Idempotency-Key": "k", "X-CSRFToken": "a" * 32},
    )
    assert response.status_code == 201, response.content
    run = Run.objects.get()
    assert (run.tenant, run.principal) == ("staff-tenant", f"user:{user.pk}")
    # Reads are safe methods: no CSRF token needed.
    assert client.get(f"/api/runs/{run.id}/").status_code == 200


def test_bearer_requests_need_no_csrf_token() -> None:
    alice = make_caller("alice", "acme")
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice.user)  # a cookie too: the token still decides
    response = submit(client, alice, {"kind": "test.echo"})
    assert response.status_code == 201
    assert Run.objects.get().tenant == "acme"


def test_admin_add_shows_the_raw_token_once(admin_client, admin_user) -> None:
    response = admin_client.post(
        "/admin/runqueue/apitoken/add/",
        {
            "name": "ci",
            "user": admin_user.pk,
            "tenant": "acme",
            "max_priority_class": 10,
            "submit_quota": 60,
            "submit_window_seconds": 60,
        },
    )
    assert response.status_code == 200
    assert "no-store" in response["Cache-Control"]
    raw = re.search(r'<code id="raw-token"[^>]*>(rq_[^<]+)</code>', response.content.decode())
    assert raw is not None
    token = ApiToken.objects.get()
    assert (token.name, token.tenant, token.user) == ("ci", "acme", admin_user)
    assert tokens.verify(raw.group(1)) == token
    change = admin_client.get(f"/admin/runqueue/apitoken/{token.pk}/change/")
    listing = admin_client.get("/admin/runqueue/apitoken/")
    for page in (change, listing):
        assert page.status_code == 200
        assert raw.group(1) not in page.content.decode()
        assert token.prefix in page.content.decode()


def test_admin_revoke_action(admin_client, admin_user) -> None:
    token, raw = tokens.issue(user=admin_user, tenant="acme")
    response = admin_client.post(
        "/admin/runqueue/apitoken/",
        {"action": "revoke_tokens", "_selected_action": [token.pk]},
        follow=True,
    )
    assert "Revoked 1 token(s)." in response.content.decode()
    assert tokens.verify(raw) is None


def test_reloading_the_token_created_page_mints_no_second_token(admin_client, admin_user) -> None:
    """Issue 26: a reload re-posted the add form and issued a second live token."""
    form = admin_client.get("/admin/runqueue/apitoken/add/").content.decode()
    nonce = re.search(r'name="issue_nonce" value="([0-9a-f]{32})"', form)
    assert nonce is not None
    data = {
        "name": "ci",
        "user": admin_user.pk,
        "tenant": "acme",
        "max_priority_class": 10,
        "submit_quota": 60,
        "submit_window_seconds": 60,
        "issue_nonce": nonce.group(1),
    }
    first = admin_client.post("/admin/runqueue/apitoken/add/", data)
    assert first.status_code == 200 and 'id="raw-token"' in first.content.decode()
    token = ApiToken.objects.get()
    reload = admin_client.post("/admin/runqueue/apitoken/add/", data, follow=True)
    assert ApiToken.objects.count() == 1
    page = reload.content.decode()
    assert reload.redirect_chain[-1][0] == f"/admin/runqueue/apitoken/{token.pk}/change/"
    assert "a reload creates no other" in page
    assert 'id="raw-token"' not in page
    # A fresh form (its own nonce) still adds a token.
    fresh = admin_client.get("/admin/runqueue/apitoken/add/").content.decode()
    other = re.search(r'name="issue_nonce" value="([0-9a-f]{32})"', fresh)
    assert other is not None and other.group(1) != nonce.group(1)
    admin_client.post("/admin/runqueue/apitoken/add/", {**data, "issue_nonce": other.group(1)})
    assert ApiToken.objects.count() == 2


def test_the_token_form_picks_the_user_by_search(admin_client) -> None:
    """Issue 26: the user was a raw id box."""
    form = admin_client.get("/admin/runqueue/apitoken/add/").content.decode()
    assert "admin-autocomplete" in form and "vForeignKeyRawIdAdminField" not in form
