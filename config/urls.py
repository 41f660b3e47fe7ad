"""URLs of the deployable project: the admin at /admin/, the HTTP API at /api/,
the queue's Prometheus metrics at /metrics, and /favicon.ico (browsers ask for it on
every page)."""

from pathlib import Path

from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.urls import include, path
from django.views.decorators.cache import cache_control
from django.views.decorators.http import require_safe
from django.views.generic import RedirectView

from runqueue.observability import queue_metrics

FAVICON = (Path(__file__).resolve().parent / "favicon.ico").read_bytes()


@require_safe
@cache_control(max_age=86400, public=True)
def favicon(request: HttpRequest) -> HttpResponse:
    """The queue's icon: without it every admin page logs a 404."""
    return HttpResponse(FAVICON, content_type="image/x-icon")


urlpatterns = [
    path("", RedirectView.as_view(url="/admin/", permanent=False)),
    path("favicon.ico", favicon),
    path("admin/", admin.site.urls),
    path("api/", include("runqueue.api.urls")),
    path("metrics", queue_metrics.view, name="metrics"),
]
