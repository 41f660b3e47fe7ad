"""The page that shows a secret once: an API token's when it is created, a
webhook endpoint's when it is created and at each rotation. It is the only
place the secret is ever written out, so no cache (the browser's, a
proxy's) may keep it; an add that made a secret answers with it
(``ShowsSecretOnAdd``)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse

#: The request's attribute that holds the secret an add made, from the
#: save to the answer.
_MADE = "_runqueue_made_secret"


def shown_once(
    model_admin: admin.ModelAdmin, request: HttpRequest, template: str, context: dict[str, object]
) -> TemplateResponse:
    """``template`` in ``model_admin``'s frame, with ``context``, never cached."""
    page = {**model_admin.admin_site.each_context(request), "opts": model_admin.opts, **context}
    response = TemplateResponse(request, template, page)
    response["Cache-Control"] = "no-store"
    return response


def made(request: HttpRequest, secret: str) -> None:
    """Keep the secret an add's save made for the answer that shows it."""
    setattr(request, _MADE, secret)


class ShowsSecretOnAdd(admin.ModelAdmin):
    """An add that made a secret (``made``, in ``save_model``) answers with
    the page that shows it (``secret_made``); one that made none answers as
    any add does."""

    def response_add(
        self, request: HttpRequest, obj: Any, post_url_continue: str | None = None
    ) -> HttpResponse:
        secret = getattr(request, _MADE, None)
        if secret is None:
            return super().response_add(request, obj, post_url_continue)
        return self.secret_made(request, obj, secret)

    def secret_made(self, request: HttpRequest, obj: Any, secret: str) -> HttpResponse:
        raise NotImplementedError
