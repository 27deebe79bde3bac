"""A simulated microservice run as the packets one capture point would hold: HTTP/1.1 and gRPC.

Every RPC of a span table with ground truth (:func:`tacit.simulate.microservices.simulate`)
becomes one request/response exchange on a TCP connection between the caller's and the callee's
addresses, as a capture on a bridge or a node's interfaces sees it: the request's bytes when the
caller's client span starts, the response's when it ends. Requests that enter the app (server
spans no traced caller made) come from a load generator's address. Each instance has its own
IPv4 address; each service speaks one protocol (``protocols``; by default the entry services
HTTP/1.1, as DeathStarBench's frontends do, and every other service gRPC). Every segment with
data is acknowledged 20 µs later.

- HTTP/1.1 (RFC 9112): keep-alive connections per (caller, callee) pair, one request at a time
  each; a call that finds every connection busy opens another (a handshake just before it).
- gRPC (HTTP/2, RFC 9113, gRPC over HTTP/2): one connection per pair, opened with the preface
  and SETTINGS, every call a new stream (HEADERS with HPACK through the ``hpack`` library, a
  length-prefixed DATA message, and the response's HEADERS, DATA and ``grpc-status`` trailers).

Every request carries ``x-request-id``: the row of the caller's span. Nothing in tacit's
reconstruction reads it; it lets the truth of the packets be told from the simulated spans
(:func:`tacit.evaluation.capture_accuracy.label_capture` maps captured spans back to rows).
The packets are returned in time order with the simulated spans, to be written by
:func:`tacit.formats.pcap_write.write_pcap`.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
from hpack import Encoder
from hyperframe.frame import DataFrame, HeadersFrame, SettingsFrame

from tacit.errors import ConfigError
from tacit.formats.pcap_write import build_frame
from tacit.model.packets import ACK, FIN, PSH, SYN
from tacit.model.spans import CLIENT, SERVER, SpanTable

HTTP1, GRPC = "http", "grpc"
REQUEST_ID = "x-request-id"
LOADGEN = "loadgen"
"""The name of the load generator's address in :attr:`AppPackets.addresses`."""
HTTP_PORT, GRPC_PORT = 8080, 50051
_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_ISN = 1_000
_HTTP_ENDPOINT = re.compile(r"[A-Z]+ /\S*$")
ACK_DELAY_NS = 20_000
"""When the receiver of a segment acknowledges it."""


@dataclass
class AppPackets:
    """The frames (Ethernet, IPv4, TCP) and their capture times (ns), in time order; the
    address of every instance (and of the load generator, :data:`LOADGEN`); the services that
    speak gRPC; and the spans they were made from."""

    frames: list[bytes]
    times: list[int]
    addresses: dict[str, str]
    grpc_services: frozenset[str]
    spans: SpanTable
    connections: int = 0

    def parent_of(self) -> dict[str, str | None]:
        """Per request id, the id of the request it was made for (None: from outside): the
        app's log of what caused what, from the spans' ground truth."""
        s = self.spans
        rpc = np.where(s.link >= 0, s.link, np.arange(len(s)))  # a server span's request id
        out: dict[str, str | None] = {}
        for r in np.flatnonzero(s.kind == CLIENT).tolist():
            p = int(s.parent[r])
            out[str(r)] = str(int(rpc[p])) if p >= 0 else None
        for r in np.flatnonzero((s.kind == SERVER) & (s.link < 0)).tolist():
            out[str(r)] = None
        return out

    def service_map(self) -> dict[str, str]:
        """Address → service, as ``tacit capture --services`` reads it."""
        s = self.spans
        named = {LOADGEN: LOADGEN}
        for svc, inst in zip(s.service.tolist(), s.instance.tolist(), strict=True):
            named[s.strings[inst] or ""] = s.strings[svc] or ""
        return {addr: named[inst] for inst, addr in self.addresses.items()}


@dataclass
class _Side:
    addr: str
    port: int
    nxt: int = _ISN


@dataclass
class _Connection:
    ends: tuple[_Side, _Side]
    free_at: int = 0
    stream: int = 1
    encoders: tuple[Encoder, Encoder] = field(default_factory=lambda: (Encoder(), Encoder()))


class _Wire:
    """Frames in the making: TCP segments with their sequence numbers kept per side."""

    def __init__(self) -> None:
        self.packets: list[tuple[int, int, bytes]] = []

    def send(self, t: int, c: _Connection, side: int, payload: bytes, flags: int = ACK | PSH):
        src, dst = c.ends[side], c.ends[1 - side]
        frame = build_frame(
            src.addr,
            dst.addr,
            sport=src.port,
            dport=dst.port,
            seq=src.nxt % 2**32,
            ack=dst.nxt % 2**32 if flags & ACK else 0,
            flags=flags,
            payload=payload,
        )
        self.packets.append((t, len(self.packets), frame))
        src.nxt += len(payload) + bool(flags & (SYN | FIN))
        if payload:  # the receiver's acknowledgement, as it would follow on the wire
            self.send(t + ACK_DELAY_NS, c, 1 - side, b"", ACK)

    def handshake(self, t: int, c: _Connection) -> None:
        self.send(t - 3_000, c, 0, b"", SYN)
        self.send(t - 2_000, c, 1, b"", SYN | ACK)
        self.send(t - 1_000, c, 0, b"", ACK)


def app_packets(
    spans: SpanTable, protocols: Mapping[str, str] | None = None, payload_bytes: int = 64
) -> AppPackets:
    """The packets of every RPC in ``spans`` (see the module docstring). ``protocols``: service
    → ``"http"`` or ``"grpc"``, for the services called; by default the entry services (those
    requests enter) HTTP/1.1 and the rest gRPC."""
    s = spans
    entry = {s.strings[int(v)] for v in s.service[(s.kind == SERVER) & (s.link < 0)]}
    protocols = dict(protocols or {})
    for svc in set(s.strings[int(v)] for v in s.service[s.kind == SERVER]):
        protocols.setdefault(svc or "", HTTP1 if svc in entry else GRPC)
    bad = {k: v for k, v in protocols.items() if v not in (HTTP1, GRPC)}
    if bad:
        raise ConfigError(f"app_packets: protocols must be {HTTP1!r} or {GRPC!r}, got {bad}")
    instances = sorted({s.strings[int(v)] or "" for v in s.instance})
    addresses = {LOADGEN: "10.200.0.1"}
    for k, inst in enumerate(instances):
        addresses[inst] = f"10.{201 + k // 250 // 250}.{k // 250 % 250}.{k % 250 + 1}"
    wire = _Wire()
    pools: dict[tuple[str, str], list[_Connection]] = {}
    ports: dict[str, int] = {}
    body = b"x" * payload_bytes
    rpcs = np.flatnonzero(
        ((s.kind == CLIENT) & (s.link >= 0)) | ((s.kind == SERVER) & (s.link < 0))
    )
    rpcs = rpcs[np.argsort(s.start[rpcs], kind="stable")]
    for r in rpcs.tolist():
        server = int(s.link[r]) if s.kind[r] == CLIENT else r
        caller = s.strings[int(s.instance[r])] if s.kind[r] == CLIENT else LOADGEN
        callee = s.strings[int(s.instance[server])] or ""
        service = s.strings[int(s.service[server])] or ""
        endpoint = s.strings[int(s.endpoint[server])] or ""
        start, end = int(s.start[r]), int(s.end[r])
        key = (caller or "", callee)
        grpc = protocols[service] == GRPC
        conn = _connection(wire, pools.setdefault(key, []), key, addresses, ports, grpc, start)
        conn.free_at = end if not grpc else conn.free_at
        if grpc:
            _grpc_call(wire, conn, service, endpoint, str(r), body, start, end)
        else:
            _http_call(wire, conn, endpoint, str(r), body, start, end)
    wire.packets.sort()
    return AppPackets(
        [f for _, _, f in wire.packets],
        [t for t, _, _ in wire.packets],
        addresses,
        frozenset(k for k, v in protocols.items() if v == GRPC),
        spans,
        sum(len(p) for p in pools.values()),
    )


def _connection(
    wire: _Wire,
    pool: list[_Connection],
    key: tuple[str, str],
    addresses: Mapping[str, str],
    ports: dict[str, int],
    grpc: bool,
    start: int,
) -> _Connection:
    """A connection of ``pool`` free at ``start`` (for gRPC: the one connection), else a new
    one opened just before it."""
    for c in pool:
        if grpc or c.free_at < start:
            return c
    caller, callee = key
    port = ports[caller] = ports.get(caller, 32_767) + 1
    if port > 65_535:
        raise ConfigError(f"app_packets: more than 32,768 connections from {caller}")
    c = _Connection(
        (_Side(addresses[caller], port), _Side(addresses[callee], GRPC_PORT if grpc else HTTP_PORT))
    )
    wire.handshake(start, c)
    if grpc:
        settings = SettingsFrame(0).serialize()
        wire.send(start - 900, c, 0, _PREFACE + settings)
        wire.send(start - 800, c, 1, settings)
    pool.append(c)
    return c


def _http_call(
    wire: _Wire, c: _Connection, endpoint: str, rid: str, body: bytes, start: int, end: int
) -> None:
    """``endpoint`` is the request line's method and path when it reads ``METHOD /path``,
    else the path of a GET."""
    method, path = endpoint.split(" ", 1) if _HTTP_ENDPOINT.match(endpoint) else ("GET", endpoint)
    path = path if path.startswith("/") else f"/{path}"
    request = f"{method} {path} HTTP/1.1\r\nHost: svc\r\n{REQUEST_ID}: {rid}\r\n\r\n".encode()
    response = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    wire.send(start, c, 0, request)
    wire.send(end, c, 1, response)


def _grpc_call(
    wire: _Wire,
    c: _Connection,
    service: str,
    endpoint: str,
    rid: str,
    body: bytes,
    start: int,
    end: int,
) -> None:
    sid = c.stream
    c.stream += 2
    client, server = c.encoders
    method = re.sub(r"\W+", "_", endpoint).strip("_") or "Call"
    path = f"/{service}.{service.capitalize()}/{method}"
    head = [
        (":method", "POST"),
        (":scheme", "http"),
        (":path", path),
        (":authority", service),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
        (REQUEST_ID, rid),
    ]
    message = struct.pack("!BI", 0, len(body)) + body
    wire.send(start, c, 0, _headers(client, sid, head, False) + _data(sid, message))
    reply = _headers(server, sid, [(":status", "200"), ("content-type", "application/grpc")], False)
    trailers = _headers(server, sid, [("grpc-status", "0")], True)
    wire.send(end, c, 1, reply + _data(sid, message, end_stream=False) + trailers)


def _headers(enc: Encoder, sid: int, fields: list[tuple[str, str]], end: bool) -> bytes:
    f = HeadersFrame(sid, enc.encode(fields))
    f.flags.add("END_HEADERS")
    if end:
        f.flags.add("END_STREAM")
    return f.serialize()


def _data(sid: int, message: bytes, end_stream: bool = True) -> bytes:
    f = DataFrame(sid, message)
    if end_stream:
        f.flags.add("END_STREAM")
    return f.serialize()
