"""The ``api`` Django app: the REST endpoints (its former tables, ``ApiToken`` and
``Cron``, belong to the ``criogen`` app now; their migrations stay here)."""

from __future__ import annotations

from django.apps import AppConfig


class ApiConfig(AppConfig):
    """The REST API; it has no tables of its own."""

    name = "api"
    label = "api"
    verbose_name = "REST API"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.contrib.auth.models import Permission
        from django.db.models.signals import post_delete, post_migrate

        from criogen.services.tokens import forget_operate_permission

        # The token lookup remembers criogen.operate's id; a flush or a deletion
        # makes it anew.
        post_migrate.connect(forget_operate_permission, dispatch_uid="criogen-operate-id")
        post_delete.connect(
            forget_operate_permission, sender=Permission, dispatch_uid="criogen-operate-id"
        )
