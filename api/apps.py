"""The ``api`` Django app (API tokens, crons and the REST endpoints)."""

from __future__ import annotations

import sys

from django.apps import AppConfig


class ApiConfig(AppConfig):
    """The REST API; its tables are ``ApiToken`` and ``Cron``."""

    name = "api"
    label = "api"
    verbose_name = "REST API"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.conf import settings
        from django.contrib.auth.models import Permission
        from django.db.models.signals import post_delete, post_migrate

        import api.tasks  # noqa: F401 - registers the Celery task with the workers
        from api.auth import forget_operate_permission

        # The token lookup remembers criogen.operate's id; a flush or a deletion
        # makes it anew.
        post_migrate.connect(forget_operate_permission, dispatch_uid="criogen-operate-id")
        post_delete.connect(
            forget_operate_permission, sender=Permission, dispatch_uid="criogen-operate-id"
        )

        # Crons fire from the in-process timer of each server process (claims make
        # several processes safe), or from Celery beat when CRIOGEN_RUNNER="celery".
        if getattr(settings, "CRIOGEN_RUNNER", "inprocess") == "inprocess" and _is_server():
            from api.crons import start_timer

            start_timer()


def _is_server() -> bool:
    """Whether this process serves requests (not migrate, shell or the test runner)."""
    argv = " ".join(sys.argv[:2])
    return any(name in argv for name in ("runserver", "daphne", "uvicorn", "gunicorn"))
