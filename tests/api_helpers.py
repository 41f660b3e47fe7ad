"""Helpers for the HTTP API tests: callers with tokens, requests, problem checks."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any

from django.contrib.auth import get_user_model
from django.test import Client

from runqueue.api import tokens
from runqueue.api.errors import PROBLEM_BASE

RUNS = "/api/runs/"


@dataclass
class ApiCaller:
    """A user with a bearer token in one tenant."""

    user: Any
    tenant: str
    raw: str

    @property
    def principal(self) -> str:
        return f"user:{self.user.pk}"

    def headers(self, key: str | None = None, **extra: str) -> dict[str, str]:
        headers = {"Authorization": f"Bearer {self.raw}", **extra}
        if key is not None:
            headers["Idempotency-Key"] = key
        return headers


def make_caller(username: str, tenant: str, **limits: Any) -> ApiCaller:
    """A user and a token; unless ``limits`` say otherwise the token may
    submit interactive runs and has no quota (tests/database/api/test_api_admission.py
    tests the defaults)."""
    user = get_user_model().objects.create_user(username=username, password="pw-" + username)
    limits = {"max_priority_class": 0, "submit_quota": None} | limits
    _token, raw = tokens.issue(user=user, tenant=tenant, name=f"{username} token", **limits)
    return ApiCaller(user=user, tenant=tenant, raw=raw)


def submit(
    client: Client,
    caller: ApiCaller,
    body: Any,
    *,
    key: str | None = "key-1",
    raw_body: str | bytes | None = None,
    content_type: str = "application/json",
    **headers: str,
):
    data = raw_body if raw_body is not None else json.dumps(body)
    return client.post(
        RUNS, data=data, content_type=content_type, headers=caller.headers(key, **headers)
    )


def new_key() -> str:
    return str(uuid.uuid4())


def problem(response, status: int, slug: str) -> dict[str, Any]:
    """Assert a problem+json answer of this status and type; return its body."""
    assert response.status_code == status, (response.status_code, response.content)
    assert response["Content-Type"] == "application/problem+json"
    body = json.loads(response.content)
    assert body["type"] == PROBLEM_BASE + slug
    assert body["status"] == status
    assert body["instance"].startswith("urn:uuid:")
    text = response.content.decode()
    for leak in ("Traceback", "runqueue_", "INSERT", "SELECT", "constraint"):
        assert leak not in text, (leak, text)
    return body
