from __future__ import annotations

from typing import cast

from django.apps import AppConfig


class StorageConfig(AppConfig):
    """The Django app that persists threads, checkpoints and runs (tables ``criogen_*``)."""

    name = "criogen.storage"
    label = "criogen"
    verbose_name = "Criogen"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.conf import settings

        # Only inside the Django project (it configures the runner and a channel
        # layer); a plain script's Storage("sqlite://…") sets up Django without them.
        if hasattr(settings, "CRIOGEN_RUNNER") and hasattr(settings, "CHANNEL_LAYERS"):
            from criogen import dispatch, events, registry, runner

            # A langgraph.json that cannot be read, or LangGraph graphs without LangGraph
            # installed, stop the start here with the reason (not at the first run).
            registry.check_configuration()
            # The services hand committed runs to this runner (they never import it).
            # The runner module is the Runner: its functions are the protocol's methods.
            dispatch.register(cast(dispatch.Runner, runner))
            events.install()
            if settings.CRIOGEN_RUNNER == "inprocess" and _is_server():
                # Recover runs a previous server process left behind, without waiting
                # for the first new run to start the in-process timer.
                from criogen.runner import start_background
                from criogen.services.crons import start_timer

                start_background()
                # Crons fire from the in-process timer of each server process (claims
                # make several processes safe), or from Celery beat when
                # CRIOGEN_RUNNER="celery".
                start_timer()


def _is_server() -> bool:
    """Whether this process serves requests (not a migrate/test/shell command)."""
    import sys

    argv = " ".join(sys.argv[:2])
    return any(name in argv for name in ("runserver", "daphne", "uvicorn", "gunicorn"))
