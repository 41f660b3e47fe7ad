"""runqueue's HTTP API: JSON submit and read endpoints with Idempotency-Key.

Mount it with ``path("api/", include("runqueue.api.urls"))``. Views only
parse, validate, call the service layer (``runqueue.submit``,
``runqueue.cancel``) or read models, and render.
"""
