"""Admin pages for raw inspection of threads, checkpoints and stored values."""

from __future__ import annotations

from django.contrib import admin

from criogen.storage.models import Checkpoint, Thread, Value


class CheckpointInline(admin.TabularInline):
    model = Checkpoint
    fields = ("version", "source", "status", "run_id", "created_at")
    readonly_fields = fields
    ordering = ("-version",)
    extra = 0
    max_num = 0
    show_change_link = True


@admin.register(Thread)
class ThreadAdmin(admin.ModelAdmin):
    list_display = ("id", "head_status", "head_version", "owner", "updated_at", "lease_alive")
    list_filter = ("head_status",)
    search_fields = ("id",)
    date_hierarchy = "updated_at"
    readonly_fields = ("head_version", "head_id", "head_status", "lease_id", "lease_expires_at")
    exclude = ("lease_expires",)
    raw_id_fields = ("owner",)
    inlines = [CheckpointInline]

    @admin.display(boolean=True, description="run alive")
    def lease_alive(self, obj: Thread) -> bool:
        return obj.lease_alive


@admin.register(Checkpoint)
class CheckpointAdmin(admin.ModelAdmin):
    list_display = ("thread", "version", "source", "status", "run_id", "created_at")
    list_filter = ("source", "status")
    search_fields = ("thread__id", "id", "run_id")
    list_select_related = ("thread",)
    raw_id_fields = ("thread",)
    ordering = ("-created_at",)
    readonly_fields = (
        "id",
        "thread",
        "version",
        "run_id",
        "source",
        "status",
        "parent_id",
        "created_at",
        "body",
    )


@admin.register(Value)
class ValueAdmin(admin.ModelAdmin):
    list_display = ("thread", "state_key", "version", "kind", "prev")
    list_filter = ("kind",)
    search_fields = ("thread__id", "state_key")
    raw_id_fields = ("thread",)
    readonly_fields = ("thread", "state_key", "version", "kind", "prev", "data")
