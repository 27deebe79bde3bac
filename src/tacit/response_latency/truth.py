"""Ground truth for response latency, from both directions of a packet capture.

Pirate (Vannarth Shobhana et al., "Measuring Response Latencies Under Asymmetric Routing",
arXiv 2505.14358) sees only client → server packets and estimates, per connection, the time from
a request to the request its response triggered (§3, the *causal pair*), as a proxy for the
response latency the client sees (§2, Fig. 1: first byte of the request to last byte of the
response). This module computes what it is scored against from a capture that holds both
directions: every request and response on every TCP connection, with the capture time of its
first and last byte.

Steps:

1. Connections: TCP packets grouped by their two endpoints and told client from server exactly
   as the estimator does (:func:`tacit.response_latency.flows.connections`), so that the truth
   and the estimates name the same ends; split where a new SYN (a new initial sequence number)
   starts a new incarnation of the same 4-tuple.
2. Reassembly, per direction (:mod:`tacit.formats.tcp_stream`): sequence numbers unwrapped
   (RFC 9293 §3.4: 32-bit, modulo 2^32) into stream offsets; every byte takes the time of the
   first packet that carried it, so retransmitted and duplicate bytes count once; bytes no packet
   carried are *unseen* gaps, bytes whose packet was cut by the snap length are *uncaptured*
   (their time is known, their content not).
3. Parsing, per application protocol (:mod:`tacit.formats.protocols`: HTTP/1.1 RFC 9112, Redis
   RESP2/RESP3, memcached text protocol), into messages: requests from the client stream,
   responses from the server stream; responses are matched to requests in order (all three
   protocols answer in request order, pipelined or not), skipping requests that expect no
   answer (memcached ``noreply``).
4. The triggered request of request ``i``: the first later request on the connection whose first
   byte was captured at or after the last byte of ``i``'s response; the *causal pair* gap is the
   time between the two first bytes (Pirate §3).

Nothing is dropped silently: packets that are not TCP, requests without a response, responses
without a request, bytes that could not be parsed (per connection, with the reason), duplicate
and missing bytes are all counted in :class:`TruthAccounting`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType

import numpy as np
from numba import njit

from tacit.errors import ConfigError, InputError
from tacit.formats.protocols import (
    HTTP,
    MEMCACHED,
    PARSERS,
    PROTOCOLS,
    REDIS,
    RESYNC,
    SNIFF,
    Message,
    Stop,
    find,
)
from tacit.formats.tcp_stream import ByteStream, StreamBytes, reassemble
from tacit.model.captures import PacketRead
from tacit.model.columns import StringPool
from tacit.model.messages import MISSING
from tacit.model.packets import (
    ACK,
    SYN,
    TCP,
    PacketTable,
)
from tacit.response_latency.flows import DECISIONS, connections
from tacit.runs import run_bounds

DEFAULT_PORTS: Mapping[int, str] = MappingProxyType(
    {80: HTTP, 8080: HTTP, 6379: REDIS, 11211: MEMCACHED}
)
"""Server ports whose protocol is known without looking at the bytes."""


@dataclass(frozen=True)
class TruthParams:
    """How :func:`request_truth` reads a capture.

    - ``ports``: server port → protocol, for choosing the server end and (with protocol "auto")
      the protocol; other connections are told by their first client bytes.
    - ``max_line``: the longest header block (HTTP), command line (memcached) or RESP line
      looked for before the bytes are counted as unparseable.
    """

    ports: Mapping[int, str] = field(default_factory=lambda: DEFAULT_PORTS)
    max_line: int = 1 << 16

    def __post_init__(self) -> None:
        bad = {p: v for p, v in self.ports.items() if v not in PROTOCOLS}
        if bad:
            raise ConfigError(f"unknown protocols for ports {bad}; known: {', '.join(PROTOCOLS)}")
        if self.max_line < 16:
            raise ConfigError(f"max_line must be at least 16, got {self.max_line}")


@dataclass
class ConnectionTruth:
    """One TCP connection: its ends, protocol, and what could not be turned into messages."""

    client: str
    server: str
    protocol: str | None
    how: str
    """How the client and server ends were told apart: one of
    :data:`tacit.response_latency.flows.DECISIONS`."""
    packets: int = 0
    requests: int = 0
    responses: int = 0
    unparsed: dict[str, int] = field(default_factory=dict)
    """Bytes of either stream that are in no message, by reason."""

    def skip(self, reason: str, nbytes: int) -> None:
        if nbytes > 0:
            self.unparsed[reason] = self.unparsed.get(reason, 0) + nbytes


@dataclass
class TruthAccounting:
    """What became of the packets and bytes of a capture.

    Packets: ``tcp_packets`` + ``other_packets`` = every row of the table. Requests:
    ``answered`` + ``unanswered`` + ``noreply`` = ``requests``. Bytes: ``duplicate_bytes`` were
    carried again by a retransmission or overlap; ``unseen_bytes`` lie in gaps no captured packet
    covered; ``uncaptured_bytes`` were cut by the snap length; ``unparsed`` counts bytes in no
    message, by reason.
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


_COLUMNS = {
    "connection": np.int32,
    "command": np.int32,
    "request_first": np.int64,
    "request_last": np.int64,
    "response_first": np.int64,
    "response_last": np.int64,
    "request_bytes": np.int64,
    "response_bytes": np.int64,
    "expects_response": np.bool_,
    "triggered": np.int64,
}


@dataclass
class RequestTruth:
    """Every request of a capture, one row each, in connection then stream order.

    - ``connection``: index into ``connections``. ``command``: the method or command (code in
      ``strings``: ``GET``, ``PING``, ``get``, ...).
    - ``request_first`` / ``request_last``: capture time (int64 ns) of the request's first and
      last byte; ``response_first`` / ``response_last`` likewise for its response, from the
      first byte of the first response message (an HTTP ``1xx`` included) to the last byte of
      the final one, :data:`MISSING` when there is none (or its bytes were never seen).
    - ``request_bytes`` / ``response_bytes``: message sizes (0 without a response).
    - ``expects_response``: False for memcached ``noreply`` (and ``quit``).
    - ``triggered``: the row of the request this one's response triggered (module docstring,
      step 4), or -1.
    """

    strings: StringPool
    connection: np.ndarray
    command: np.ndarray
    request_first: np.ndarray
    request_last: np.ndarray
    response_first: np.ndarray
    response_last: np.ndarray
    request_bytes: np.ndarray
    response_bytes: np.ndarray
    expects_response: np.ndarray
    triggered: np.ndarray
    connections: list[ConnectionTruth]
    accounting: TruthAccounting

    def __len__(self) -> int:
        return len(self.connection)

    @property
    def answered(self) -> np.ndarray:
        """Requests with a complete response."""
        return self.response_last != MISSING

    @property
    def response_latency(self) -> np.ndarray:
        """Last byte of the response − first byte of the request (ns; NaN without one)."""
        return _gap(self.request_first, self.response_last)

    @property
    def triggered_gap(self) -> np.ndarray:
        """First byte of the triggered request − first byte of this one (ns; NaN without one):
        the causal pair gap Pirate estimates (§3)."""
        nxt = np.where(self.triggered >= 0, self.request_first[self.triggered], MISSING)
        return _gap(self.request_first, nxt)

    def as_dict(self) -> dict:
        """A JSON-ready summary: accounting, per-protocol latency quantiles, connections."""
        lat = self.response_latency
        out: dict = {"accounting": self.accounting.as_dict(), "latency_ms": {}}
        protocols = np.array([c.protocol or "" for c in self.connections] + [""])
        proto = protocols[self.connection] if len(self) else protocols[:0]
        for name in sorted(set(proto.tolist())):
            v = lat[(proto == name) & ~np.isnan(lat)] / 1e6
            if len(v):
                q = np.percentile(v, [50, 90, 99])
                out["latency_ms"][name] = {
                    "count": len(v),
                    "mean": round(float(v.mean()), 3),
                    **{
                        k: round(float(x), 3) for k, x in zip(("p50", "p90", "p99"), q, strict=True)
                    },
                }
        gaps = self.triggered_gap
        out["causal_pairs"] = int((~np.isnan(gaps)).sum())
        out["connections"] = [
            {k: getattr(c, k) for k in ("client", "server", "protocol", "how", "requests")}
            | ({"unparsed": c.unparsed} if c.unparsed else {})
            for c in self.connections
        ]
        return out


def _gap(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    ok = (start != MISSING) & (end != MISSING)
    return np.where(ok, (end - np.where(ok, start, 0)).astype(np.float64), np.nan)


def request_truth(
    read: PacketRead,
    server: str | None = None,
    protocol: str = "auto",
    params: TruthParams | None = None,
) -> RequestTruth:
    """Every request and response of every TCP connection in ``read`` (which must have been read
    with ``payloads=True``).

    ``server`` names the server end (``ADDR``, ``ADDR:PORT``, ``[V6]:PORT`` or a bare port), for
    connections without a SYN; ``protocol`` is one of :data:`PROTOCOLS` for every connection, or
    "auto" (by server port, else by the first client bytes).
    """
    params = params or TruthParams()
    if protocol != "auto" and protocol not in PROTOCOLS:
        raise ConfigError(f"unknown protocol {protocol!r}; expected auto or {', '.join(PROTOCOLS)}")
    if read.payloads is None:
        source = read.packets.sources[0] if read.packets.sources else None
        raise InputError("request truth needs payloads: read with payloads=True", path=source)
    p, payloads = read.packets, read.payloads
    acc = TruthAccounting(packets=len(p))
    acc.tcp_packets = int((p.proto == TCP).sum())
    acc.other_packets = len(p) - acc.tcp_packets
    pool = StringPool()
    rows: list[tuple] = []
    connections: list[ConnectionTruth] = []
    counts = StreamBytes()
    for conn, c2s, s2c in tcp_connections(p, server):
        up, down = (reassemble(p, payloads, rows_, counts) for rows_ in (c2s, s2c))
        conn.protocol = protocol if protocol != "auto" else _detect(conn, up, params)
        index = len(connections)
        connections.append(conn)
        acc.connections[conn.protocol or "unknown"] = (
            acc.connections.get(conn.protocol or "unknown", 0) + 1
        )
        if conn.protocol is None:
            conn.skip("protocol not recognised", up.end + down.end)
        else:
            for r in _exchange(conn, conn.protocol, up, down, params, acc):
                rows.append((index, pool.code(r[0]), *r[1:]))
    acc.duplicate_bytes, acc.unseen_bytes = counts.duplicate, counts.unseen
    acc.uncaptured_bytes = counts.uncaptured
    for c in connections:
        for k, v in c.unparsed.items():
            acc.unparsed[k] = acc.unparsed.get(k, 0) + v
    names = list(_COLUMNS)[:-1]  # all but "triggered", which needs every row
    cols: dict[str, np.ndarray] = {
        k: np.array([r[i] for r in rows], dtype=_COLUMNS[k]) for i, k in enumerate(names)
    }
    cols["triggered"] = _triggered(cols["connection"], cols["request_first"], cols["response_last"])
    return RequestTruth(pool, **cols, connections=connections, accounting=acc)


def tcp_connections(
    p: PacketTable, server: str | None = None
) -> list[tuple[ConnectionTruth, np.ndarray, np.ndarray]]:
    """The TCP connections of ``p`` in the order they start: each with its client → server and
    server → client rows (time order). See the module docstring, step 1, and
    :func:`request_truth` for ``server``."""
    conns = connections(p, server)
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
            conn = ConnectionTruth(
                table.client(c), table.server(c), None, DECISIONS[table.decided[c]]
            )
            conn.packets = len(members)
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
    return np.split(group, cuts)


def _detect(conn: ConnectionTruth, client: ByteStream, params: TruthParams) -> str | None:
    port = int(conn.server.rsplit(":", 1)[1])
    if port in params.ports:
        return params.ports[port]
    head = client.data[:256]
    for name, pattern in SNIFF:
        if pattern.match(head):
            return name
    return None


def _exchange(
    conn: ConnectionTruth,
    protocol: str,
    c: ByteStream,
    s: ByteStream,
    params: TruthParams,
    acc: TruthAccounting,
) -> list[tuple]:
    """The rows of one connection's requests (in ``protocol``), with the responses matched to
    them in order."""
    parse_requests, parse_responses = PARSERS[protocol]
    requests = _drain(conn, c, "request", parse_requests(c, params.max_line, 0))
    answering = [r for r in requests if r.expects]
    pos = 0
    if not c.start_seen and requests:
        # Captured mid-connection: responses that began before the first captured request
        # answer requests the capture missed.
        t0 = c.time(requests[0].start)
        while pos < s.end and MISSING != s.time(pos) < t0:
            early = [Message(0, 0, "", True, "line")]
            got = _drain(
                conn, s, "", parse_responses(s, early, params.max_line, conn, pos), quiet=True
            )
            if not got:
                break
            conn.skip("responses to requests before the capture", got[0][1] - pos)
            pos = got[0][1]
    responses = _responses(conn, protocol, c, s, answering, params, pos)
    conn.requests, conn.responses = len(requests), sum(r is not None for r in responses)
    out = []
    answers = iter(responses)
    for req in requests:
        resp = next(answers, None) if req.expects else None
        rf = s.time(resp[0]) if resp else MISSING
        rl = s.time(resp[1] - 1) if resp else MISSING
        acc.requests += 1
        if not req.expects:
            acc.noreply += 1
        elif rl != MISSING:
            acc.answered += 1
        else:
            acc.unanswered += 1
        out.append(
            (
                req.command,
                c.time(req.start),
                c.time(req.end - 1),
                rf,
                rl,
                req.end - req.start,
                resp[1] - resp[0] if resp else 0,
                req.expects,
            )
        )
    return out


def _responses(
    conn: ConnectionTruth,
    protocol: str,
    c: ByteStream,
    s: ByteStream,
    answering: list[Message],
    params: TruthParams,
    pos: int,
) -> list[tuple[int, int] | None]:
    """Per request in ``answering``, its response's (first byte, end), None for none.

    Responses answer requests in order. Where the response stream cannot be parsed on (most
    often: a gap in the capture) and the protocol lets the next response be found again
    (:data:`RESYNC`), parsing resumes there; that response is taken to answer the latest
    request whose first byte was captured before its own first byte (a response cannot pass
    the capture point before its request; the latest such request is exact when requests wait
    for responses, and may be too late when they are pipelined). The requests in between, the
    one whose response was cut included, have no response.
    """
    parse = PARSERS[protocol][1]
    out: list[tuple[int, int] | None] = []
    resync = RESYNC.get(protocol)
    while True:
        try:
            for item in parse(s, answering[len(out) :], params.max_line, conn, pos):
                out.append(item)
            break
        except Stop as e:
            resume = find(resync, s, e.at + 1) if resync and len(out) < len(answering) else -1
            if resume < 0:
                conn.skip(f"response: {e.reason}", s.end - e.at)
                break
            conn.skip(f"response: {e.reason} (parsing resumed after it)", resume - e.at)
            t = s.time(resume)
            before = [i for i, r in enumerate(answering[len(out) + 1 :]) if c.time(r.start) < t]
            out.extend([None] * (1 + max(before, default=0)))
            pos = resume
    done = max((r[1] for r in out if r), default=pos)
    if len(out) >= len(answering) and done < s.end:
        conn.skip("responses to no parsed request", s.end - done)
    return out[: len(answering)]


def _drain(conn: ConnectionTruth, s: ByteStream, what: str, parser, quiet: bool = False) -> list:
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


@njit(cache=True)
def _next_request(connection, first, last, out):
    n = connection.size
    for i in range(n):
        if last[i] == MISSING:
            continue
        j = i + 1
        while j < n and connection[j] == connection[i] and first[j] < last[i]:
            j += 1
        if j < n and connection[j] == connection[i]:
            out[i] = j


def _triggered(connection: np.ndarray, first: np.ndarray, last: np.ndarray) -> np.ndarray:
    out = np.full(len(connection), -1, dtype=np.int64)
    if len(out):
        _next_request(connection, first, last, out)
    return out
