"""URLs of the deployable project: the admin at /admin/, the HTTP API at /api/."""

from django.contrib import admin
from django.urls import include, path
from django.views.generic import RedirectView

urlpatterns = [
    path("", RedirectView.as_view(url="/admin/", permanent=False)),
    path("admin/", admin.site.urls),
    path("api/", include("runqueue.api.urls")),
]
