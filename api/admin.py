"""Admin for API tokens: adding one shows the token once, in a message."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.http import HttpRequest

from api.models import ApiToken, default_expiry, new_token


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
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
