"""CriogenSaver under real LangGraph graphs, on SQLite and PostgreSQL: runs, interrupts
and resumes, history, forks, and encryption at rest seen from the raw tables."""

from __future__ import annotations

import operator
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Annotated, Any, TypedDict

import psycopg
import pytest
from django.db import connections, transaction
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

from criogen import Storage
from criogen.engine.crypto import generate_key
from criogen.engine.errors import EncryptionKeyInvalid
from criogen.langgraph import CriogenSaver
from criogen.langgraph.saver import close_database_threads
from tests.conftest import PG_HOST, fresh_postgres_database

SECRET = "Tell nobody: the vault code is 7-4-1-9"
TABLES = ("criogen_lg_checkpoint", "criogen_lg_blob", "criogen_lg_write")


class State(TypedDict):
    topic: str
    notes: Annotated[list[str], operator.add]
    approved: bool


def _draft(state: State) -> dict[str, Any]:
    return {"notes": [f"draft about {state['topic']}"]}


def _review(state: State) -> dict[str, Any]:
    answer = interrupt({"question": "approve the draft?", "notes": state["notes"]})
    return {"approved": answer == "yes", "notes": [f"reviewed: {answer}"]}


def _publish(state: State) -> dict[str, Any]:
    return {"notes": ["published" if state["approved"] else "dropped"]}


def _graph(saver: CriogenSaver) -> Any:
    builder = StateGraph(State)
    builder.add_node("draft", _draft)
    builder.add_node("review", _review)
    builder.add_node("publish", _publish)
    builder.add_edge(START, "draft")
    builder.add_edge("draft", "review")
    builder.add_edge("review", "publish")
    builder.add_edge("publish", END)
    return builder.compile(checkpointer=saver)


@pytest.fixture(params=["sqlite", "postgres"])
def database(request: pytest.FixtureRequest, django_db_blocker: object) -> Iterator[str]:
    """Each database in turn (migrated here, outside any event loop)."""
    url = str(request.getfixturevalue(f"{request.param}_url"))
    with django_db_blocker.unblock():  # type: ignore[attr-defined]
        Storage(url, encryption_key=False)
        yield url


def _config() -> dict[str, Any]:
    return {"configurable": {"thread_id": f"lg-{uuid.uuid4()}"}}


def test_a_graph_suspends_at_an_interrupt_and_resumes(database: str) -> None:
    graph = _graph(CriogenSaver(Storage(database, encryption_key=False)))
    config = _config()

    first = graph.invoke({"topic": "otters", "notes": [], "approved": False}, config)

    assert first["__interrupt__"][0].value["question"] == "approve the draft?"
    state = graph.get_state(config)
    assert state.next == ("review",)
    assert state.values["notes"] == ["draft about otters"]
    assert state.tasks[0].interrupts[0].value["notes"] == ["draft about otters"]

    # A new saver on the same database (another process, after a restart) resumes it.
    again = _graph(CriogenSaver(Storage(database, encryption_key=False)))
    final = again.invoke(Command(resume="yes"), config)

    assert final["approved"] is True
    assert final["notes"] == ["draft about otters", "reviewed: yes", "published"]
    assert again.get_state(config).next == ()
    history = list(again.get_state_history(config))
    steps = [h.metadata["step"] for h in history]
    assert steps == sorted(steps, reverse=True) and steps[-1] == -1
    assert history[0].values == final


async def test_a_graph_runs_on_the_async_methods(database: str) -> None:
    graph = _graph(CriogenSaver(Storage(database, encryption_key=False)))
    config = _config()

    first = await graph.ainvoke({"topic": "moss", "notes": [], "approved": False}, config)
    assert "__interrupt__" in first
    final = await graph.ainvoke(Command(resume="no"), config)

    assert final["notes"] == ["draft about moss", "reviewed: no", "dropped"]
    assert (await graph.aget_state(config)).values == final
    history = [h async for h in graph.aget_state_history(config)]
    assert len(history) == len(list(graph.get_state_history(config))) >= 4


def test_a_fork_from_an_old_checkpoint_keeps_both_lines_apart(database: str) -> None:
    graph = _graph(CriogenSaver(Storage(database, encryption_key=False)))
    config = _config()
    graph.invoke({"topic": "rain", "notes": [], "approved": False}, config)
    graph.invoke(Command(resume="yes"), config)
    at_review = next(h for h in graph.get_state_history(config) if h.next == ("review",))

    # The fork writes channel versions the first line also reached, with other values.
    forked = graph.update_state(at_review.config, {"topic": "snow"})
    final = graph.invoke(Command(resume="no"), forked)

    assert final["topic"] == "snow"
    assert final["notes"] == ["draft about rain", "reviewed: no", "dropped"]
    first_line = graph.get_state(
        {
            "configurable": {
                **config["configurable"],
                "checkpoint_id": _head_of_first_line(graph, config),
            }
        }
    )
    assert first_line.values["notes"][-1] == "published"
    assert first_line.values["topic"] == "rain"


def _head_of_first_line(graph: Any, config: dict[str, Any]) -> str:
    done = [h for h in graph.get_state_history(config) if not h.next]
    published = [h for h in done if h.values["notes"][-1] == "published"]
    return published[0].config["configurable"]["checkpoint_id"]


def _raw_rows(storage: Storage, thread_id: str) -> bytes:
    """Every stored column of the thread's rows, as the database hands them out."""
    seen = b""
    with connections[storage.alias].cursor() as cursor:  # type: ignore[attr-defined]
        for table in TABLES:
            cursor.execute(f"SELECT * FROM {table} WHERE thread_id = %s", [thread_id])  # noqa: S608
            for row in cursor.fetchall():
                for value in row:
                    if isinstance(value, memoryview | bytes):
                        seen += bytes(value)
                    else:
                        seen += str(value).encode()
    return seen


def _count(storage: Storage, table: str, config: dict[str, Any]) -> int:
    with connections[storage.alias].cursor() as cursor:  # type: ignore[attr-defined]
        cursor.execute(
            f"SELECT COUNT(*) FROM {table} WHERE thread_id = %s",  # noqa: S608
            [config["configurable"]["thread_id"]],
        )
        return int(cursor.fetchone()[0])


def _checkpoint(values: dict[str, Any], versions: dict[str, str]) -> Any:
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = values
    checkpoint["channel_versions"] = versions
    return checkpoint


@pytest.mark.parametrize("encrypted", [False, True])
def test_simple_and_small_values_stay_in_the_checkpoint_row_and_large_ones_in_blobs(
    database: str, encrypted: bool
) -> None:
    storage = Storage(database, encryption_key=generate_key() if encrypted else False)
    saver = CriogenSaver(storage)
    config = _config()
    config["configurable"]["checkpoint_ns"] = ""
    values = {
        "n": 3,
        "ratio": 0.5,
        "s": "x",
        "flag": True,
        "nothing": None,
        "obj": {"k": [1]},
        "large": {"text": "y" * 5000},
    }
    versions = {channel: saver.get_next_version(None) for channel in [*values, "cleared"]}

    first = saver.put(config, _checkpoint(values, versions), {"step": 0}, versions)
    # The next checkpoint: only simple values changed.
    later = {**versions, "n": saver.get_next_version(versions["n"])}
    second = saver.put(
        first, _checkpoint({**values, "n": 4}, later), {"step": 1}, {"n": later["n"]}
    )

    # One blob in all: the large value's (a cleared channel's version has no row; the
    # small dict is in each checkpoint's row).
    assert _count(storage, "criogen_lg_blob", config) == 1
    for reader in (saver, CriogenSaver(storage)):  # this process's, and a fresh one
        for saved, expected in ((first, values), (second, {**values, "n": 4})):
            found = reader.get_tuple(saved)
            assert found is not None
            assert found.checkpoint["channel_values"] == expected
    assert saver.get_tuple(config).checkpoint["channel_values"]["n"] == 4  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("value", "blobs"), [({"k": [1]}, 0), ({"text": "y" * 5000}, 1)], ids=["small", "large"]
)
def test_a_saver_that_did_not_put_a_version_stores_it_again_where_it_reads(
    database: str, value: dict[str, Any], blobs: int
) -> None:
    # A checkpoint that holds an unchanged value put by another process (or before a
    # restart), without a get_tuple first: the value still reads, from its row or its
    # blob, and a large one still has a single blob.
    storage = Storage(database, encryption_key=False)
    config = _config()
    config["configurable"]["checkpoint_ns"] = ""
    versions = {"obj": "1", "n": "1"}
    first = CriogenSaver(storage).put(
        config, _checkpoint({"obj": value, "n": 1}, versions), {"step": 0}, versions
    )
    later = {**versions, "n": "2"}
    second = CriogenSaver(storage).put(
        first, _checkpoint({"obj": value, "n": 2}, later), {"step": 1}, {"n": "2"}
    )

    found = CriogenSaver(storage).get_tuple(second)

    assert found is not None
    assert found.checkpoint["channel_values"] == {"obj": value, "n": 2}
    assert _count(storage, "criogen_lg_blob", config) == blobs


def test_a_checkpoint_with_every_value_in_a_blob_still_reads(database: str) -> None:
    # As checkpoints were stored before simple values were kept inline: a body without
    # channel values, one blob per version, and an ``empty`` blob for a cleared channel.
    from criogen.storage.models import LangGraphBlob, LangGraphCheckpoint

    storage = Storage(database, encryption_key=False)
    saver = CriogenSaver(storage)
    thread_id = f"lg-{uuid.uuid4()}"
    versions = {"n": "1", "obj": "1", "cleared": "1"}
    body = _checkpoint({}, versions)
    del body["channel_values"]
    kind, data, _ = saver._dump({"checkpoint": body, "metadata": {"step": 0}})
    LangGraphCheckpoint.objects.using(storage.alias).create(  # type: ignore[attr-defined]
        thread_id=thread_id, checkpoint_id=body["id"], type=kind, checkpoint=data
    )
    for channel, value in (("n", 3), ("obj", {"k": [1]})):
        b_kind, b_data, _ = saver._dump(value)
        LangGraphBlob.objects.using(storage.alias).create(  # type: ignore[attr-defined]
            thread_id=thread_id, channel=channel, version="1", type=b_kind, blob=b_data
        )
    LangGraphBlob.objects.using(storage.alias).create(  # type: ignore[attr-defined]
        thread_id=thread_id, channel="cleared", version="1", type="empty", blob=None
    )

    found = saver.get_tuple({"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}})

    assert found is not None
    assert found.checkpoint["channel_values"] == {"n": 3, "obj": {"k": [1]}}
    assert found.metadata == {"step": 0}


@pytest.mark.parametrize("encrypted", [False, True])
def test_a_raw_table_scan_finds_no_plaintext_when_encryption_is_on(
    database: str, encrypted: bool
) -> None:
    storage = Storage(database, encryption_key=generate_key() if encrypted else False)
    graph = _graph(CriogenSaver(storage))
    config = _config()

    graph.invoke({"topic": SECRET, "notes": [], "approved": False}, config)

    raw = _raw_rows(storage, config["configurable"]["thread_id"])
    assert config["configurable"]["thread_id"].encode() in raw  # the scan reads the rows
    # The topic (a string: kept inline) and the metadata in the checkpoint's body, the
    # notes in a channel blob, the interrupt's value in a pending write: each sealed,
    # or each in clear.
    assert (SECRET.encode() in raw) is not encrypted
    assert (b"approve the draft?" in raw) is not encrypted
    assert graph.get_state(config).values["topic"] == SECRET


def test_sealed_rows_need_the_key(database: str) -> None:
    key = generate_key()
    config = _config()
    _graph(CriogenSaver(Storage(database, encryption_key=key))).invoke(
        {"topic": "keys", "notes": [], "approved": False}, config
    )

    with pytest.raises(EncryptionKeyInvalid):
        _graph(CriogenSaver(Storage(database, encryption_key=False))).get_state(config)
    with pytest.raises(EncryptionKeyInvalid):
        _graph(CriogenSaver(Storage(database, encryption_key=generate_key()))).get_state(config)
    # Rotation: a new key in front, the old one after it, still reads the thread.
    rotated = Storage(database, encryption_key=f"{generate_key()},{key}")
    assert _graph(CriogenSaver(rotated)).get_state(config).values["topic"] == "keys"


def test_deleting_a_criogen_thread_deletes_its_langgraph_rows(database: str) -> None:
    from criogen.storage.models import LangGraphCheckpoint, Thread

    storage = Storage(database, encryption_key=False)
    graph = _graph(CriogenSaver(storage))
    served, alone = _config(), _config()
    Thread.objects.using(storage.alias).create(id=served["configurable"]["thread_id"])  # type: ignore[attr-defined]
    for config in (served, alone):
        graph.invoke({"topic": "tides", "notes": [], "approved": False}, config)

    assert storage.delete_thread(served["configurable"]["thread_id"])

    assert _raw_rows(storage, served["configurable"]["thread_id"]) == b""
    assert graph.get_state(served).values == {}
    assert graph.get_state(alone).values["topic"] == "tides"
    rows = LangGraphCheckpoint.objects.using(storage.alias)  # type: ignore[attr-defined]
    assert rows.filter(thread_id=alone["configurable"]["thread_id"]).exists()


def test_it_needs_a_database() -> None:
    with pytest.raises(TypeError, match="InMemorySaver"):
        CriogenSaver(Storage())


class _ThreadRecordingSerde(JsonPlusSerializer):
    """LangGraph's serializer, noting the thread each payload is serialized on."""

    def __init__(self) -> None:
        super().__init__()
        self.threads: set[str] = set()

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        self.threads.add(threading.current_thread().name)
        return super().dumps_typed(obj)


def _checkpoint_of(graph: Any, config: dict[str, Any]) -> Any:
    return graph.checkpointer.get_tuple(graph.get_state(config).config)


def test_a_sync_put_from_a_passing_thread_runs_there_and_leaves_it_no_connection(
    database: str,
) -> None:
    serde = _ThreadRecordingSerde()
    saver = CriogenSaver(Storage(database, encryption_key=False), serde=serde)
    alias = saver.alias
    config = _config()
    seen: dict[str, Any] = {}

    def passing() -> None:
        stored = _graph(saver).invoke(
            {"topic": "fog", "notes": [], "approved": False}, config, durability="exit"
        )
        seen["interrupted"] = "__interrupt__" in stored
        # The thread's own Django connection was never opened: nothing is left open
        # when the thread ends.
        seen["connection"] = connections[alias].connection

    worker = threading.Thread(target=passing, name="passing-through")
    worker.start()
    worker.join()

    assert seen == {"interrupted": True, "connection": None}
    assert not any(name.startswith("criogen-langgraph-") for name in serde.threads)
    state = _graph(saver).get_state(config)
    assert state.values["notes"] == ["draft about fog"]


def test_a_sync_put_stays_outside_the_callers_transaction(
    postgres_url: str, django_db_blocker: Any
) -> None:
    # PostgreSQL only: on SQLite the caller's open write transaction holds the one
    # writer's lock.
    with django_db_blocker.unblock():
        saver = CriogenSaver(Storage(postgres_url, encryption_key=False))
        _stays_outside(saver)


def _stays_outside(saver: CriogenSaver) -> None:
    config = _config()
    with pytest.raises(RuntimeError, match="undo"), transaction.atomic(using=saver.alias):
        _graph(saver).invoke({"topic": "ice", "notes": [], "approved": False}, config)
        raise RuntimeError("undo the caller's transaction")

    assert _graph(saver).get_state(config).values["notes"] == ["draft about ice"]


def test_closing_the_database_threads_closes_the_owned_connections(
    django_db_blocker: Any,
) -> None:
    with django_db_blocker.unblock(), fresh_postgres_database("criogen_saver") as url:
        storage = Storage(url, encryption_key=False)
        saver = CriogenSaver(storage)
        config = _config()
        graph = _graph(saver)
        worker = threading.Thread(
            target=graph.invoke, args=({"topic": "dew", "notes": [], "approved": False}, config)
        )
        worker.start()
        worker.join()
        assert graph.get_state(config).values["notes"] == ["draft about dew"]
        name = url.rsplit("/", 1)[1]

        def others() -> int:
            with psycopg.connect(f"host={PG_HOST} user=postgres dbname=test") as conn:
                row = conn.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = %s", [name]
                ).fetchone()
                return int(row[0]) if row else 0

        connections[storage.alias].close()
        assert others() > 0
        close_database_threads()
        # A backend leaves pg_stat_activity when its process has exited, a moment after
        # the client closed the connection (longer on a loaded machine): wait for that,
        # where a connection left open would stay listed.
        deadline = time.monotonic() + 10
        while others() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert others() == 0
