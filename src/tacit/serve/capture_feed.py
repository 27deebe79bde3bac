"""Spans from packets as a source of ``tacit serve``: every request/response exchange that a
capture shows (:mod:`tacit.formats.capture_stream`) becomes a client span and a server span,
taken in like the spans of an OTLP request and reconstructed online with them (TraceWeaver
§5.1: the spans a sidecar would see, from the network instead of an agent in the services).

The spans of a batch go through :meth:`tacit.serve.ingest.Ingest.submit` as OTLP/JSON export
requests (transport ``capture``): committed to the store before they are fed to reconstruction,
so that a restart resumes them as it resumes the receivers' spans, and held back while too many
spans wait for reconstruction (the feed waits and retries; a live capture meanwhile queues in
libpcap's buffer, and what that buffer drops is in the capture's statistics).

A capture holds no trace context. Each exchange's two spans get a trace id of their own and
the server span names the client span as its parent, which is how reconstruction knows the two
sides of one RPC (:mod:`.online_feed`); the ids are numbered from a random start per run, so
they never repeat. Per span, the trace id the sender "gave" is therefore the exchange's, not a
request's.

A capture file is read once: the store keeps how many of its exchanges were taken (in the
transaction that takes them), and a restart goes on after those. A file that changed (size or
modification time) is read anew. A live source takes what arrives while the service runs.
"""

from __future__ import annotations

import secrets
import time
from pathlib import Path

import numpy as np
import orjson

from tacit.formats.capture_spans import CapturedSpans, ServiceMap
from tacit.formats.capture_stream import CaptureSpanStream
from tacit.formats.otlp import otlp_document
from tacit.formats.pcap import join_reads
from tacit.model.captures import PacketRead
from tacit.model.spans import SpanTable
from tacit.serve.ingest import Busy, Ingest
from tacit.serve.packet_feed import PacketFeed

FEED_S = 0.5
"""A live source's packets are read into spans every this often (or sooner, when this many
packets have come: :data:`FEED_PACKETS`): each read goes over the packets every connection
keeps since its last quiet point again, so reading at every libpcap poll would cost more."""
FEED_PACKETS = 65_536
REQUEST_EXCHANGES = 1024
"""Exchanges per export request taken in (two spans each)."""
TRANSPORT = "capture"


class CaptureFeed(PacketFeed):
    """One capture source of spans (:class:`~tacit.serve.packet_feed.PacketFeed`): ``services``
    names the addresses, ``protocol`` as ``tacit capture --protocol``."""

    kind = "capture"

    def __init__(
        self,
        ingest: Ingest,
        source: Path | str,
        bpf: str = "",
        services: ServiceMap | None = None,
        protocol: str = "auto",
    ) -> None:
        super().__init__(source, bpf, payloads=True, idle=True)
        self.ingest = ingest
        self.stream = CaptureSpanStream(services, protocol)
        self.key = None
        if self.pcap is not None:
            st = self.pcap.stat()
            self.key = f"capture:{self.pcap.resolve()}:{st.st_size}:{st.st_mtime_ns}"
        self.resumed = ingest.store.state(self.key, 0) if self.key else 0
        self.exchanges = 0  # exchanges the stream gave so far
        self.spans = 0  # spans taken in by this run
        self._base = secrets.randbits(62)
        self._held: list[PacketRead] = []
        self._last_feed = time.monotonic()

    def status(self) -> dict[str, object]:
        return {
            **super().status(),
            "spans": self.spans,
            "resumed_after_exchanges": self.resumed,
            "kept_packets": self.stream.kept_packets,
            "connections": self.stream.connections,
            **self.stream.accounting.as_dict(),
        }

    def _take(self, read: PacketRead | None) -> None:
        if read is not None:
            self._held.append(read)
        held = sum(len(r.packets) for r in self._held)
        live = self.capture is not None
        if live and held < FEED_PACKETS and time.monotonic() - self._last_feed < FEED_S:
            return
        self._last_feed = time.monotonic()
        reads, self._held = self._held, []
        if not reads and self.capture is not None:  # a quiet spell: the clock moves on
            reads = [self.capture.empty()]
        now = time.time_ns() if live else 0
        self._submit(self.stream.feed(join_reads(reads, self.source), now))

    def _end(self) -> None:
        reads, self._held = self._held, []
        if reads:
            self._submit(self.stream.feed(join_reads(reads, self.source)))
        self._submit(self.stream.flush())

    def _summary(self) -> str:
        return f"{self.packets} packets, {self.spans} spans"

    def _submit(self, got: CapturedSpans) -> None:
        """Take in the spans of ``got`` (a client and a server span per exchange) in the order
        their exchanges ended (online reconstruction takes spans in about that order), a
        request of at most :data:`REQUEST_EXCHANGES` exchanges at a time."""
        n = len(got.spans) // 2
        order = np.argsort(got.spans.end[0::2], kind="stable")
        spans = got.spans.take(np.stack([2 * order, 2 * order + 1], axis=1).ravel())
        first = self.exchanges
        self.exchanges += n
        skip = min(max(self.resumed - first, 0), n)
        for a in range(skip, n, REQUEST_EXCHANGES):
            b = min(a + REQUEST_EXCHANGES, n)
            part = spans.take(np.arange(2 * a, 2 * b))
            self._name(part, first + a)
            body = orjson.dumps(otlp_document(part))
            state = {self.key: first + b} if self.key else None
            while True:
                try:
                    self.spans += self.ingest.submit(body, "json", TRANSPORT, state)
                    break
                except Busy as e:
                    if self._stop.wait(e.retry_after_s):
                        return  # stopping: what was not taken is read again by a restart

    def _name(self, part: SpanTable, number: int) -> None:
        """Give the exchanges of ``part`` (numbered from ``number``) their ids: a trace id per
        exchange, a span id per span, the server span's parent its client span."""
        n = len(part) // 2
        pool = part.strings
        ids = [(self._base + number + k) % 2**64 for k in range(n)]
        part.trace = np.repeat([pool.code(f"{self._base:016x}{i:016x}") for i in ids], 2)
        part.span_id = np.array(
            [pool.code(f"{(2 * i + side) % 2**64:016x}") for i in ids for side in (0, 1)],
            dtype=np.int32,
        )
        parent = np.full(len(part), -1, np.int64)
        parent[1::2] = np.arange(0, len(part), 2)
        part.parent = parent
