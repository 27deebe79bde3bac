"""Request/response exchanges from both directions of a packet capture.

Every request and response on every TCP connection, with the capture time of its first and
last byte: what the response-latency truth (:mod:`tacit.response_latency.truth`) scores Pirate
against and what spans from packets (:mod:`tacit.formats.capture_spans`) are made of.

Steps:

1. Connections: TCP packets grouped by their two endpoints and told client from server
   (:func:`tacit.formats.connections.connections`, the same decision Pirate's estimator makes,
   so that the truth and the estimates name the same ends); split where a new SYN (a new
   initial sequence number) starts a new incarnation of the same 4-tuple.
2. Reassembly, per direction (:mod:`tacit.formats.tcp_stream`): sequence numbers unwrapped
   (RFC 9293 §3.4: 32-bit, modulo 2^32) into stream offsets; every byte takes the time of the
   first packet that carried it, so retransmitted and duplicate bytes count once; bytes no packet
   carried are *unseen* gaps, bytes whose packet was cut by the snap length are *uncaptured*
   (their time is known, their content not).
3. Parsing, per application protocol (:mod:`tacit.formats.protocols`): HTTP/1.1 (RFC 9112),
   Redis RESP2/RESP3 and the memcached text protocol answer in request order, so responses are
   matched to requests in order, skipping requests that expect no answer (memcached
   ``noreply``); HTTP/2 (RFC 9113, gRPC included) carries each exchange on its own stream.

Nothing is dropped silently: packets that are not TCP, requests without a response, responses
without a request, bytes that could not be parsed (per connection, with the reason), duplicate
and missing bytes are all counted in :class:`ExchangeAccounting`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from itertools import chain
from types import MappingProxyType
from typing import Any

import numpy as np

from tacit.errors import ConfigError, InputError
from tacit.formats.connections import DECISIONS, ConnectionRegistry
from tacit.formats.protocols import (
    CERTAIN,
    EXCHANGES,
    HTTP,
    MEMCACHED,
    PARSERS,
    PROTOCOLS,
    REDIS,
    RESYNC,
    SNIFF,
    Message,
    Requests,
    Stop,
    find,
    http2,
)
from tacit.formats.tcp_stream import ByteStream, StreamBytes, reassemble
from tacit.model.captures import PacketRead
from tacit.model.columns import StringPool
from tacit.model.messages import MISSING
from tacit.model.packets import ACK, SYN, TCP, PacketTable
from tacit.runs import run_bounds, split_at

DEFAULT_PORTS: Mapping[int, str] = MappingProxyType(
    {80: HTTP, 8080: HTTP, 6379: REDIS, 11211: MEMCACHED}
)
"""Server ports whose protocol is known without looking at the bytes."""


UNRECOGNISED = "protocol not recognised"
ENCRYPTED = "encrypted (TLS): no exchange can be read"
_TLS = re.compile(rb"\x16\x03[\x00-\x04]")
"""A TLS handshake record (RFC 8446 §5.1): content type 22, legacy version 3.x."""


@dataclass(frozen=True)
class ExchangeParams:
    """How :func:`read_exchanges` reads a capture.

    - ``ports``: server port → protocol, for choosing the server end and (with protocol "auto")
      the protocol; other connections are told by their first client bytes.
    - ``max_line``: the longest header block (HTTP/1.1), command line (memcached) or RESP line
      looked for before the bytes are counted as unparseable.
    - ``keep_headers``: request header fields (HTTP/1.1 and HTTP/2, names in any case) whose
      values are kept per exchange, e.g. a request id to label spans with.
    """

    ports: Mapping[int, str] = field(default_factory=lambda: DEFAULT_PORTS)
    max_line: int = 1 << 16
    keep_headers: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        bad = {p: v for p, v in self.ports.items() if v not in PROTOCOLS}
        if bad:
            raise ConfigError(f"unknown protocols for ports {bad}; known: {', '.join(PROTOCOLS)}")
        if self.max_line < 16:
            raise ConfigError(f"max_line must be at least 16, got {self.max_line}")
        object.__setattr__(self, "keep_headers", tuple(h.lower() for h in self.keep_headers))


@dataclass
class Connection:
    """One TCP connection: its ends, protocol, and what could not be turned into messages."""

    client: str
    server: str
    protocol: str | None
    how: str
    """How the client and server ends were told apart: one of
    :data:`tacit.formats.connections.DECISIONS`."""
    packets: int = 0
    index: int = -1
    """The connection's index in the :class:`~tacit.formats.connections.ConnectionRegistry`
    that told its ends apart (stable across batches when one registry reads them all)."""
    rows: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    """Its packets: rows of the packet table it was read from, time order."""
    http2: http2.Resume | None = None
    """HTTP/2: where reading it ended (:attr:`.protocols.http2.Streams.resume`)."""
    requests: int = 0
    responses: int = 0
    unparsed: dict[str, int] = field(default_factory=dict)
    """Bytes of either stream that are in no message, by reason."""

    def skip(self, reason: str, nbytes: int) -> None:
        if nbytes > 0:
            self.unparsed[reason] = self.unparsed.get(reason, 0) + nbytes


@dataclass
class ExchangeAccounting:
    """What became of the packets and bytes of a capture.

    Packets: ``tcp_packets`` + ``other_packets`` = every row of the table. Requests:
    ``answered`` + ``unanswered`` + ``noreply`` = ``requests``. Bytes: ``duplicate_bytes`` were
    carried again by a retransmission or overlap; ``unseen_bytes`` lie in gaps no captured
    packet covered; ``uncaptured_bytes`` were cut by the snap length; ``unparsed`` counts bytes
    in no message, by reason.
    """

    packets: int = 0
    tcp_packets: int = 0
    other_packets: int = 0
    connections: dict[str, int] = field(default_factory=dict)
    requests: int = 0
    answered: int = 0
    unanswered: int = 0
    noreply: int = 0
    duplicate_bytes: int = 0
    unseen_bytes: int = 0
    uncaptured_bytes: int = 0
    unparsed: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}


COLUMNS = {
    "connection": np.int32,
    "command": np.int32,
    "target": np.int32,
    "status": np.int32,
    "request_first": np.int64,
    "request_last": np.int64,
    "response_first": np.int64,
    "response_last": np.int64,
    "request_bytes": np.int64,
    "response_bytes": np.int64,
    "expects_response": np.bool_,
    "grpc": np.bool_,
}


@dataclass
class Exchanges:
    """Every request of a capture, one row each, in connection then stream order.

    - ``connection``: index into ``connections``. ``command``: the method or command (code in
      ``strings``: ``GET``, ``PING``, ``get``, ...); ``target``: the HTTP request target (path
      and query; the gRPC ``/package.Service/Method``), NONE for other protocols.
    - ``status``: the HTTP status; for gRPC the ``grpc-status`` of the trailers; -1 when none.
    - ``request_first`` / ``request_last``: capture time (int64 ns) of the request's first and
      last byte; ``response_first`` / ``response_last`` likewise for its response, from the
      first byte of the first response message (an HTTP ``1xx`` included) to the last byte of
      the final one, :data:`MISSING` when there is none (or its bytes were never seen).
    - ``request_bytes`` / ``response_bytes``: message sizes (0 without a response); for HTTP/2
      the payload of the stream's DATA frames.
    - ``expects_response``: False for memcached ``noreply`` (and ``quit``).
    - ``grpc``: a gRPC call (HTTP/2 with content-type ``application/grpc``).
    - ``kept``: per name in :attr:`ExchangeParams.keep_headers`, the request header's value
      (code in ``strings``, NONE when absent).
    """

    strings: StringPool
    connection: np.ndarray
    command: np.ndarray
    target: np.ndarray
    status: np.ndarray
    request_first: np.ndarray
    request_last: np.ndarray
    response_first: np.ndarray
    response_last: np.ndarray
    request_bytes: np.ndarray
    response_bytes: np.ndarray
    expects_response: np.ndarray
    grpc: np.ndarray
    kept: dict[str, np.ndarray]
    connections: list[Connection]
    accounting: ExchangeAccounting

    def __len__(self) -> int:
        return len(self.connection)

    @property
    def answered(self) -> np.ndarray:
        """Requests with a complete response."""
        return self.response_last != MISSING

    def columns(self) -> dict[str, np.ndarray]:
        return {k: getattr(self, k) for k in COLUMNS}

    def take(self, rows: np.ndarray) -> Exchanges:
        """The exchanges at ``rows`` (same strings, connections and accounting)."""
        return Exchanges(
            self.strings,
            **{k: v[rows] for k, v in self.columns().items()},
            kept={k: v[rows] for k, v in self.kept.items()},
            connections=self.connections,
            accounting=self.accounting,
        )


_Found = dict[str, Any]
"""The exchanges of one connection in request order: per name of :data:`COLUMNS` but
``connection`` a column (``command`` and ``target`` as strings, in :data:`_TEXT`), and
``kept``, per name in :attr:`ExchangeParams.keep_headers`, each request's value of it."""
_TEXT = ("command", "target")  # the order in which the strings of a row are interned


def read_exchanges(
    read: PacketRead,
    server: str | None = None,
    protocol: str | Callable[[Connection], str] = "auto",
    params: ExchangeParams | None = None,
    registry: ConnectionRegistry | None = None,
    resume: Mapping[int, http2.Resume] | None = None,
) -> Exchanges:
    """Every request and response of every TCP connection in ``read`` (which must have been read
    with ``payloads=True``).

    ``server`` names the server end (``ADDR``, ``ADDR:PORT``, ``[V6]:PORT`` or a bare port), for
    connections without a SYN; ``protocol`` is one of :data:`PROTOCOLS` for every connection, or
    "auto" (by server port, else by the first client bytes), or a function of the connection
    that gives one of those. ``registry`` (default: a new one for ``server``) tells the ends of
    each connection apart: one registry over time-ordered batches keeps each connection's
    direction and index from the batch it first appeared in. ``resume`` gives, by connection
    index, where an earlier reading of an HTTP/2 connection ended, its packets here starting
    there.
    """
    params = params or ExchangeParams()
    if isinstance(protocol, str) and protocol != "auto" and protocol not in PROTOCOLS:
        raise ConfigError(f"unknown protocol {protocol!r}; expected auto or {', '.join(PROTOCOLS)}")
    if read.payloads is None:
        source = read.packets.sources[0] if read.packets.sources else None
        raise InputError("exchanges need payloads: read with payloads=True", path=source)
    p, payloads = read.packets, read.payloads
    acc = ExchangeAccounting(packets=len(p))
    acc.tcp_packets = int((p.proto == TCP).sum())
    acc.other_packets = len(p) - acc.tcp_packets
    found: list[tuple[int, _Found]] = []
    conns: list[Connection] = []
    counts = StreamBytes()
    for conn, c2s, s2c in tcp_connections(p, server, registry):
        up, down = (reassemble(p, payloads, rows_, counts) for rows_ in (c2s, s2c))
        given = protocol if isinstance(protocol, str) else protocol(conn)
        conn.protocol = given if given != "auto" else _detect(conn, up, params)
        index = len(conns)
        conns.append(conn)
        name = conn.protocol or "unknown"
        acc.connections[name] = acc.connections.get(name, 0) + 1
        if conn.protocol is None:
            conn.skip(ENCRYPTED if _TLS.match(up.data) else UNRECOGNISED, up.end + down.end)
            continue
        if conn.protocol in EXCHANGES:
            conn.http2 = resume.get(conn.index) if resume else None
            got = _streams(conn, up, down, params.keep_headers)
        else:
            got = _in_order(conn, conn.protocol, up, down, params)
        expects, answered = got["expects_response"], got["response_last"] != MISSING
        conn.requests, conn.responses = len(expects), int(answered.sum())
        acc.requests += conn.requests
        acc.noreply += int((~expects).sum())
        acc.answered += int((expects & answered).sum())
        acc.unanswered += int((expects & ~answered).sum())
        found.append((index, got))
    acc.duplicate_bytes, acc.unseen_bytes = counts.duplicate, counts.unseen
    acc.uncaptured_bytes = counts.uncaptured
    for c in conns:
        for k, v in c.unparsed.items():
            acc.unparsed[k] = acc.unparsed.get(k, 0) + v
    return _table(found, params.keep_headers, conns, acc)


def _table(
    found: list[tuple[int, _Found]],
    keep: tuple[str, ...],
    conns: list[Connection],
    acc: ExchangeAccounting,
) -> Exchanges:
    sizes = [len(got["expects_response"]) for _, got in found]
    arrays = {"connection": np.repeat([index for index, _ in found], sizes).astype(np.int32)}
    for k in list(COLUMNS)[1:]:
        if k not in _TEXT:
            arrays[k] = np.concatenate([got[k] for _, got in found] or [[]]).astype(COLUMNS[k])
    text = [[v for _, got in found for v in got[k]] for k in _TEXT]
    text += [[v for _, got in found for v in got["kept"][k]] for k in keep]
    # Interned row by row (command, target, kept values), as the strings come in the capture.
    pool = StringPool()
    code = {v: pool.code(v) for v in dict.fromkeys(chain.from_iterable(zip(*text, strict=True)))}
    arrays["command"], arrays["target"], *kept = (
        np.fromiter(map(code.__getitem__, v), np.int32, len(v)) for v in text
    )
    return Exchanges(
        pool, **arrays, kept=dict(zip(keep, kept, strict=True)), connections=conns, accounting=acc
    )


def tcp_connections(
    p: PacketTable, server: str | None = None, registry: ConnectionRegistry | None = None
) -> list[tuple[Connection, np.ndarray, np.ndarray]]:
    """The TCP connections of ``p`` in the order they start: each with its client → server and
    server → client rows (time order). See the module docstring, step 1, and
    :func:`read_exchanges` for ``server`` and ``registry``."""
    conns = (registry or ConnectionRegistry(server)).assign(p)
    rows = np.flatnonzero((conns.row_connection >= 0) & (p.proto == TCP))
    rows = rows[np.lexsort((p.time[rows], conns.row_connection[rows]))]
    starts, sizes = run_bounds(conns.row_connection[rows])
    table = conns.table
    out = []
    for start, size in zip(starts.tolist(), sizes.tolist(), strict=True):
        group = rows[start : start + size]
        c = int(conns.row_connection[group[0]])
        for members in _incarnations(p, group):
            up = conns.to_server[members]
            conn = Connection(table.client(c), table.server(c), None, DECISIONS[table.decided[c]])
            conn.packets, conn.index, conn.rows = len(members), c, members
            out.append((conn, members[up], members[~up]))
    out.sort(key=lambda item: p.time[np.concatenate(item[1:])].min())
    return out


def _incarnations(p: PacketTable, group: np.ndarray) -> list[np.ndarray]:
    """The rows of one 4-tuple (time order) cut where a SYN with a new initial sequence number
    opens a new incarnation."""
    flags, seq = p.tcp_flags[group], p.seq[group]
    syn = np.flatnonzero((flags & (SYN | ACK)) == SYN)
    cuts = [int(i) for k, i in enumerate(syn) if k > 0 and seq[i] != seq[syn[k - 1]] and i > 0]
    if len(syn) and syn[0] > 0:
        cuts.insert(0, int(syn[0]))
    return split_at(group, cuts)


def _detect(conn: Connection, client: ByteStream, params: ExchangeParams) -> str | None:
    head = client.data[:256]
    port = int(conn.server.rsplit(":", 1)[1])
    by_port = params.ports.get(port)
    for name, pattern in SNIFF if by_port is None else CERTAIN:
        if pattern.match(head):
            return name
    return by_port


def _streams(conn: Connection, c: ByteStream, s: ByteStream, keep: tuple[str, ...]) -> _Found:
    """The exchanges of a multiplexed connection (HTTP/2, the one protocol of
    :data:`EXCHANGES`: one per stream), in request order."""
    xs = http2.columns(c, s, conn, keep, resume=conn.http2)
    conn.http2 = xs.resume
    first, end = xs.request_start, xs.request_end
    response_first, response_end = xs.response_start, xs.response_end
    answered = (response_first >= 0) & (response_end >= 0)
    grpc = xs.grpc
    return {
        "command": xs.text(xs.method),
        "target": [v or None for v in xs.text(xs.path)],
        "status": np.where(grpc, xs.grpc_status, xs.status),
        "request_first": c.times(first),
        "request_last": np.where(end >= 0, c.times(end - 1), MISSING),
        "response_first": np.where(response_first >= 0, s.times(response_first), MISSING),
        "response_last": np.where(answered, s.times(response_end - 1), MISSING),
        "request_bytes": xs.request_bytes,
        "response_bytes": xs.response_bytes,
        "expects_response": np.ones(len(xs), dtype=bool),
        "grpc": grpc,
        "kept": {k: xs.text(xs.kept[k], None) for k in keep},
    }


def _in_order(
    conn: Connection, protocol: str, c: ByteStream, s: ByteStream, params: ExchangeParams
) -> _Found:
    """The exchanges of one connection of a protocol that answers in order (``protocol``): the
    requests with the responses matched to them in order."""
    parse_requests, parse_responses = PARSERS[protocol]
    requests = Requests.of(_drain(conn, c, "request", parse_requests(c, params.max_line, 0)))
    expects = np.array(requests.expects, dtype=bool)
    answering = requests if expects.all() else requests.take(np.flatnonzero(expects).tolist())
    pos = 0
    if not c.start_seen and requests:
        # Captured mid-connection: responses that began before the first captured request
        # answer requests the capture missed.
        t0 = c.time(requests.start[0])
        while pos < s.end and MISSING != s.time(pos) < t0:
            early = Requests.of([Message(0, 0, "", True, "line")])
            got = _drain(
                conn, s, "", parse_responses(s, early, params.max_line, conn, pos), quiet=True
            )
            if not got:
                break
            conn.skip("responses to requests before the capture", got[0][1] - pos)
            pos = got[0][1]
    responses = _responses(conn, protocol, c, s, answering, params, pos)
    fields = [requests.fields_of(i) for i in range(len(requests))] if params.keep_headers else []
    first = np.array(requests.start, dtype=np.int64)
    end = np.array(requests.end, dtype=np.int64)
    rows = np.flatnonzero(expects)[: len(responses)][[r is not None for r in responses]]
    answer = np.array([r for r in responses if r is not None], dtype=np.int64).reshape(-1, 3)
    status, response_first, response_last, response_bytes = (
        np.full(len(requests), v, dtype=np.int64) for v in (-1, MISSING, MISSING, 0)
    )
    status[rows] = answer[:, 2]
    response_first[rows] = s.times(answer[:, 0])
    response_last[rows] = s.times(answer[:, 1] - 1)
    response_bytes[rows] = answer[:, 1] - answer[:, 0]
    return {
        "command": requests.command,
        "target": requests.target,
        "status": status,
        "request_first": c.times(first),
        "request_last": c.times(end - 1),
        "response_first": response_first,
        "response_last": response_last,
        "request_bytes": end - first,
        "response_bytes": response_bytes,
        "expects_response": expects,
        "grpc": np.zeros(len(requests), dtype=bool),
        "kept": _kept(fields, params.keep_headers),
    }


def _responses(
    conn: Connection,
    protocol: str,
    c: ByteStream,
    s: ByteStream,
    answering: Requests,
    params: ExchangeParams,
    pos: int,
) -> list[tuple[int, int, int] | None]:
    """Per request in ``answering``, its response's (first byte, end, status), None for none.

    Responses answer requests in order. Where the response stream cannot be parsed on (most
    often: a gap in the capture) and the protocol lets the next response be found again
    (:data:`RESYNC`), parsing resumes there; that response is taken to answer the latest
    request whose first byte was captured before its own first byte (a response cannot pass
    the capture point before its request; the latest such request is exact when requests wait
    for responses, and may be too late when they are pipelined). The requests in between, the
    one whose response was cut included, have no response.
    """
    parse = PARSERS[protocol][1]
    out: list[tuple[int, int, int] | None] = []
    resync = RESYNC.get(protocol)
    while True:
        try:
            rest = answering.take(range(len(out), len(answering))) if out else answering
            for item in parse(s, rest, params.max_line, conn, pos):
                out.append(item)
            break
        except Stop as e:
            resume = find(resync, s, e.at + 1) if resync and len(out) < len(answering) else -1
            if resume < 0:
                conn.skip(f"response: {e.reason}", s.end - e.at)
                break
            conn.skip(f"response: {e.reason} (parsing resumed after it)", resume - e.at)
            t = s.time(resume)
            before = np.flatnonzero(c.times(np.array(answering.start[len(out) + 1 :])) < t)
            out.extend([None] * (1 + (int(before[-1]) if len(before) else 0)))
            pos = resume
    done = max((r[1] for r in out if r), default=pos)
    if len(out) >= len(answering) and done < s.end:
        conn.skip("responses to no parsed request", s.end - done)
    return out[: len(answering)]


def _kept(
    fields: list[Mapping[str, str] | None], keep: tuple[str, ...]
) -> dict[str, list[str | None]]:
    """Per name in ``keep``, each request's value of that header field (None without one)."""
    return {k: [f.get(k) if f else None for f in fields] for k in keep}


def _drain(conn: Connection, s: ByteStream, what: str, parser, quiet: bool = False) -> list:
    """Everything ``parser`` yields until it ends or stops; a stop's unparsed rest of the stream
    is counted on ``conn`` (unless ``quiet``)."""
    out: list = []
    try:
        for item in parser:
            out.append(item)
    except Stop as e:
        if not quiet:
            conn.skip(f"{what}: {e.reason}", s.end - e.at)
    return out
