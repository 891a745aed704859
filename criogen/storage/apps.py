from __future__ import annotations

from django.apps import AppConfig


class StorageConfig(AppConfig):
    """The Django app that persists threads, checkpoints and runs (tables ``criogen_*``)."""

    name = "criogen.storage"
    label = "criogen"
    verbose_name = "Criogen"
    default_auto_field = "django.db.models.BigAutoField"
