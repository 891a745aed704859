"""Runs count their hand-backs (a lost database connection, thread lease or write)
apart from their claims: only hand-backs are limited (``MAX_HAND_BACKS``), so re-claims
after worker crashes no longer use up a run's chances (docs/deployment.md)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("criogen", "0011_outbound_attempts"),
    ]

    operations = [
        migrations.AddField(
            model_name="run",
            name="hand_backs",
            field=models.PositiveIntegerField(
                default=0,
                db_default=0,
                help_text="times a worker gave it back after losing its database connection, its thread's lease or a write (re-claims after a crash and shutdowns do not count)",
            ),
        ),
    ]
