"""Pirate §5.7's QUIC experiment: an HTTP/3 server and client (aioquic) whose client logs the
true latency of every response.

The paper (arXiv 2505.14358, §5.7, "Accuracy over QUIC connections") ran an HTTP/3 client and
server on mvfst and proxygen: responses of random size, uniform between two limits; a small
static dependency tree of requests; 1–16 multiplexed streams per connection; two scenarios,
responses of 30–130 bytes (all responses in flight fit in one packet) and of 1,600–15,100 bytes
(which make the client send pure QUIC ACKs). Here aioquic plays both sides:

- :func:`serve` answers ``GET /n<node>?b=<bytes>`` with ``bytes`` of body, after spinning
  ``cpu_us`` of CPU time (:func:`.cpu_server.spin`), so that, inside the CPU cgroup of
  :mod:`.asymmetric`, the response latency follows the CPU allocation as the HTTP server's
  does. Its certificate is self-signed and made at start-up (:func:`self_signed`).
- :func:`run_quic_clients` opens ``connections`` connections; each keeps ``streams`` requests
  in flight, one per stream, walking :data:`TREE`: a node's children are requested once its
  response has been read, and when no request is waiting a freed stream starts the next tree
  (closed loop: every request after the first ``streams`` is sent because a response was read).
  Response sizes are drawn uniformly within :attr:`QuicParams.response_bytes` by the client
  and named in the path. Every response is logged in a :class:`~.web_clients.ResponseLog`
  (``size``: body bytes; the paper's HTTP header of about 187 bytes is QPACK-compressed here),
  ``sent`` when the request is handed to aioquic (which sends it in the same event-loop turn),
  ``received`` when its stream ends.

What differs from the paper's mvfst client: aioquic acknowledges ack-eliciting packets after a
fixed 1 ms (``K_GRANULARITY``) rather than piggybacking the ACK on a request sent sooner, so a
request triggered by a response goes out before that response's ACK, and the ACK follows alone
a millisecond later, in both scenarios.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import importlib.util
import signal
import ssl
import sys
import tempfile
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tacit.errors import ConfigError
from tacit.experiment.cpu_server import CPU_US, spin
from tacit.experiment.web_clients import ResponseLog, ResponseRows
from tacit.model.columns import NONE

SCENARIOS = {"noack": (30, 130), "ack": (1_600, 15_100)}
"""§5.7's two scenarios, response bytes uniform within the limits: small responses that fit in
one packet together (label ``-noack``), large ones that make the client send pure ACKs
(``-ack``)."""

TREE: tuple[tuple[int, ...], ...] = (
    (1, 2, 3, 4),
    (5, 6, 7),
    (8, 9, 10),
    (11, 12, 13),
    (14, 15, 16),
    *((),) * 12,
)
"""The static dependency tree (node → children): a root naming four objects, each naming three
leaves; 17 requests per tree."""


@dataclass(frozen=True)
class QuicParams:
    """The clients: ``connections`` connections of ``streams`` (1–16, §5.7) concurrent streams,
    response bodies uniform within ``response_bytes`` (:data:`SCENARIOS`)."""

    connections: int = 1
    streams: int = 1
    response_bytes: tuple[int, int] = SCENARIOS["noack"]

    def __post_init__(self) -> None:
        lo, hi = self.response_bytes
        if self.connections < 1 or not 1 <= self.streams <= 16 or not 0 <= lo <= hi:
            raise ConfigError(
                "need connections ≥ 1, streams within 1..16 and response_bytes 0 ≤ low ≤ high"
            )


def quic_unavailable() -> str | None:
    """Why the QUIC experiment cannot run here (None when it can)."""
    if importlib.util.find_spec("aioquic") is None:
        return "aioquic is not installed (pip install 'tacit-traces[quic]')"
    return None


def self_signed(directory: Path, host: str) -> tuple[Path, Path]:
    """A self-signed ECDSA P-256 certificate for ``host`` (an address or a DNS name, in its
    subject alternative name, so that a client trusting the certificate can verify it) and its
    key, as ``cert.pem`` and ``key.pem`` in ``directory``. The experiment's client does not
    verify it: it measures latency, not trust; ``tacit serve``'s TLS tests do."""
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)])
    try:
        alt: x509.GeneralName = x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        alt = x509.DNSName(host)
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([alt]), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


def request_path(node: int, size: int) -> str:
    """The path that asks the server for ``size`` bytes of body as tree node ``node``."""
    return f"/n{node}?b={size}"


def body_size(path: bytes) -> int | None:
    """The body size a :func:`request_path` asks for (None: not such a path)."""
    _, sep, size = path.partition(b"?b=")
    return int(size) if sep and path.startswith(b"/n") and size.isdigit() else None


async def serve(host: str, port: int, cpu_us: float) -> None:
    """Serve HTTP/3 on ``host:port`` (UDP) until cancelled; prints the port once listening."""
    from aioquic.asyncio import QuicConnectionProtocol
    from aioquic.asyncio import serve as quic_serve
    from aioquic.h3.connection import H3_ALPN, H3Connection
    from aioquic.h3.events import HeadersReceived
    from aioquic.quic.configuration import QuicConfiguration
    from aioquic.quic.events import QuicEvent

    cpu_s = cpu_us / 1e6

    class Server(QuicConnectionProtocol):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.http = H3Connection(self._quic)

        def quic_event_received(self, event: QuicEvent) -> None:
            for e in self.http.handle_event(event):
                if not isinstance(e, HeadersReceived):
                    continue  # requests are HEADERS alone, with the end of the stream
                size = body_size(dict(e.headers).get(b":path", b""))
                spin(cpu_s)
                status = b"200" if size is not None else b"404"
                body = b"x" * (size or 0)
                headers = [(b":status", status), (b"content-length", str(len(body)).encode())]
                self.http.send_headers(e.stream_id, headers)
                self.http.send_data(e.stream_id, body, end_stream=True)

    config = QuicConfiguration(is_client=False, alpn_protocols=H3_ALPN)
    with tempfile.TemporaryDirectory() as tmp:
        config.load_cert_chain(*self_signed(Path(tmp), host))
    server = await quic_serve(host, port, configuration=config, create_protocol=Server)
    print(port, flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        server.close()


async def _connection(  # noqa: C901
    conn: int,
    address: tuple[str, int],
    params: QuicParams,
    seconds: float,
    rows: ResponseRows,
    rng: np.random.Generator,
) -> None:
    """One connection: ``streams`` requests in flight down :data:`TREE` (module docstring)
    until ``seconds`` have passed; then it reads what is in flight and closes."""
    from aioquic.asyncio import QuicConnectionProtocol, connect
    from aioquic.h3.connection import H3_ALPN, H3Connection
    from aioquic.h3.events import DataReceived, HeadersReceived
    from aioquic.quic.configuration import QuicConfiguration
    from aioquic.quic.events import QuicEvent

    host, port = address
    lo, hi = params.response_bytes
    stop = time.monotonic() + seconds
    todo: deque[tuple[int, int]] = deque()  # (node, parent row) waiting for a stream
    inflight: dict[int, tuple[str, int, int, int, int]] = {}  # stream → request
    received: dict[int, int] = {}  # stream → body bytes so far
    drained = asyncio.Event()
    failed: list[str] = []  # raised after the loop: an exception in a callback is only logged

    class Client(QuicConnectionProtocol):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.http = H3Connection(self._quic)
            self.port = 0

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(transport)
            self.port = transport.get_extra_info("sockname")[1]

        def fill(self) -> None:
            """Send requests while a stream is free: waiting children first, else a new
            tree; none once the run is over."""
            while len(inflight) < params.streams and time.monotonic() < stop:
                node, parent = todo.popleft() if todo else (0, NONE)
                path = request_path(node, int(rng.integers(lo, hi + 1)))
                stream = self._quic.get_next_available_stream_id()
                headers = [(b":method", b"GET"), (b":scheme", b"https"),
                           (b":authority", host.encode()), (b":path", path.encode())]  # fmt: skip
                sent = time.time_ns()
                self.http.send_headers(stream, headers, end_stream=True)
                inflight[stream] = (path, node, parent, sent, len(inflight) + 1)
            if not inflight:
                drained.set()

        def quic_event_received(self, event: QuicEvent) -> None:
            for e in self.http.handle_event(event):
                if not isinstance(e, HeadersReceived | DataReceived):
                    continue
                if isinstance(e, HeadersReceived) and dict(e.headers)[b":status"] != b"200":
                    failed.append(f"the QUIC server answered {e.headers!r}")
                    drained.set()
                if isinstance(e, DataReceived):
                    received[e.stream_id] = received.get(e.stream_id, 0) + len(e.data)
                if e.stream_ended:
                    done = time.time_ns()
                    path, node, parent, sent, depth = inflight.pop(e.stream_id)
                    size = received.pop(e.stream_id, 0)
                    row = rows.add(conn, self.port, path, sent, done, parent, depth, size)
                    todo.extend((child, row) for child in TREE[node])
                    self.fill()  # sent by the transmit() that follows this event

    config = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN)
    config.verify_mode = ssl.CERT_NONE
    async with connect(host, port, configuration=config, create_protocol=Client) as client:
        assert isinstance(client, Client)
        client.fill()
        client.transmit()
        await drained.wait()
    if failed:
        raise ConfigError(failed[0])


async def _run(
    address: tuple[str, int], seconds: float, params: QuicParams, seed: int
) -> ResponseLog:
    rows = ResponseRows()
    async with asyncio.TaskGroup() as group:
        for c in range(params.connections):
            rng = np.random.default_rng([seed, c])
            group.create_task(_connection(c, address, params, seconds, rows, rng))
    return rows.table()


def run_quic_clients(
    address: tuple[str, int], seconds: float, params: QuicParams, seed: int = 0
) -> ResponseLog:
    """Run the HTTP/3 clients against :func:`serve` at ``address`` for ``seconds`` and return
    the log of every response."""
    return asyncio.run(_run(address, seconds, params, seed))


def main(argv: list[str] | None = None) -> None:
    """``serve --host H --port P [--cpu-us U]``: the server, until SIGINT or SIGTERM;
    ``clients --address H:P --seconds S --out LOG.npz [--connections N] [--streams K]
    [--response-bytes LO HI] [--seed S]``: the clients, saving their log."""
    parser = argparse.ArgumentParser(prog="python -m tacit.experiment.quic")
    sub = parser.add_subparsers(dest="command", required=True)
    srv = sub.add_parser("serve")
    srv.add_argument("--host", required=True)
    srv.add_argument("--port", type=int, required=True)
    srv.add_argument("--cpu-us", type=float, default=CPU_US)
    cli = sub.add_parser("clients")
    cli.add_argument("--address", required=True)
    cli.add_argument("--seconds", type=float, required=True)
    cli.add_argument("--out", required=True)
    cli.add_argument("--connections", type=int, default=QuicParams.connections)
    cli.add_argument("--streams", type=int, default=QuicParams.streams)
    cli.add_argument("--response-bytes", type=int, nargs=2, default=SCENARIOS["noack"])
    cli.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.command == "serve":
        signal.signal(signal.SIGTERM, signal.default_int_handler)
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(serve(args.host, args.port, args.cpu_us))
        return
    host, _, port = args.address.rpartition(":")
    params = QuicParams(args.connections, args.streams, tuple(args.response_bytes))
    run_quic_clients((host, int(port)), args.seconds, params, args.seed).save(args.out)


if __name__ == "__main__":
    main(sys.argv[1:])
