"""Feature 13 on the server side: the timeline names the node that wrote each
checkpoint and lists answers, rewinds and state edits as events with their actor."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client

from criogen import registry
from criogen.storage.models import Thread
from dashboard.templatetags.criogen_ui import duration

pytestmark = pytest.mark.django_db


def test_workflow_steps_answers_rewinds_and_edits(
    as_operator: Client, suspended_workflow, settings
) -> None:
    settings.CRIOGEN_AUDIT = True
    t = suspended_workflow()
    g = registry.get_graph("hitl").thread(t.pk)
    g.resume("<b>yes</b>", by="olga", door="ui", durability="sync")
    v3 = next(c for c in g.history() if c.version == 3)
    g.rewind(v3.id, by="oscar", door="ui")
    g.update_state({"n": 7}, by="olga", door="api")
    t = Thread.objects.get(pk=t.pk)
    html = as_operator.get(f"/ui/threads/{t.pk}/").content.decode()
    timeline = html[
        html.index('id="timeline"') : html.index("</section>", html.index('id="timeline"'))
    ]
    assert '<span class="wrote" title="what wrote it">a</span>' in timeline
    assert '<span class="wrote" title="what wrote it">ask</span>' in timeline  # the suspension
    assert '<span class="wrote" title="what wrote it">rewind by oscar</span>' in timeline
    assert '<span class="wrote" title="what wrote it">state edit by olga</span>' in timeline
    assert (
        'data-action="resume"><span class="who">olga</span> <span class="verb">answered &quot;&lt;b&gt;yes&lt;/b&gt;&quot;</span>'
        in timeline
    )
    assert (
        'data-action="rewind"><span class="who">oscar</span> <span class="verb">rewound to v3</span>'
        in timeline
    )
    assert (
        'data-action="update_state"><span class="who">olga</span> <span class="verb">edited the state (n)</span> <span class="muted">via api'
        in timeline
    )
    assert "<b>yes</b>" not in timeline


def test_durations_read_well() -> None:
    assert duration(timedelta(milliseconds=35)) == "35 ms"
    assert duration(timedelta(seconds=1.25)) == "1.2 s"
    assert duration(timedelta(seconds=184)) == "3 min 4 s"
