"""Spans from packets that keep coming (a live capture, a capture file read in pieces), as
:mod:`tacit.formats.capture_spans` makes them from a whole capture.

:func:`~tacit.formats.exchanges.read_exchanges` parses each connection from its start. A source
that never ends comes in batches, and a connection's exchanges run across them, so
:class:`CaptureSpanStream` keeps, per connection, the packets its exchanges may still need and
reads them again with the next batch (one :class:`~tacit.formats.connections.ConnectionRegistry`
for all batches, so a connection keeps the direction it was first read with).
Each exchange's spans are given once, in the batch where its response is complete:

- A connection is cut where it was last *quiet*: before the first byte of a request when every
  earlier exchange had ended, or after its last packet when every exchange has ended, every
  byte of both directions parsed. Both directions are at a message boundary there (HTTP/2: a
  frame boundary with no stream open); the packets before go, and the rest is read as a stream
  that starts there. HTTP/2 goes on with the header compression state (RFC 7541: each
  direction's dynamic table) it had at the cut
  (:class:`~tacit.formats.protocols.http2.Resume`), read again from the kept packets up to a
  cut before their end.
- A connection with a request that has waited ``max_carry_ns`` for its response (one that never
  came, or was lost to the capture) is cut all the same: its complete exchanges are given, the
  others counted as without response, its unparsed bytes counted by reason, and its next
  packets read from wherever they start (HTTP/2: counted unread, as in a capture begun
  mid-connection). So is one whose bytes have not parsed for that long.
- An HTTP/2 connection that holds more than ``max_http2_bytes`` without a quiet point is given
  up, and its later packets are counted, not read. One with nothing new for
  :data:`MAX_HTTP2_IDLE_NS` is forgotten (its closing may not have been captured).
- A connection of no known protocol is counted (its bytes, by reason) and not kept; before its
  first bytes, its handshake is kept (for ``max_carry_ns`` of silence at most).

The capture's timestamps are the clock (a file read faster than real time behaves as when it
was captured), moved on by the caller for a live source that falls quiet.
:meth:`CaptureSpanStream.flush` gives up everything at the end of the source.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tacit.formats.capture_spans import (
    CaptureAccounting,
    CapturedSpans,
    ServiceMap,
    spans_from_exchanges,
)
from tacit.formats.connections import FORGET_NS, MIN_COMPACT, ConnectionRegistry
from tacit.formats.exchanges import Connection, ExchangeParams, Exchanges, read_exchanges
from tacit.formats.protocols.http2 import Resume
from tacit.model.captures import PacketAccounting, PacketRead
from tacit.model.messages import MISSING
from tacit.model.packets import FIN, RST, TCP, PacketPayloads, PacketTable, concat_packets

NS = 1_000_000_000
LATER = np.iinfo(np.int64).max
MAX_CARRY_NS = 5 * NS
"""How long a connection may stay short of quiet before it is given up (capture time). Below
the 7 s lateness of ``tacit serve``'s online reconstruction, so that given spans are not late."""
MAX_HTTP2_BYTES = 16 * 1024 * 1024
"""Payload bytes of one HTTP/2 connection kept (and read again with every batch) while it has
no quiet point."""
MAX_HTTP2_IDLE_NS = 300 * NS
"""An HTTP/2 connection with nothing new for this long is forgotten; were it used again, it
would be read as a capture begun mid-connection."""
HTTP2 = "http2"
GIVEN_UP_HTTP2 = "HTTP/2 connection longer than the bytes kept for it; later packets not read"


@dataclass
class StreamAccounting:
    """What became of the packets so far: ``packets`` read, of which ``tcp_packets``;
    ``exchanges`` by fate (:class:`~tacit.formats.capture_spans.CaptureAccounting`), the bytes
    of connections given up that were in no exchange (``unparsed``, by reason), and
    ``ignored_packets``: packets of HTTP/2 connections given up."""

    packets: int = 0
    tcp_packets: int = 0
    exchanges: CaptureAccounting = field(default_factory=CaptureAccounting)
    unparsed: dict[str, int] = field(default_factory=dict)
    ignored_packets: int = 0

    def add(self, got: CaptureAccounting) -> None:
        e = self.exchanges
        e.exchanges += got.exchanges
        e.paired += got.paired
        e.spans += got.spans
        for reason, n in got.left_out.items():
            e.left_out[reason] = e.left_out.get(reason, 0) + n

    def as_dict(self) -> dict:
        return {
            "packets": self.packets,
            "tcp_packets": self.tcp_packets,
            "exchanges": self.exchanges.as_dict(),
            "unparsed_bytes": dict(self.unparsed),
            "ignored_packets": self.ignored_packets,
        }


@dataclass
class _Kept:
    """A connection whose packets are kept: which of its exchanges (in the order the kept
    packets give them) were given, and the capture time of its oldest and newest packet."""

    given: np.ndarray
    since: int
    last: int


class CaptureSpanStream:
    """Spans of the exchanges in batches of packets (read with payloads), in time order.

    ``services`` names the ends, ``protocol`` is one of
    :data:`~tacit.formats.exchanges.PROTOCOLS` or "auto", ``server`` as for
    :func:`~tacit.formats.exchanges.read_exchanges`.
    """

    def __init__(
        self,
        services: ServiceMap | None = None,
        protocol: str = "auto",
        params: ExchangeParams | None = None,
        server: str | None = None,
        max_carry_ns: int = MAX_CARRY_NS,
        max_http2_bytes: int = MAX_HTTP2_BYTES,
        forget_ns: int = FORGET_NS,
        min_compact: int = MIN_COMPACT,
    ) -> None:
        self.services = services or ServiceMap()
        self.protocol = protocol
        self.params = params or ExchangeParams()
        self.max_carry_ns = max_carry_ns
        self.max_http2_bytes = max_http2_bytes
        self.forget_ns = forget_ns
        self.accounting = StreamAccounting()
        self._registry = ConnectionRegistry(server, min_compact)
        self._kept: dict[int, _Kept] = {}
        self._given_up: set[int] = set()
        self._http2: dict[int, tuple[Resume, int]] = {}  # where reading goes on; last packet
        self._packets = PacketTable.empty()
        self._payloads = PacketPayloads.empty()
        self._now = 0
        self._seen = np.zeros(0, np.int64)  # per connection index, its latest packet's time

    @property
    def kept_packets(self) -> int:
        """Packets kept for the next batch."""
        return len(self._packets)

    @property
    def connections(self) -> int:
        """Connections remembered (their direction, for when they are seen again)."""
        return self._registry.count

    def feed(self, read: PacketRead, now_ns: int = 0) -> CapturedSpans:
        """The spans of the exchanges that ``read`` (the next batch) completes; ``now_ns`` moves
        the clock on when a live source has been quiet (the capture's clock otherwise)."""
        if read.payloads is None:
            raise ValueError("read the packets with payloads=True")
        p = read.packets
        self.accounting.packets += len(p)
        self.accounting.tcp_packets += int((p.proto == TCP).sum())
        self._now = max(self._now, now_ns, int(p.time.max()) if len(p) else 0)
        packets = concat_packets([self._packets, p])
        return self._read(packets, PacketPayloads.concat([self._payloads, read.payloads]))

    def flush(self) -> CapturedSpans:
        """The source has ended: every exchange still open is given, or counted."""
        return self._read(self._packets, self._payloads, final=True)

    def _read(
        self, packets: PacketTable, payloads: PacketPayloads, final: bool = False
    ) -> CapturedSpans:
        ex = self._exchanges(packets, payloads)
        sizes = np.bincount(ex.connection, minlength=len(ex.connections))
        starts = np.concatenate([[0], np.cumsum(sizes)])
        last_of = {c.index: k for k, c in enumerate(ex.connections)}
        kept: dict[int, _Kept] = {}
        carry: list[np.ndarray] = []
        give: list[np.ndarray] = []
        for k, conn in enumerate(ex.connections):
            if conn.index in self._given_up:
                self.accounting.ignored_packets += len(conn.rows)
                continue
            rows = np.arange(starts[k], starts[k + 1])
            times = packets.time[conn.rows]
            # the kept state goes with the first incarnation of a 4-tuple in this batch
            state = self._kept.pop(conn.index, None) or _Kept(
                np.zeros(0, bool), int(times.min()), 0
            )
            state.last = int(times.max())
            done = ~ex.expects_response[rows] | (ex.response_last[rows] != MISSING)
            given = np.zeros(len(rows), bool)
            given[: len(state.given)] = state.given[: len(rows)]
            closing = final or last_of[conn.index] != k  # or a later incarnation took the 4-tuple
            cut, resume = (
                (0, None) if closing else self._quiet_cut(conn, ex, rows, done, packets, payloads)
            )
            if cut:
                state.since = int(ex.request_first[rows[cut]])
            end, reason = self._ends(conn, ex, rows, done, payloads, state, closing)
            if end:
                cut = len(rows)
                resume = conn.http2 if _goes_on(conn, packets, done, closing, reason) else None
            if conn.protocol == HTTP2 and (cut or end):
                self._resume(conn.index, resume, state.last)
            give += [rows[:cut][~given[:cut]], rows[cut:][done[cut:] & ~given[cut:]]]
            if not end:
                state.given = (given | done)[cut:]
                kept[conn.index] = state
                carry.append(conn.rows[packets.time[conn.rows] >= state.since])
                continue
            unparsed = dict(conn.unparsed)
            if reason:
                self._given_up.add(conn.index)
                unparsed[reason] = int(payloads.lengths()[conn.rows].sum())
            for why, n in unparsed.items():
                self.accounting.unparsed[why] = self.accounting.unparsed.get(why, 0) + n
        self._kept = kept
        self._forget_idle()
        self._note_seen(ex.connections, packets)
        rows = np.sort(np.concatenate(carry)) if carry else np.zeros(0, np.int64)
        self._packets, self._payloads = packets.take(rows), payloads.take(rows)
        given_rows = np.sort(np.concatenate(give)) if give else np.zeros(0, np.int64)
        source = packets.sources[0] if packets.sources else ""
        got = spans_from_exchanges(ex.take(given_rows), self.services, source)
        self.accounting.add(got.accounting)
        return got

    def _exchanges(self, packets: PacketTable, payloads: PacketPayloads) -> Exchanges:
        return read_exchanges(
            PacketRead(packets, PacketAccounting(), "", payloads),
            protocol=self._protocol_of,
            params=self.params,
            registry=self._registry,
            resume={i: r for i, (r, _) in self._http2.items()},
        )

    def _protocol_of(self, conn: Connection) -> str:
        """HTTP/2 for a connection read on from a cut (its bytes no longer start with the
        preface); else as given (one cut elsewhere starts at a message, as detection needs)."""
        return HTTP2 if conn.index in self._http2 else self.protocol

    def _resume(self, index: int, resume: Resume | None, last: int) -> None:
        """Keep (or forget) where an HTTP/2 connection's kept packets now start, and when it was
        last seen."""
        if resume is None:
            self._http2.pop(index, None)
        else:
            self._http2[index] = (resume, last)

    def _forget_idle(self) -> None:
        """Let go of HTTP/2 connections with nothing kept and nothing new for
        :data:`MAX_HTTP2_IDLE_NS` (their closing may not have been captured)."""
        idle = [
            i
            for i, (_, last) in self._http2.items()
            if i not in self._kept and self._now - last > MAX_HTTP2_IDLE_NS
        ]
        for i in idle:
            del self._http2[i]

    def _note_seen(self, conns: list[Connection], packets: PacketTable) -> None:
        """Keep each connection's latest packet time; forget the long quiet ones
        (:meth:`~tacit.formats.connections.ConnectionRegistry.forget`)."""
        count = self._registry.count
        if len(self._seen) < count:
            self._seen = np.concatenate([self._seen, np.zeros(count - len(self._seen), np.int64)])
        for conn in conns:
            self._seen[conn.index] = max(self._seen[conn.index], int(packets.time[conn.rows[-1]]))
        remap = self._registry.forget(self._keep)
        if remap is None:
            return
        self._kept = {int(remap[i]): v for i, v in self._kept.items()}
        self._http2 = {int(remap[i]): v for i, v in self._http2.items()}
        self._given_up = {int(remap[i]) for i in self._given_up}
        self._seen = self._seen[:count][remap >= 0]

    def _keep(self, count: int) -> np.ndarray:
        """The connections to remember: those with something kept or given up, and those seen
        within ``forget_ns`` (:data:`~tacit.formats.connections.FORGET_NS`)."""
        keep = self._now - self._seen[:count] <= self.forget_ns
        keep[list({*self._kept, *self._http2, *self._given_up})] = True
        return keep

    def _quiet_cut(
        self,
        conn: Connection,
        ex: Exchanges,
        rows: np.ndarray,
        done: np.ndarray,
        packets: PacketTable,
        payloads: PacketPayloads,
    ) -> tuple[int, Resume | None]:
        """Where to cut the connection's kept packets before their end (:func:`_quiet_before`),
        and for HTTP/2 where its reading goes on from there (read again up to the cut); (0,
        None) for no cut."""
        cut = _quiet_before(conn, ex, rows, done)
        if not cut or conn.protocol != HTTP2:
            return cut, None
        before = conn.rows[packets.time[conn.rows] < ex.request_first[rows[cut]]]
        (again,) = self._exchanges(packets.take(before), payloads.take(before)).connections
        return (0, None) if again.unparsed or again.http2 is None else (cut, again.http2)

    def _ends(
        self,
        conn: Connection,
        ex: Exchanges,
        rows: np.ndarray,
        done: np.ndarray,
        payloads: PacketPayloads,
        state: _Kept,
        closing: bool,
    ) -> tuple[bool, str]:
        """Whether the connection's kept packets end here, and why it is given up for good
        ('' when it is not)."""
        if closing:
            return True, ""
        if conn.protocol is None:  # none known once it has bytes; until then its handshake kept
            return bool(conn.unparsed) or self._now - state.last > self.max_carry_ns, ""
        if (
            conn.protocol == HTTP2
            and int(payloads.lengths()[conn.rows].sum()) > self.max_http2_bytes
        ):
            return True, GIVEN_UP_HTTP2
        pending = np.flatnonzero(~done)
        if len(pending):  # a request waiting for its response
            return self._now - int(ex.request_first[rows[pending[0]]]) > self.max_carry_ns, ""
        if conn.unparsed:  # a message cut short by the batch, or bytes that do not parse
            return self._now - state.since > self.max_carry_ns, ""
        if len(done):
            return True, ""  # quiet at the end: cut there (HTTP/2: its preface read)
        return self._now - state.last > self.max_carry_ns, ""  # nothing read yet


def _goes_on(
    conn: Connection, packets: PacketTable, done: np.ndarray, closing: bool, reason: str
) -> bool:
    """Whether an HTTP/2 connection whose kept packets end here is read on from where they
    end: it was quiet there and is not closed."""
    if closing or reason or conn.protocol != HTTP2 or conn.unparsed or not done.all():
        return False
    return not np.any(packets.tcp_flags[conn.rows] & (FIN | RST))


def _quiet_before(conn: Connection, ex: Exchanges, rows: np.ndarray, done: np.ndarray) -> int:
    """For a connection whose bytes all parsed, the last of its exchanges (``rows``, in request
    order) before whose first byte every earlier exchange had ended: both directions are at a
    message boundary there (HTTP/2: a frame boundary with no stream open), and what came before
    can go. 0 when there is none."""
    if conn.protocol is None or conn.unparsed or len(rows) < 2:
        return 0
    answered = ex.response_last[rows]
    ended = np.where(done, np.where(answered != MISSING, answered, ex.request_last[rows]), LATER)
    quiet = np.flatnonzero(np.maximum.accumulate(ended)[:-1] < ex.request_first[rows[1:]])
    return int(quiet[-1]) + 1 if len(quiet) else 0
