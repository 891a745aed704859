"""The claim endpoint and the inbox's claim filter, through Django's test client."""

from __future__ import annotations

import re
from typing import Any

from criogen.selectors import claim_of
from criogen.storage.models import AuditEvent
from tests.dashboard.conftest import client_for

TOKEN = re.compile(r'id="claim-form"[^>]*>.*?name="csrfmiddlewaretoken" value="([^"]+)"', re.S)


def test_claim_without_htmx_uses_the_inbox_claim_form_and_redirects(
    operator: Any, operator2: Any, suspended_workflow: Any
) -> None:
    t = suspended_workflow()
    olga = client_for(operator, csrf_checks=True)
    page = olga.get("/ui/inbox/").content.decode()
    token = TOKEN.search(page).group(1)  # type: ignore[union-attr]
    assert f'formaction="/ui/threads/{t.pk}/claim/"' in page
    response = olga.post(
        f"/ui/threads/{t.pk}/claim/", {"csrfmiddlewaretoken": token, "claim": "", "from": "inbox"}
    )
    assert response.status_code == 302 and response["Location"] == "/ui/inbox/"
    assert claim_of(t).user == operator  # type: ignore[union-attr]

    # Oscar's plain claim is refused and says who holds it; his take-over is not.
    oscar = client_for(operator2)
    refused = oscar.post(f"/ui/threads/{t.pk}/claim/", {"claim": ""}, HTTP_HX_REQUEST="true")
    assert refused.status_code == 409
    assert f"claimed by {operator.username}" in refused.content.decode()
    taken = oscar.post(
        f"/ui/threads/{t.pk}/claim/",
        {"take_over": ""},
        HTTP_HX_REQUEST="true",
        HTTP_HX_CURRENT_URL="http://testserver/ui/threads/",
    )
    assert taken.status_code == 200
    assert 'id="claim"' in taken.content.decode() and "Claimed by you" in taken.content.decode()
    actions = list(
        AuditEvent.objects.filter(thread_id=t.pk).order_by("pk").values_list("action", "actor")
    )
    assert actions == [("claim", operator.username), ("claim_taken_over", operator2.username)]


def test_the_inbox_filters_mine_and_unclaimed_and_a_viewer_cannot_claim(
    operator: Any, operator2: Any, viewer: Any, suspended_workflow: Any
) -> None:
    held, free = suspended_workflow(), suspended_workflow()
    olga = client_for(operator)
    olga.post(f"/ui/threads/{held.pk}/claim/", {"claim": ""})

    def shown(client: Any, query: str) -> set[str]:
        html = client.get(f"/ui/inbox/?{query}").content.decode()
        return set(re.findall(r'article class="card waiting" data-thread="([^"]+)"', html))

    assert shown(olga, "claim=mine") == {held.pk}
    assert shown(olga, "claim=unclaimed") == {free.pk}
    assert shown(olga, "claim=all") >= {held.pk, free.pk}
    assert shown(client_for(operator2), "claim=mine") == set()
    assert (
        'ws-connect="/ws/ui/inbox/?claim=mine"'
        in olga.get("/ui/inbox/?claim=mine").content.decode()
    )

    response = client_for(viewer).post(f"/ui/threads/{free.pk}/claim/", {"claim": ""})
    assert response.status_code == 403
    assert claim_of(free) is None
