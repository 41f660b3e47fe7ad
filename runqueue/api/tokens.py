"""API tokens, where the HTTP API's users find them: ``issue`` one for a
user and tenant, ``revoke`` it. They live in ``runqueue.tokens``, below
both the API and the admin, which issues them too."""

from runqueue.tokens import assign_secret, hash_token, issue, revoke, verify

__all__ = ["assign_secret", "hash_token", "issue", "revoke", "verify"]
