"""URLs of the deployable project: the admin at /admin/, the HTTP API at /api/,
the queue's Prometheus metrics at /metrics."""

from django.contrib import admin
from django.urls import include, path
from django.views.generic import RedirectView

from runqueue import queue_metrics

urlpatterns = [
    path("", RedirectView.as_view(url="/admin/", permanent=False)),
    path("admin/", admin.site.urls),
    path("api/", include("runqueue.api.urls")),
    path("metrics", queue_metrics.view, name="metrics"),
]
