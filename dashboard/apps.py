from __future__ import annotations

from typing import Any

from django.apps import AppConfig


class DashboardConfig(AppConfig):
    name = "dashboard"
    verbose_name = "Operator dashboard"

    def ready(self) -> None:
        from django.contrib.auth.signals import user_logged_out

        user_logged_out.connect(say_signed_out, dispatch_uid="dashboard.say_signed_out")

        from dashboard.access import connect_receivers

        # Sign-out, deactivation and demotion close the user's live sockets.
        connect_receivers()


def say_signed_out(sender: Any, request: Any, user: Any, **kwargs: Any) -> None:
    """Tell the sign-in page (where ``LOGOUT_REDIRECT_URL`` lands) that it worked."""
    from django.contrib import messages

    # The message middleware keeps its storage on the request; a logout outside a
    # request (a test client's ``logout()``) has none.
    if request is not None and hasattr(request, "_messages"):
        messages.info(request, "You are signed out.")
