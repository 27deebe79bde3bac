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
2. Reassembly, per direction: sequence numbers unwrapped (RFC 9293 §3.4: 32-bit, modulo 2^32)
   into stream offsets; every byte takes the time of the first packet that carried it, so
   retransmitted and duplicate bytes count once; bytes no packet carried are *unseen* gaps, bytes
   whose packet was cut by the snap length are *uncaptured* (their time is known, their content
   not).
3. Parsing, per application protocol (HTTP/1.1 RFC 9112, Redis RESP2/RESP3, memcached text
   protocol), into messages: requests from the client stream, responses from the server
   stream; responses are matched to requests in order (all three protocols answer in request
   order, pipelined or not), skipping requests that expect no answer (memcached ``noreply``).
4. The triggered request of request ``i``: the first later request on the connection whose first
   byte was captured at or after the last byte of ``i``'s response; the *causal pair* gap is the
   time between the two first bytes (Pirate §3).

Nothing is dropped silently: packets that are not TCP, requests without a response, responses
without a request, bytes that could not be parsed (per connection, with the reason), duplicate
and missing bytes are all counted in :class:`TruthAccounting`.

Hand-written parsers rather than h11/hiredis: the truth needs the stream offset of each message's
first and last byte under pipelining, which those libraries do not expose, and must survive
captures with gaps and cut messages without raising.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType

import numpy as np
from numba import njit

from tacit.errors import ConfigError, InputError
from tacit.formats.pcap import PacketRead
from tacit.model.columns import StringPool
from tacit.model.messages import MISSING
from tacit.model.packets import (
    ACK,
    FIN,
    SYN,
    TCP,
    PacketPayloads,
    PacketTable,
)
from tacit.response_latency.flows import DECISIONS, connections
from tacit.runs import run_bounds

HTTP, REDIS, MEMCACHED = "http", "redis", "memcached"
PROTOCOLS = (HTTP, REDIS, MEMCACHED)
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
    for conn, c2s, s2c in tcp_connections(p, server):
        streams = [_reassemble(p, payloads, rows_, acc) for rows_ in (c2s, s2c)]
        conn.protocol = protocol if protocol != "auto" else _detect(conn, streams[0], params)
        index = len(connections)
        connections.append(conn)
        acc.connections[conn.protocol or "unknown"] = (
            acc.connections.get(conn.protocol or "unknown", 0) + 1
        )
        if conn.protocol is None:
            conn.skip("protocol not recognised", streams[0].end + streams[1].end)
        else:
            for r in _exchange(conn, *streams, params, acc):
                rows.append((index, pool.code(r[0]), *r[1:]))
    for c in connections:
        for k, v in c.unparsed.items():
            acc.unparsed[k] = acc.unparsed.get(k, 0) + v
    names = list(_COLUMNS)[:-1]  # all but "triggered", which needs every row
    cols = {k: np.array([r[i] for r in rows], dtype=_COLUMNS[k]) for i, k in enumerate(names)}
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
    cuts = [i for k, i in enumerate(syn) if k > 0 and seq[i] != seq[syn[k - 1]] and i > 0]
    if len(syn) and syn[0] > 0:
        cuts.insert(0, int(syn[0]))
    return np.split(group, cuts)


# --- reassembly --------------------------------------------------------------------------------


@dataclass
class _Stream:
    """One direction of a connection as bytes.

    ``data`` holds the stream from offset 0 (the byte after the SYN, or the first byte seen),
    zeros where nothing was captured. ``piece`` start offsets cut it into runs that one packet
    carried first; ``piece_time`` is that packet's time (:data:`MISSING` for unseen gaps) and
    ``piece_held`` whether its content was captured.
    """

    data: bytes
    piece: np.ndarray
    piece_time: np.ndarray
    piece_held: np.ndarray
    closed: bool
    start_seen: bool

    def __post_init__(self) -> None:
        self.holes = np.concatenate([[0], np.cumsum(~self.piece_held)])

    @property
    def end(self) -> int:
        return len(self.data)

    def hole(self, start: int, stop: int) -> bool:
        """Whether any byte of ``[start, stop)`` is missing from ``data``."""
        if stop <= start:
            return False
        k0, k1 = np.searchsorted(self.piece, [start, stop - 1], side="right") - 1
        return bool(self.holes[k1 + 1] - self.holes[k0])

    def time(self, offset: int) -> int:
        """The capture time of the byte at ``offset`` (:data:`MISSING` when never seen)."""
        return int(self.piece_time[np.searchsorted(self.piece, offset, side="right") - 1])


def _reassemble(
    p: PacketTable, payloads: PacketPayloads, rows: np.ndarray, acc: TruthAccounting
) -> _Stream:
    """The byte stream carried by ``rows`` (one direction, time order)."""
    flags = p.tcp_flags[rows]
    closed = bool(np.any(flags & FIN))
    seq = p.seq[rows].astype(np.int64)
    if not len(rows):
        return _empty_stream(False, False)
    step = (np.diff(seq) + 2**31) % 2**32 - 2**31  # unwrapped: each step within ±2^31
    at = seq[0] + np.concatenate([[0], np.cumsum(step)]) + (flags & SYN != 0)
    wire = np.maximum(p.payload_len[rows].astype(np.int64), 0)
    held = np.minimum(payloads.lengths()[rows], wire)
    syn = np.flatnonzero(flags & SYN)
    data_rows = np.flatnonzero(wire > 0)
    base = int(at[syn[0]]) if len(syn) else int(at[data_rows].min()) if len(data_rows) else 0
    origin = at - base
    lo, hi, cap = origin, origin + wire, origin + held
    early = np.minimum(hi, 0) - np.minimum(lo, 0)  # before the stream start (e.g. keepalives)
    acc.duplicate_bytes += int(early[data_rows].sum())
    lo, cap = np.maximum(lo, 0), np.maximum(cap, 0)
    keep = data_rows[hi[data_rows] > lo[data_rows]]
    if not len(keep):
        return _empty_stream(closed, len(syn) > 0)
    bounds = np.unique(np.concatenate([[0], lo[keep], hi[keep], cap[keep]]))
    first, held_k = _first_cover(
        np.searchsorted(bounds, lo[keep]),
        np.searchsorted(bounds, hi[keep]),
        np.searchsorted(bounds, cap[keep]),
        len(bounds) - 1,
    )
    size = np.diff(bounds)
    seen = first >= 0
    acc.duplicate_bytes += int((hi[keep] - lo[keep]).sum() - size[seen].sum())
    acc.unseen_bytes += int(size[~seen].sum())
    acc.uncaptured_bytes += int(size[seen & ~held_k].sum())
    seg = keep[np.maximum(first, 0)]
    piece_time = np.where(seen, p.time[rows[seg]], MISSING)
    take = np.flatnonzero(held_k)
    src = payloads.offsets[rows[seg[take]]] + bounds[take] - origin[seg[take]]
    gathered = PacketPayloads.gather(payloads.data, src, size[take])
    data = np.zeros(int(bounds[-1]), dtype=np.uint8)
    dest = np.repeat(bounds[take] - gathered.offsets[:-1], size[take])
    data[np.arange(len(gathered.data)) + dest] = gathered.data
    return _Stream(data.tobytes(), bounds[:-1], piece_time, held_k, closed, len(syn) > 0)


def _empty_stream(closed: bool, start_seen: bool) -> _Stream:
    return _Stream(
        b"", np.zeros(1, np.int64), np.full(1, MISSING), np.ones(1, bool), closed, start_seen
    )


@njit(cache=True)
def _first_cover(lo, hi, cap, n):
    """For each of ``n`` elementary intervals, the first segment (in the given, time, order)
    covering it and whether that segment's captured bytes reach over it."""
    first = np.full(n, -1, dtype=np.int64)
    held = np.zeros(n, dtype=np.bool_)
    for s in range(lo.size):
        for k in range(lo[s], hi[s]):
            if first[k] < 0:
                first[k] = s
                held[k] = k < cap[s]
    return first, held


# --- protocols ---------------------------------------------------------------------------------


class _Stop(Exception):
    """Parsing a stream cannot go on at ``at``, for ``reason``."""

    def __init__(self, reason: str, at: int) -> None:
        super().__init__(reason)
        self.reason, self.at = reason, at


_CUT = "message cut by the end of the capture"
_GAP = "message framing in bytes missing from the capture"


def _line(s: _Stream, pos: int, params: TruthParams) -> tuple[bytes, int]:
    """The line at ``pos`` without its CRLF, and the offset after it."""
    eol = s.data.find(b"\r\n", pos, pos + params.max_line)
    if eol < 0:
        raise _Stop(_CUT if s.end - pos < params.max_line else "line too long", pos)
    if s.hole(pos, eol + 2):
        raise _Stop(_GAP, pos)
    return s.data[pos:eol], eol + 2


def _skip(s: _Stream, pos: int, n: int, crlf: bool) -> int:
    """The offset after ``n`` bytes of data at ``pos`` (and their CRLF)."""
    end = pos + n + 2 * crlf
    if end > s.end:
        raise _Stop(_CUT, pos)
    if crlf and (s.hole(end - 2, end) or s.data[end - 2 : end] != b"\r\n"):
        raise _Stop("data block not followed by CRLF", pos)
    return end


@dataclass
class _Message:
    start: int
    end: int
    command: str = ""
    expects: bool = True
    info: object = None


_METHOD = re.compile(rb"([A-Z][A-Z_-]*) (\S+) HTTP/1\.[01]$")
_STATUS = re.compile(rb"HTTP/1\.[01] (\d{3})(?: .*)?$")


def _http_head(s: _Stream, pos: int, params: TruthParams) -> tuple[list[bytes], int]:
    end = s.data.find(b"\r\n\r\n", pos, pos + params.max_line)
    if end < 0:
        raise _Stop(_CUT if s.end - pos < params.max_line else "header block too long", pos)
    if s.hole(pos, end + 4):
        raise _Stop(_GAP, pos)
    return s.data[pos:end].split(b"\r\n"), end + 4


def _http_body(s: _Stream, lines: list[bytes], pos: int, params: TruthParams) -> int | None:
    """The end of a body framed by its headers (RFC 9112 §6.3), None when it has no framing."""
    length: int | None = None
    chunked = False
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        name = name.strip().lower()
        if not sep:
            raise _Stop("malformed header line", pos)
        if name == b"transfer-encoding":
            chunked = value.strip().lower().split(b",")[-1].strip() == b"chunked"
        elif name == b"content-length":
            v = value.strip()
            if not v.isdigit() or (length is not None and int(v) != length):
                raise _Stop("bad Content-Length", pos)
            length = int(v)
    if chunked:
        while True:
            line, pos = _line(s, pos, params)
            size = line.split(b";")[0].strip()
            if not size or any(c not in b"0123456789abcdefABCDEF" for c in size):
                raise _Stop("bad chunk size", pos)
            if int(size, 16) == 0:
                break
            pos = _skip(s, pos, int(size, 16), True)
        while True:  # trailer fields, up to the empty line
            line, pos = _line(s, pos, params)
            if not line:
                return pos
    if length is not None:
        return _skip(s, pos, length, False)
    return None


# The parsers are generators over one stream from offset ``pos``: requests yield _Message,
# responses (first byte, end) per request that expects one, 1xx interim responses included.
# They raise _Stop where they cannot go on; what they yielded before is kept.


def _http_requests(s: _Stream, params: TruthParams, pos: int) -> Iterator[_Message]:
    while pos < s.end:
        lines, body = _http_head(s, pos, params)
        m = _METHOD.match(lines[0])
        if not m:
            raise _Stop("not an HTTP/1.x request line", pos)
        end = _http_body(s, lines, body, params)
        end = body if end is None else end  # a request without framing has no body
        yield _Message(pos, end, m.group(1).decode())
        pos = end


def _http_responses(
    s: _Stream, requests: list[_Message], params: TruthParams, conn: ConnectionTruth, pos: int
) -> Iterator[tuple[int, int]]:
    for req in requests:
        first = pos
        while True:
            if pos >= s.end:
                return
            lines, body = _http_head(s, pos, params)
            m = _STATUS.match(lines[0])
            if not m:
                raise _Stop("not an HTTP/1.x status line", pos)
            status = int(m.group(1))
            if status == 101 or (req.command == "CONNECT" and 200 <= status < 300):
                yield first, body
                raise _Stop("connection switched to another protocol", body)
            if 100 <= status < 200:
                pos = body
                continue
            if req.command == "HEAD" or status in (204, 304):
                pos = body
            else:
                end = _http_body(s, lines, body, params)
                pos = s.end if end is None else end  # delimited by the connection's close
                if end is None and not s.closed:
                    raise _Stop(_CUT, first)
            yield first, pos
            break


def _resp_value(s: _Stream, pos: int, params: TruthParams) -> tuple[int, bytes]:
    """The end of the RESP2/RESP3 value at ``pos`` and its type byte."""
    kind = s.data[pos : pos + 1]
    pending = 1
    while pending:
        line, after = _line(s, pos, params)
        if not line:
            raise _Stop("empty RESP line", pos)
        t, body = line[:1], line[1:]
        pending -= 1
        if t in (b"+", b"-", b":", b"_", b"#", b",", b"("):
            pos = after
            continue
        try:
            n = int(body)
        except ValueError:
            raise _Stop("not a RESP value", pos) from None
        if t in (b"$", b"!", b"="):
            pos = _skip(s, after, n, True) if n >= 0 else after
        elif t in (b"*", b"~", b">", b"%", b"|"):
            pending += max(n, 0) * (2 if t in (b"%", b"|") else 1) + (t == b"|")
            pos = after
        else:
            raise _Stop("not a RESP value", pos)
    return pos, kind


def _redis_requests(s: _Stream, params: TruthParams, pos: int) -> Iterator[_Message]:
    while pos < s.end:
        if s.data[pos : pos + 1] == b"*":  # an array of bulk strings, the command first
            end, _ = _resp_value(s, pos, params)
            _, after = _line(s, pos, params)
            size, after = _line(s, after, params) if after < end else (b"", after)
            n = int(size[1:]) if size[:1] == b"$" and size[1:].isdigit() else 0
            command = s.data[after : after + n]
        else:  # an inline command: words on one line
            line, end = _line(s, pos, params)
            command = (line.split() or [b""])[0]
            if not command:  # an empty line: no command, no reply
                pos = end
                continue
        yield _Message(pos, end, command.decode("latin-1").upper())
        pos = end


def _redis_responses(
    s: _Stream, requests: list[_Message], params: TruthParams, conn: ConnectionTruth, pos: int
) -> Iterator[tuple[int, int]]:
    for _ in requests:
        while pos < s.end:
            end, kind = _resp_value(s, pos, params)
            if kind == b">":  # RESP3 push: out of band, answers no request
                conn.skip("RESP3 push message", end - pos)
                pos = end
                continue
            yield pos, end
            pos = end
            break


_STORAGE = {"set", "add", "replace", "append", "prepend", "cas"}
_RETRIEVAL = {"get", "gets", "gat", "gats"}
_ONE_LINE = {"delete", "incr", "decr", "touch", "flush_all", "verbosity", "version", "mn"}
_META = {"mg", "ms", "md", "ma", "me"}


def _memcached_requests(s: _Stream, params: TruthParams, pos: int) -> Iterator[_Message]:
    while pos < s.end:
        line, end = _line(s, pos, params)
        words = line.decode("latin-1").split()
        if not words:
            raise _Stop("empty memcached command line", pos)
        cmd = words[0]
        expects, kind = True, "line"
        if cmd in _STORAGE:
            need = 6 if cmd == "cas" else 5
            if len(words) < need or not words[4].isdigit():
                raise _Stop(f"bad memcached {cmd} command", pos)
            end = _skip(s, end, int(words[4]), True)
            expects = words[need : need + 1] != ["noreply"]
        elif cmd in _RETRIEVAL:
            kind = "values"
        elif cmd == "stats":
            kind = "stats"
        elif cmd in _META:
            if "q" in words[2:]:
                raise _Stop("meta command with the q flag (reply may be suppressed)", pos)
            if cmd == "ms":
                if len(words) < 3 or not words[2].isdigit():
                    raise _Stop("bad memcached ms command", pos)
                end = _skip(s, end, int(words[2]), True)
            kind = "meta"
        elif cmd == "quit":
            expects = False
        elif cmd in _ONE_LINE:
            expects = words[-1] != "noreply"
        else:
            raise _Stop("unknown memcached command", pos)
        yield _Message(pos, end, cmd, expects, kind)
        pos = end


_MC_ERRORS = (b"ERROR", b"CLIENT_ERROR", b"SERVER_ERROR")


def _memcached_responses(
    s: _Stream, requests: list[_Message], params: TruthParams, conn: ConnectionTruth, pos: int
) -> Iterator[tuple[int, int]]:
    for req in requests:
        if pos >= s.end:
            return
        first = pos
        line, pos = _line(s, pos, params)
        if not line.startswith(_MC_ERRORS):
            if req.info == "values":
                while line != b"END":
                    words = line.split()
                    if len(words) < 4 or words[0] != b"VALUE" or not words[3].isdigit():
                        raise _Stop("bad memcached VALUE line", first)
                    pos = _skip(s, pos, int(words[3]), True)
                    line, pos = _line(s, pos, params)
            elif req.info == "stats":
                while line != b"END":
                    line, pos = _line(s, pos, params)
            elif req.info == "meta" and line.startswith(b"VA "):
                words = line.split()
                if len(words) < 2 or not words[1].isdigit():
                    raise _Stop("bad memcached VA line", first)
                pos = _skip(s, pos, int(words[1]), True)
        yield first, pos


_PARSERS: dict[str, tuple[Callable, Callable]] = {
    HTTP: (_http_requests, _http_responses),
    REDIS: (_redis_requests, _redis_responses),
    MEMCACHED: (_memcached_requests, _memcached_responses),
}

_SNIFF = (
    (HTTP, re.compile(rb"[A-Z][A-Z_-]* \S+ HTTP/1\.[01]\r\n")),
    (REDIS, re.compile(rb"\*\d+\r\n\$\d+\r\n")),
    (
        MEMCACHED,
        re.compile(
            rb"(?:(?:get|gets|gat|gats|delete|incr|decr|touch|set|add|replace"
            rb"|append|prepend|cas|stats|version|flush_all|verbosity|m[gsdane])"
            rb"(?: [^\r\n]*)?)\r\n"
        ),
    ),
    (REDIS, re.compile(rb"[A-Za-z]+(?: [^\r\n]*)?\r\n")),
)


def _detect(conn: ConnectionTruth, client: _Stream, params: TruthParams) -> str | None:
    port = int(conn.server.rsplit(":", 1)[1])
    if port in params.ports:
        return params.ports[port]
    head = client.data[:256]
    for name, pattern in _SNIFF:
        if pattern.match(head):
            return name
    return None


def _exchange(
    conn: ConnectionTruth, c: _Stream, s: _Stream, params: TruthParams, acc: TruthAccounting
) -> list[tuple]:
    """The rows of one connection's requests, with the responses matched to them in order."""
    parse_requests, parse_responses = _PARSERS[conn.protocol]
    requests = _drain(conn, c, "request", parse_requests(c, params, 0))
    answering = [r for r in requests if r.expects]
    pos = 0
    if not c.start_seen and requests:
        # Captured mid-connection: responses that began before the first captured request
        # answer requests the capture missed.
        t0 = c.time(requests[0].start)
        while pos < s.end and MISSING != s.time(pos) < t0:
            early = [_Message(0, 0, "", True, "line")]
            got = _drain(conn, s, "", parse_responses(s, early, params, conn, pos), quiet=True)
            if not got:
                break
            conn.skip("responses to requests before the capture", got[0][1] - pos)
            pos = got[0][1]
    responses = _responses(conn, c, s, answering, params, pos)
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


_RESYNC = {HTTP: re.compile(rb"HTTP/1\.[01] \d{3}[ \r]")}
"""Where a response may start, for protocols whose responses can be found again after a gap."""


def _responses(
    conn: ConnectionTruth,
    c: _Stream,
    s: _Stream,
    answering: list[_Message],
    params: TruthParams,
    pos: int,
) -> list[tuple[int, int] | None]:
    """Per request in ``answering``, its response's (first byte, end), None for none.

    Responses answer requests in order. Where the response stream cannot be parsed on (most
    often: a gap in the capture) and the protocol lets the next response be found again
    (:data:`_RESYNC`), parsing resumes there; that response is taken to answer the latest
    request whose first byte was captured before its own first byte (a response cannot pass
    the capture point before its request; the latest such request is exact when requests wait
    for responses, and may be too late when they are pipelined). The requests in between, the
    one whose response was cut included, have no response.
    """
    parse = _PARSERS[conn.protocol][1]
    out: list[tuple[int, int] | None] = []
    resync = _RESYNC.get(conn.protocol)
    while True:
        try:
            for item in parse(s, answering[len(out) :], params, conn, pos):
                out.append(item)
            break
        except _Stop as e:
            resume = _find(resync, s, e.at + 1) if resync and len(out) < len(answering) else -1
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


def _find(pattern: re.Pattern, s: _Stream, pos: int) -> int:
    """The first match of ``pattern`` at or after ``pos`` that lies in captured bytes."""
    for m in pattern.finditer(s.data, pos):
        if not s.hole(m.start(), m.end()):
            return m.start()
    return -1


def _drain(conn: ConnectionTruth, s: _Stream, what: str, parser, quiet: bool = False) -> list:
    """Everything ``parser`` yields until it ends or stops; a stop's unparsed rest of the stream
    is counted on ``conn`` (unless ``quiet``)."""
    out: list = []
    try:
        for item in parser:
            out.append(item)
    except _Stop as e:
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
