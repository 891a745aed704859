"""Storage on the Django ORM's tables: SQLite and PostgreSQL.

The models (:mod:`criogen.storage.models`) own the schema; this package reads and
writes checkpoints with raw SQL through Django's own connection, because that path
runs once per step and the ORM's per-row cost would dominate it; the rest (decisions,
effects, facts, documents, audit) uses the ORM.

:class:`OrmStorage` implements the :class:`~criogen.engine.store.Storage` protocol, one
module per concern, composed here:

- :mod:`.base`: the connection, fast cursors, times, sealing (encryption at rest);
- :mod:`.leases`: one run per thread (take, renew, give back, thread info);
- :mod:`.writes`: appending checkpoints and moving the head (the hot path);
- :mod:`.lifecycle`: creating a thread's row and deleting an idle thread, each with its
  audit event in one round trip;
- :mod:`.reads`: checkpoints with their states, history, listing and deleting threads;
- :mod:`.decisions`: decision records and the effect ledger;
- :mod:`.maintenance`: rolling a run back, compacting a thread, copying one;
- :mod:`.facts`: long-term memory facts;
- :mod:`.documents`: collections of documents and their search;
- :mod:`.audit`: the audit trail;

and, beside the protocol, :mod:`.runs`: a run's row on its hot path (created on its
thread, ended), one statement each on PostgreSQL.
"""

from __future__ import annotations

from criogen.storage.orm.decisions import OrmDecisions
from criogen.storage.orm.documents import OrmDocuments
from criogen.storage.orm.facts import OrmFacts
from criogen.storage.orm.leases import OrmLeases
from criogen.storage.orm.lifecycle import OrmLifecycle
from criogen.storage.orm.maintenance import OrmMaintenance
from criogen.storage.orm.reads import OrmReads

__all__ = ["OrmStorage"]


class OrmStorage(
    OrmLeases, OrmLifecycle, OrmReads, OrmDecisions, OrmMaintenance, OrmFacts, OrmDocuments
):
    """Threads and checkpoints in the Django database ``alias`` (SQLite or PostgreSQL)."""

    supports_background_writes = True
