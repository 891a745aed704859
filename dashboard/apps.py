from __future__ import annotations

from django.apps import AppConfig


class DashboardConfig(AppConfig):
    name = "dashboard"
    verbose_name = "Operator dashboard"

    def ready(self) -> None:
        from dashboard.access import connect_receivers

        # Sign-out, deactivation and demotion close the user's live sockets.
        connect_receivers()
