from __future__ import annotations

from django.contrib import admin
from django.urls import include, path
from django.views.generic import RedirectView

from api.api import api

urlpatterns = [
    path("admin/", admin.site.urls),
    path("accounts/", include("django.contrib.auth.urls")),
    # The operator dashboard lives under /ui/; its inbox is the landing page.
    path("", RedirectView.as_view(url="/ui/inbox/", permanent=False), name="root"),
    # The REST API owns /threads, /runs, /assistants, /store, /ok, /info, /docs.
    path("", api.urls),
    path("", include("dashboard.urls")),
]
