"""A three-service app (load generator → front → geo, HTTP/1.1) as hand-made TCP
conversations with known timing, for the spans-from-packets tests."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tacit.formats.capture_spans import ServiceMap
from tcp_conversations import MS, Conversation

LOADGEN, FRONT, BACK = "10.0.0.1", "10.0.0.2", "10.0.0.3"
NAMES = ServiceMap(addresses={LOADGEN: "loadgen", FRONT: "front"}, ports={80: "geo"})


def ok(body: bytes) -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)


def request(path: str, rid: str) -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: x\r\nX-Request-Id: {rid}\r\n\r\n".encode()


def three_tier(
    starts_ms: list[int],
    answer_last: bool = True,
    ports: tuple[int, int] = (40000, 50000),
    call_ms: tuple[int, int, int] = (2, 5, 7),
) -> list[Conversation]:
    """A load generator calling front's /hotels (keep-alive), front calling geo's /near inside
    each request, one request at a time from each start (ms), from client ``ports``;
    ``call_ms``: when, after the request, the call starts and ends and the response ends."""
    outer = Conversation((LOADGEN, ports[0]), (FRONT, 8080))
    inner = Conversation((FRONT, ports[1]), (BACK, 80))
    outer.handshake(0)
    inner.handshake(0)
    for k, t in enumerate(starts_ms):
        last = k == len(starts_ms) - 1
        outer.send(t * MS, 0, request("/hotels?city=a", f"r{k}"))
        inner.send((t + call_ms[0]) * MS, 0, request("/near", f"c{k}"))
        inner.send((t + call_ms[1]) * MS, 1, ok(b"near"))
        if answer_last or not last:
            outer.send((t + call_ms[2]) * MS, 1, ok(b"hotels"))
    return [outer, inner]


@contextmanager
def pong_server() -> Iterator[int]:
    """An HTTP/1.1 server on loopback answering every GET with ``pong`` (keep-alive unless the
    client closes), for the live capture tests; yields its port."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Pong)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


class _Pong(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "4")
        self.end_headers()
        self.wfile.write(b"pong")

    def log_message(self, *args) -> None:
        pass
