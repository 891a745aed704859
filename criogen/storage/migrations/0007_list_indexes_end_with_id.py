"""The thread list indexes end with the id, each list's tie-break: a page is then read
in order from the index and the database stops after it (``bench/NOTES.md``,
"Ties"). On a large table this rebuilds six indexes, during which the
thread table takes no writes."""

from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("criogen", "0006_scale_indexes"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.RemoveIndex(
            model_name="thread",
            name="criogen_thread_status_idx",
        ),
        migrations.RemoveIndex(
            model_name="thread",
            name="criogen_thread_updated_idx",
        ),
        migrations.RemoveIndex(
            model_name="thread",
            name="criogen_thread_created_idx",
        ),
        migrations.RemoveIndex(
            model_name="thread",
            name="criogen_thread_owner_new_idx",
        ),
        migrations.RemoveIndex(
            model_name="thread",
            name="criogen_thread_owner_upd_idx",
        ),
        migrations.RemoveIndex(
            model_name="thread",
            name="criogen_thread_owner_wait_idx",
        ),
        migrations.AddIndex(
            model_name="thread",
            index=models.Index(
                fields=["head_status", "updated_at", "id"], name="criogen_thread_status_idx"
            ),
        ),
        migrations.AddIndex(
            model_name="thread",
            index=models.Index(fields=["updated_at", "id"], name="criogen_thread_updated_idx"),
        ),
        migrations.AddIndex(
            model_name="thread",
            index=models.Index(fields=["created_at", "id"], name="criogen_thread_created_idx"),
        ),
        migrations.AddIndex(
            model_name="thread",
            index=models.Index(
                fields=["owner", "created_at", "id"], name="criogen_thread_owner_new_idx"
            ),
        ),
        migrations.AddIndex(
            model_name="thread",
            index=models.Index(
                fields=["owner", "updated_at", "id"], name="criogen_thread_owner_upd_idx"
            ),
        ),
        migrations.AddIndex(
            model_name="thread",
            index=models.Index(
                condition=models.Q(("head_status__in", ["suspended", "failed"])),
                fields=["owner", "head_status", "created_at", "id"],
                name="criogen_thread_owner_wait_idx",
            ),
        ),
    ]
