"""Webhooks may not reach the server's own network: every spelling of a loopback
address is refused end to end with the production defaults (no allow-list), and the
listeners receive nothing (docs/security.md, "Outbound calls").

Only loopback addresses are used: a refusal that failed would reach a listener of this
test, never another machine.
"""

from __future__ import annotations

import time
from typing import Any

from tests.api.conftest import Server
from tests.listeners import Listener
from tests.reliability.conftest import Figures
from tests.reliability.helpers import pg


def _spellings(v4: int, v6: int) -> list[str]:
    return [
        f"http://127.0.0.1:{v4}/hook",
        f"https://127.0.0.1:{v4}/hook",
        f"http://user:pw@127.0.0.1:{v4}/hook",
        f"http://127.1:{v4}/hook",
        f"http://2130706433:{v4}/hook",
        f"http://0x7f000001:{v4}/hook",
        f"http://localhost:{v4}/hook",
        f"http://0.0.0.0:{v4}/hook",
        f"http://[::ffff:127.0.0.1]:{v4}/hook",
        f"http://[::1]:{v6}/hook",
        f"http://[0:0:0:0:0:0:0:1]:{v6}/hook",
        f"http://[::]:{v6}/hook",
    ]


def test_webhooks_to_every_spelling_of_loopback_are_refused(
    rel_server: Server, figures: Figures
) -> None:
    v4, v6 = Listener("127.0.0.1"), Listener("::1")
    runs: dict[str, str] = {}
    try:
        with rel_server.http("alice") as http:
            for url in _spellings(v4.port, v6.port):
                made = http.post(
                    "/runs", json={"assistant_id": "steps", "input": {}, "webhook": url}
                )
                assert made.status_code == 200, made.text
                runs[made.json()["run_id"]] = url
        rows: list[Any] = []
        deadline = time.monotonic() + 60
        while len(rows) < len(runs):
            assert time.monotonic() < deadline, f"{len(rows)} of {len(runs)} recorded"
            time.sleep(0.2)
            with pg(rel_server.database_url) as db:
                rows = db.execute(
                    "SELECT run_id, outcome, error FROM criogen_outbound_attempt "
                    "WHERE run_id = ANY(%s)",
                    (list(runs),),
                ).fetchall()
    finally:
        v4.close()
        v6.close()

    figures.webhooks_to_internal_addresses_tried += len(runs)
    figures.webhooks_to_internal_addresses_delivered += len(v4.received) + len(v6.received)
    assert v4.received == [] and v6.received == []
    for run_id, outcome, error in rows:
        assert outcome == "refused", (runs[run_id], error)
    figures.webhooks_to_internal_addresses_refused += sum(r[1] == "refused" for r in rows)
