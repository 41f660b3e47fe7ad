"""Who is calling: a bearer API token, or a Django session for browser clients.

A token carries its tenant; a session user acts in
``RUNQUEUE["API_SESSION_TENANT"]``. The tenant always comes from here, never
from the request body or path. Bearer requests need no CSRF token (a browser
cannot attach the header cross-site); session requests that change state
keep Django's CSRF check, so a page cannot submit runs with a staff cookie.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from django.contrib.auth.base_user import AbstractBaseUser
from django.http import HttpRequest, HttpResponse
from django.middleware.csrf import CsrfViewMiddleware

from runqueue import tokens
from runqueue.api.errors import ApiError
from runqueue.conf import get_settings
from runqueue.models import ApiToken
from runqueue.tokens import principal_of

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


@dataclass(frozen=True, slots=True, kw_only=True)
class Caller:
    """The authenticated caller: tenant scopes every read; principal scopes keys."""

    tenant: str
    principal: str
    user: AbstractBaseUser
    via: Literal["token", "session"]
    #: The bearer token (its priority ceiling and submit quota); None for a session.
    token: ApiToken | None = None


def authenticate(request: HttpRequest) -> Caller:
    """The caller, or ApiError 401. A malformed or unknown bearer token is
    refused even if a session cookie is present: the client meant the token."""
    header = request.headers.get("Authorization")
    if header is not None:
        scheme, _, raw = header.partition(" ")
        token = tokens.verify(raw.strip()) if scheme.lower() == "bearer" else None
        if token is None:
            raise _unauthenticated("The bearer token is malformed, unknown or revoked.", True)
        return Caller(
            tenant=token.tenant,
            principal=principal_of(token.user),
            user=token.user,
            via="token",
            token=token,
        )
    user = getattr(request, "user", None)
    if user is not None and user.is_authenticated:
        caller = Caller(
            tenant=get_settings().API_SESSION_TENANT,
            principal=principal_of(user),
            user=user,
            via="session",
        )
        if request.method not in SAFE_METHODS:
            _check_csrf(request)
        return caller
    raise _unauthenticated("Send 'Authorization: Bearer <token>'.", False)


def _unauthenticated(detail: str, invalid_token: bool) -> ApiError:
    challenge = 'Bearer realm="runqueue"'
    if invalid_token:
        challenge += ', error="invalid_token"'
    return ApiError("unauthenticated", detail, headers={"WWW-Authenticate": challenge})


class _CsrfCheck(CsrfViewMiddleware):
    def _reject(self, request: HttpRequest, reason: str) -> HttpResponse:
        return HttpResponse(reason)  # the reason is read back, not sent


def _no_view(request: HttpRequest) -> HttpResponse:
    """The view the CSRF check is shown: not ``csrf_exempt``, so the check runs."""
    return HttpResponse()


def _check_csrf(request: HttpRequest) -> None:
    """Django's own CSRF check (origin, referer, token) for a session request."""
    check = _CsrfCheck(_no_view)
    check.process_request(request)
    rejected = check.process_view(request, _no_view, (), {})
    if rejected is not None:
        raise ApiError(
            "csrf-failed",
            f"CSRF check failed: {rejected.content.decode()} Send the X-CSRFToken header, "
            "or use a bearer token.",
        )
