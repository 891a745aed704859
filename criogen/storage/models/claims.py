"""Claims: which operator is working on a suspended thread ("I'm on it")."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone


class Claim(models.Model):
    """One operator holds one thread's current suspension.

    A thread has at most one row (its primary key is the thread). The claim is tied to
    the head it was made on (``version``): once the suspension is answered, rewound or
    otherwise moves on, the head's version changes and the row no longer counts as a
    claim (the selectors compare it with ``Thread.head_version``); the next claim of the
    thread replaces it. So nothing on the answer path has to end claims.
    """

    thread = models.OneToOneField(
        "criogen.Thread", primary_key=True, on_delete=models.CASCADE, related_name="claim"
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="criogen_claims"
    )
    since = models.DateTimeField(default=timezone.now)
    version = models.PositiveIntegerField(help_text="The head version the claim was made on.")

    class Meta:
        db_table = "criogen_claim"
        indexes = [models.Index(fields=["user", "version"], name="criogen_claim_user_idx")]

    def __str__(self) -> str:
        return f"{self.thread_id} v{self.version} by {self.user_id}"
