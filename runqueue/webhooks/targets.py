"""Which endpoint signs a submit's own webhook URL: what the submit path
checks (``runqueue.submission.rules``), below everything that submits."""

from __future__ import annotations

from runqueue.models import WebhookEndpoint
from runqueue.webhooks.addresses import UrlRefused, check, parse


def endpoint_for(url: object, tenant: str) -> WebhookEndpoint:
    """The endpoint whose secret signs a submit's own ``webhook`` URL: an
    active one of the run's tenant (or of every tenant) whose URL the given
    one starts with, the longest such. Raises UrlRefused when there is none
    or the URL breaks the SSRF rule."""
    parse(url)
    assert isinstance(url, str)
    candidates = [
        e
        for e in WebhookEndpoint.objects.filter(active=True, tenant__in=[tenant, ""])
        if _under(url, e.url)
    ]
    if not candidates:
        raise UrlRefused(
            "must start with the URL of an active webhook endpoint of the tenant "
            "(its secret signs the deliveries)"
        )
    check(url)
    return max(candidates, key=lambda e: (len(e.url), e.tenant != ""))


def _under(url: str, prefix: str) -> bool:
    """``url`` is ``prefix`` or lies under it (a path, query or fragment
    boundary after it: ``/hooks`` does not cover ``/hooks-other``)."""
    if not url.startswith(prefix):
        return False
    return len(url) == len(prefix) or prefix[-1] in "/?" or url[len(prefix)] in "/?#"
