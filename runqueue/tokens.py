"""API tokens: ``rq_<prefix>_<secret>``, stored as a SHA-256 hash.

The prefix finds the row (it is unique and not secret); the secret has 256
bits of entropy, so a plain SHA-256 is enough (no password hashing needed),
and the comparison is constant-time. The raw token exists only in the
return value of ``issue()``: it is shown once and never stored.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from datetime import timedelta
from typing import TYPE_CHECKING

from django.contrib.auth.base_user import AbstractBaseUser
from django.db.models.functions import Now
from django.utils import timezone

from runqueue.models import ApiToken

if TYPE_CHECKING:
    # AUTH_USER_MODEL as the type checker sees it (django-stubs resolves the setting).
    from django.contrib.auth.models import User

_TOKEN = re.compile(r"^rq_([0-9a-f]{12})_([A-Za-z0-9_-]{43})$")
#: last_used_at is refreshed at most this often, so reads stay reads.
_TOUCH_EVERY = timedelta(minutes=1)


def principal_of(user: AbstractBaseUser) -> str:
    """The principal string of a user: the same for its tokens and its
    session (the API's callers), and what a token's webhook matches."""
    return f"user:{user.pk}"


def hash_token(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


def issue(
    *, user: User, tenant: str, name: str = "", **limits: int | None
) -> tuple[ApiToken, str]:
    """Create a token for ``user`` in ``tenant``; return it and its raw value.

    ``limits``: ``max_priority_class``, ``submit_quota``, ``submit_window_seconds``
    (the model's defaults otherwise: async, 60 submits a minute).
    """
    token = ApiToken(name=name, user=user, tenant=tenant, **limits)
    token.full_clean(exclude=["prefix", "key_hash"])
    raw = assign_secret(token)
    token.save()
    return token, raw


def assign_secret(token: ApiToken) -> str:
    """Give an unsaved token a fresh prefix and secret; return the raw value."""
    prefix = secrets.token_hex(6)
    raw = f"rq_{prefix}_{secrets.token_urlsafe(32)}"
    token.prefix = prefix
    token.key_hash = hash_token(raw)
    return raw


def verify(raw: str) -> ApiToken | None:
    """The live token ``raw`` stands for, or None (malformed, unknown,
    revoked, wrong secret, or its user is inactive)."""
    match = _TOKEN.match(raw)
    if match is None:
        return None
    token = (
        ApiToken.objects.select_related("user")
        .filter(prefix=match.group(1), revoked_at__isnull=True)
        .first()
    )
    # Hash even when no row matched, so timing does not tell which prefixes exist.
    expected = token.key_hash if token is not None else "0" * 64
    if not hmac.compare_digest(hash_token(raw), expected) or token is None:
        return None
    if not token.user.is_active:
        return None
    now = timezone.now()
    if token.last_used_at is None or now - token.last_used_at > _TOUCH_EVERY:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=Now())
        token.last_used_at = now
    return token


def revoke(token: ApiToken) -> None:
    if token.revoked_at is None:
        ApiToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(revoked_at=Now())
        token.refresh_from_db(fields=["revoked_at"])
