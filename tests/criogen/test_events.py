"""The live-event publisher: events leave in order, and a broken channel layer never
holds up the code that sends them."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.test import override_settings

from criogen import events


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _receive_all(channel: str, count: int) -> list[dict[str, Any]]:
    layer = get_channel_layer()
    return [await layer.receive(channel) for _ in range(count)]


def test_events_reach_the_layer_in_the_order_they_were_sent() -> None:
    layer = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)("order-test", channel)
    sent_from = threading.current_thread().name
    for n in range(80):  # the in-memory layer keeps up to 100 per channel
        events.send("order-test", {"type": "probe", "n": n, "from": sent_from})
    assert events.flush()
    received = async_to_sync(_receive_all)(channel, 80)
    assert [e["n"] for e in received] == list(range(80))


def test_a_channel_layer_that_is_down_does_not_hold_up_the_sender() -> None:
    down = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [f"redis://127.0.0.1:{_closed_port()}/0"]},
        }
    }
    with override_settings(CHANNEL_LAYERS=down):
        assert type(get_channel_layer()).__name__ == "RedisChannelLayer"
        started = time.monotonic()
        for n in range(50):
            events.run_changed(run_id=f"run-{n}", thread_id=f"thread-{n}", status="running")
        queued_in = time.monotonic() - started
        # Each event fails on its own (connection refused), none blocks run_changed:
        # all 100 were queued before a single send could even time out.
        assert queued_in < events._Publisher.SEND_TIMEOUT
        assert events.flush(timeout=60), "the publisher did not get past the dead layer"
    # And it goes on working once the layer is back.
    test_events_reach_the_layer_in_the_order_they_were_sent()


def test_a_burst_of_stream_chunks_travels_as_one_message_in_order() -> None:
    """Chunks sent while the publisher is busy (a model's tokens) leave together: a
    thousand of them do not overflow the layer's 100 messages per channel."""
    layer = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)(events.thread_group("burst-thread"), channel)
    gate = threading.Event()

    def busy() -> None:  # the publisher is held here until the burst has been sent
        gate.wait(30)

    events.send("nobody", busy)  # type: ignore[arg-type]
    for n in range(1000):
        events.send_chunks(
            run_id="burst-run", thread_id="burst-thread", items=[("custom", "custom", str(n))]
        )
    gate.set()
    assert events.flush()
    [message] = async_to_sync(_receive_all)(channel, 1)

    assert message["type"] == "stream.chunks"
    assert message["run_id"] == "burst-run"
    assert [item[2] for item in message["items"]] == [str(n) for n in range(1000)]


def test_an_event_nobody_listens_to_puts_nothing_on_a_request_loop() -> None:
    """With the in-memory layer, an event is handed to the loop of the request that
    sent it. A request's loop may end at any moment: a coroutine made for it then is
    dropped unawaited (a RuntimeWarning, an error in this suite). When no socket of the
    process listens to the group, nothing is made for that loop at all."""
    loop = asyncio.new_event_loop()
    runner = threading.Thread(target=loop.run_forever, daemon=True)
    runner.start()
    busy = threading.Event()
    loop.call_soon_threadsafe(busy.wait)  # the request's loop is busy with its own work
    saved = events._publisher.server_loop
    events._publisher.server_loop = loop
    try:
        events.send("nobody-listens", {"type": "probe"})
        # Before, the publisher scheduled the send on that loop and waited for it.
        assert events.flush(timeout=1.0)
    finally:
        events._publisher.server_loop = saved
        busy.set()
        loop.call_soon_threadsafe(loop.stop)
        runner.join(timeout=5)
    assert not asyncio.all_tasks(loop)
    loop.close()
