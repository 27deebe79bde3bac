"""Spans from packets that keep coming (a live capture, a capture file read in pieces), as
:mod:`tacit.formats.capture_spans` makes them from a whole capture.

:func:`~tacit.formats.exchanges.read_exchanges` parses each connection from its start. A source
that never ends comes in batches, and a connection's exchanges run across them, so
:class:`CaptureSpanStream` keeps, per connection, the packets its exchanges may still need and
reads them again with the next batch (one :class:`~tacit.formats.connections.ConnectionRegistry`
for all batches, so a connection keeps the direction and the protocol it was first read with).
Each exchange's spans are given once, in the batch where its response is complete:

- A connection that answers in order (HTTP/1.1, Redis, memcached) is cut whenever it is
  *quiet*: every request answered and every byte of both directions parsed. Both directions then
  end at a message boundary, and its next packets are read as a new stream from there. One that
  is not quiet within ``max_carry_ns`` of its oldest packet kept (a response that never came, a
  request cut by the capture, requests pipelined without pause) is cut all the same: its
  complete exchanges are given, the others counted as without response, its unparsed bytes
  counted by reason, and its next packets read from wherever they start.
- HTTP/2 cannot be cut so: its header compression (RFC 7541) carries state from the
  connection's first frame on. Its packets are kept whole, and each batch gives the streams
  newly complete. The connection ends when it is closed with every stream complete, when its
  open streams see nothing new for ``max_carry_ns``, or after :data:`MAX_HTTP2_IDLE_NS` with
  none open; when it holds more than ``max_http2_bytes`` it is given up, and its later packets
  are counted, not read.
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
from tacit.formats.connections import ConnectionRegistry
from tacit.formats.exchanges import Connection, ExchangeParams, read_exchanges
from tacit.model.captures import PacketAccounting, PacketRead
from tacit.model.messages import MISSING
from tacit.model.packets import FIN, RST, TCP, PacketPayloads, PacketTable, concat_packets

NS = 1_000_000_000
MAX_CARRY_NS = 5 * NS
"""How long a connection may stay short of quiet before it is given up (capture time). Below
the 7 s lateness of ``tacit serve``'s online reconstruction, so that given spans are not late."""
MAX_HTTP2_BYTES = 16 * 1024 * 1024
"""Payload bytes of one HTTP/2 connection kept and read again with every batch."""
MAX_HTTP2_IDLE_NS = 300 * NS
"""An HTTP/2 connection with every stream complete and nothing new for this long is let go
(its closing may not have been captured); were it used again, it would be read from mid-way."""
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
    ) -> None:
        self.services = services or ServiceMap()
        self.protocol = protocol
        self.params = params or ExchangeParams()
        self.max_carry_ns = max_carry_ns
        self.max_http2_bytes = max_http2_bytes
        self.accounting = StreamAccounting()
        self._registry = ConnectionRegistry(server)
        self._kept: dict[int, _Kept] = {}
        self._protocols: dict[int, str] = {}  # by connection index, once known
        self._given_up: set[int] = set()
        self._packets = PacketTable.empty()
        self._payloads = PacketPayloads.empty()
        self._now = 0

    @property
    def kept_packets(self) -> int:
        """Packets kept for the next batch."""
        return len(self._packets)

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
        ex = read_exchanges(
            PacketRead(packets, PacketAccounting(), "", payloads),
            protocol=self._protocol_of,
            params=self.params,
            registry=self._registry,
        )
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
            if conn.protocol is not None:
                self._protocols[conn.index] = conn.protocol
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
            end, reason = self._ends(conn, packets, payloads, done, state, closing)
            give.append(rows[~given & (done | end)])
            if not end:
                state.given = given | done
                kept[conn.index] = state
                carry.append(conn.rows)
                continue
            unparsed = dict(conn.unparsed)
            if reason:
                self._given_up.add(conn.index)
                unparsed[reason] = int(payloads.lengths()[conn.rows].sum())
            for why, n in unparsed.items():
                self.accounting.unparsed[why] = self.accounting.unparsed.get(why, 0) + n
        self._kept = kept
        rows = np.sort(np.concatenate(carry)) if carry else np.zeros(0, np.int64)
        self._packets, self._payloads = packets.take(rows), payloads.take(rows)
        given_rows = np.sort(np.concatenate(give)) if give else np.zeros(0, np.int64)
        source = packets.sources[0] if packets.sources else ""
        got = spans_from_exchanges(ex.take(given_rows), self.services, source)
        self.accounting.add(got.accounting)
        return got

    def _protocol_of(self, conn: Connection) -> str:
        return self._protocols.get(conn.index, self.protocol)

    def _ends(
        self,
        conn: Connection,
        packets: PacketTable,
        payloads: PacketPayloads,
        done: np.ndarray,
        state: _Kept,
        closing: bool,
    ) -> tuple[bool, str]:
        """Whether the connection's kept packets end here, and why it is given up for good
        ('' when it is not)."""
        if closing:
            return True, ""
        if conn.protocol is None:  # none known once it has bytes; until then its handshake kept
            return bool(conn.unparsed) or self._now - state.last > self.max_carry_ns, ""
        if conn.protocol != HTTP2:
            quiet = done.all() and not conn.unparsed
            return quiet or self._now - state.since > self.max_carry_ns, ""
        if int(payloads.lengths()[conn.rows].sum()) > self.max_http2_bytes:
            return True, GIVEN_UP_HTTP2
        idle = self._now - state.last
        if done.all():
            closed = bool(np.any(packets.tcp_flags[conn.rows] & (FIN | RST)))
            return closed or idle > MAX_HTTP2_IDLE_NS, ""
        return idle > self.max_carry_ns, ""
