"""Loopback listeners for the tests of outbound calls (webhooks)."""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Listener:
    """A loopback HTTP listener that records what it receives and answers ``statuses``
    in turn (then 204)."""

    def __init__(self, host: str = "127.0.0.1", statuses: list[int] | None = None) -> None:
        self.received: list[dict[str, Any]] = []
        self.times: list[float] = []
        statuses = list(statuses or [])
        listener = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers["Content-Length"]))
                listener.received.append({"headers": dict(self.headers), "body": json.loads(body)})
                listener.times.append(time.monotonic())
                self.send_response(statuses.pop(0) if statuses else 204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        server_class = type(
            "Server",
            (ThreadingHTTPServer,),
            {"address_family": socket.AF_INET6 if ":" in host else socket.AF_INET},
        )
        self.server = server_class((host, 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Trickle:
    """A loopback listener that reads the request, then answers one byte every
    ``every`` seconds for as long as the client stays."""

    def __init__(self, host: str = "127.0.0.2", every: float = 0.3) -> None:
        self.sock = socket.socket()
        self.sock.bind((host, 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.every = every
        self.accepted = 0
        self.open = 0
        self.lock = threading.Lock()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with self.lock:
                self.accepted += 1
                self.open += 1
            threading.Thread(target=self._trickle, args=(conn,), daemon=True).start()

    def _trickle(self, conn: socket.socket) -> None:
        try:
            conn.recv(65536)
            for byte in b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n" * 100:
                time.sleep(self.every)
                conn.sendall(bytes([byte]))
        except OSError:
            pass  # the client went away
        finally:
            conn.close()
            with self.lock:
                self.open -= 1

    def close(self) -> None:
        self.sock.close()
