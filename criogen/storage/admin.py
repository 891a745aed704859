"""Admin pages for raw inspection of threads, checkpoints and stored values, and for
API tokens (adding one shows the token once, in a message)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.http import HttpRequest

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


# -- assistants and runs (the runner's tables) ------------------------------------------

from criogen.storage.models import Assistant, DeadlineFiring, Run  # noqa: E402


@admin.register(Assistant)
class AssistantAdmin(admin.ModelAdmin):
    list_display = ("assistant_id", "graph_id", "name", "version", "updated_at")
    list_filter = ("graph_id",)
    search_fields = ("assistant_id", "graph_id", "name")
    readonly_fields = ("assistant_id", "created_at")


@admin.register(Run)
class RunAdmin(admin.ModelAdmin):
    list_display = (
        "run_id",
        "thread",
        "graph_id",
        "status",
        "durability",
        "multitask_strategy",
        "attempts",
        "hand_backs",
        "cancelled_by",
        "created_at",
    )
    list_filter = ("status", "graph_id", "durability", "multitask_strategy")
    search_fields = ("run_id", "thread__id", "graph_id", "cancelled_by", "worker")
    list_select_related = ("thread",)
    raw_id_fields = ("thread", "assistant", "owner")
    date_hierarchy = "created_at"
    ordering = ("-created_at",)
    # Runs change through services and the runner; the admin only shows them.
    readonly_fields = (
        "run_id",
        "status",
        "attempts",
        "hand_backs",
        "worker",
        "lease_expires",
        "started_at",
        "ended_at",
        "error",
        "created_at",
        "updated_at",
    )


@admin.register(DeadlineFiring)
class DeadlineFiringAdmin(admin.ModelAdmin):
    list_display = ("thread", "kind", "interrupt_id", "outcome", "run", "fired_at")
    list_filter = ("kind",)
    search_fields = ("thread__id", "checkpoint_id", "interrupt_id")
    raw_id_fields = ("thread", "run")
    readonly_fields = (
        "thread",
        "checkpoint_id",
        "interrupt_id",
        "kind",
        "outcome",
        "run",
        "fired_at",
    )


# -- outbound calls ------------------------------------------------------------------------

from criogen.storage.models import OutboundAttempt  # noqa: E402


@admin.register(OutboundAttempt)
class OutboundAttemptAdmin(admin.ModelAdmin):
    list_display = (
        "created_at",
        "kind",
        "target",
        "attempt",
        "outcome",
        "status_code",
        "duration_ms",
        "run_id",
        "thread_id",
    )
    list_filter = ("kind", "outcome")
    search_fields = ("target", "run_id", "thread_id", "cron_id", "error")
    date_hierarchy = "created_at"
    ordering = ("-created_at",)
    # Written by the sender only: the admin shows them.
    readonly_fields = (
        "kind",
        "target",
        "attempt",
        "outcome",
        "status_code",
        "error",
        "duration_ms",
        "retry_at",
        "run_id",
        "thread_id",
        "cron_id",
        "created_at",
    )

    def has_add_permission(self, request: Any) -> bool:
        return False


# -- agents: decisions, effect ledger, memory, documents, audit ----------------------------

from criogen.storage.models import AuditEvent, Decision, Document, Effect, MemoryFact  # noqa: E402


@admin.register(Decision)
class DecisionAdmin(admin.ModelAdmin):
    list_display = ("thread", "version", "call_id", "tool", "decision", "actor", "decided_at")
    list_filter = ("decision", "tool")
    search_fields = ("thread__id", "call_id", "actor")
    raw_id_fields = ("thread",)
    date_hierarchy = "decided_at"
    # A decision is a record of what a person did: shown, never edited here.
    readonly_fields = (
        "thread",
        "version",
        "checkpoint_id",
        "call_id",
        "tool",
        "digest",
        "decision",
        "args",
        "message",
        "actor",
        "decided_at",
    )


@admin.register(Effect)
class EffectAdmin(admin.ModelAdmin):
    list_display = ("key", "thread", "tool", "call_id", "status", "attempts", "created_at")
    list_filter = ("status", "tool")
    search_fields = ("key", "thread__id", "call_id")
    raw_id_fields = ("thread",)
    readonly_fields = (
        "key",
        "thread",
        "checkpoint_id",
        "call_id",
        "tool",
        "args",
        "status",
        "result",
        "attempts",
        "created_at",
        "finished_at",
    )


@admin.register(MemoryFact)
class MemoryFactAdmin(admin.ModelAdmin):
    list_display = ("namespace", "id", "updated_at")
    list_filter = ("namespace",)
    search_fields = ("id",)
    # The subject is sealed with an encryption key: it is written by the storage
    # (with its digest), never edited here.
    readonly_fields = ("subject", "subject_digest")

    def get_search_results(self, request: Any, queryset: Any, search_term: str) -> Any:
        """Search by fact id, or by subject (a person's id) through its digest."""
        from django.conf import settings

        from criogen.engine.crypto import Cipher, lookup_keys
        from criogen.storage.models.agents import SUBJECT_DIGEST_PURPOSE

        found, duplicates = super().get_search_results(request, queryset, search_term)
        term = search_term.strip()
        if term:
            key = getattr(settings, "CRIOGEN_ENCRYPTION_KEY", None) or None
            keys = lookup_keys(Cipher.from_option(key), SUBJECT_DIGEST_PURPOSE)
            found |= queryset.filter(subject_digest__in=[k.digest(term) for k in keys])
        return found, duplicates


@admin.register(Document)
class DocumentAdmin(admin.ModelAdmin):
    list_display = ("collection", "doc_id", "created_at")
    list_filter = ("collection",)
    search_fields = ("collection", "doc_id")


@admin.register(AuditEvent)
class AuditEventAdmin(admin.ModelAdmin):
    list_display = ("created_at", "actor", "action", "thread_id")
    list_filter = ("action",)
    search_fields = ("actor", "thread_id")
    date_hierarchy = "created_at"
    readonly_fields = ("created_at", "actor", "action", "thread_id", "details")

    # Append-only: the admin may read the trail, not change it.
    def has_add_permission(self, request: object) -> bool:
        return False

    def has_change_permission(self, request: object, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: object, obj: object = None) -> bool:
        return False


# -- API tokens ----------------------------------------------------------------------------

from criogen.storage.models.tokens import ApiToken, default_expiry, new_token  # noqa: E402


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    """Tokens are listed by prefix; the secret itself is never stored or shown again."""

    list_display = ("prefix", "user", "name", "created", "last_used", "expires_at")
    list_filter = ("user",)
    search_fields = ("name", "prefix", "user__username")
    readonly_fields = ("prefix", "created", "last_used")
    fields = ("user", "name", "expires_at", "prefix", "created", "last_used")

    def save_model(self, request: HttpRequest, obj: ApiToken, form: Any, change: bool) -> None:
        if not change:
            token, obj.token_hash, obj.prefix = new_token()
            if obj.expires_at is None:
                obj.expires_at = default_expiry()  # clear it afterwards for "never"
            messages.warning(
                request, f"The new token (copy it now, it is not shown again): {token}"
            )
        super().save_model(request, obj, form, change)


# -- LangGraph checkpoints (criogen.langgraph.CriogenSaver) --------------------------------

from criogen.storage.models import LangGraphCheckpoint  # noqa: E402


@admin.register(LangGraphCheckpoint)
class LangGraphCheckpointAdmin(admin.ModelAdmin):
    """Where a LangGraph thread stands: its checkpoints by namespace and run. Payloads
    are the serializer's bytes (sealed when encryption is on): not shown."""

    # thread_id, not thread: a saver used on its own stores threads Criogen never made.
    list_display = ("thread_id", "checkpoint_ns", "checkpoint_id", "run_id", "sealed", "created_at")
    list_filter = ("sealed",)
    search_fields = ("checkpoint_id", "run_id")
    ordering = ("-created_at",)
    fields = (
        "thread_id",
        "checkpoint_ns",
        "checkpoint_id",
        "parent_checkpoint_id",
        "run_id",
        "type",
        "sealed",
        "created_at",
    )
    readonly_fields = fields

    def get_search_results(self, request: HttpRequest, queryset: Any, search_term: str) -> Any:
        # A thread id matches exactly (the foreign key has no text lookups).
        found, duplicates = super().get_search_results(request, queryset, search_term)
        if search_term:
            found |= queryset.filter(thread_id=search_term.strip())
        return found, duplicates

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False


# -- resumable streams ----------------------------------------------------------------------

from criogen.storage.models import StreamEvent  # noqa: E402


@admin.register(StreamEvent)
class StreamEventAdmin(admin.ModelAdmin):
    """The event logs of resumable streams: read-only (the stream writes them, the
    sweep deletes them)."""

    list_display = ("run_id", "seq", "event", "mode", "version", "thread_id", "created_at")
    list_filter = ("event",)
    search_fields = ("=run_id", "=thread_id")
    ordering = ("-created_at", "run_id", "seq")
    readonly_fields = (
        "run_id",
        "thread_id",
        "seq",
        "version",
        "mode",
        "event",
        "data",
        "created_at",
    )

    def has_add_permission(self, request: Any) -> bool:
        return False

    def has_change_permission(self, request: Any, obj: Any = None) -> bool:
        return False
