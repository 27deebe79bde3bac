"""Pirate's response latency in ``tacit serve``: packets of one source (a live interface, or a
capture file read once) fed to :class:`~tacit.response_latency.StreamingEstimator` in a thread
of their own, every closed (connection, epoch) estimate stored (``pirate_estimates``) and
counted at ``/metrics``.

Pirate (arXiv 2505.14358, §3.3–3.4) needs only the client-to-server packets, so the capture
point may see one direction of the traffic. An epoch of a connection closes when a later
packet of the source shows the epoch is over (or when the source ends, or the service stops):
estimates come one epoch behind the traffic, and a connection that falls silent keeps its last
epoch open until the stream moves on.

A capture file is read whole at every start and replaces what it gave before (a replay, not a
log); a live source appends.
"""

from __future__ import annotations

from pathlib import Path

from tacit.model.captures import PacketAccounting, PacketRead
from tacit.response_latency import PirateParams, ResponseEstimates, StreamingEstimator
from tacit.serve.metrics import ServeMetrics
from tacit.serve.packet_feed import PacketFeed
from tacit.serve.store import Store

NS = 1e9


class PirateFeed(PacketFeed):
    """One packet source for Pirate (:class:`~tacit.serve.packet_feed.PacketFeed`); ``server``
    (ADDR:PORT, ADDR or PORT) picks the connections as the estimator does (default: every
    connection, its direction from the handshake)."""

    kind = "Pirate"

    def __init__(
        self,
        store: Store,
        metrics: ServeMetrics,
        params: PirateParams,
        source: Path | str,
        bpf: str = "",
        server: str | None = None,
    ) -> None:
        super().__init__(source, bpf)
        self.store = store
        self.metrics = metrics
        self.estimator = StreamingEstimator(params, server)
        self.estimates = 0

    def start(self) -> None:
        if self.pcap is not None:
            self.store.restart_pirate(self.source)
        super().start()

    def status(self) -> dict[str, object]:
        return {**super().status(), "estimates": self.estimates}

    def _take(self, read: PacketRead | None) -> None:
        assert read is not None
        self._keep(self.estimator.feed(read.packets), read.accounting)

    def _end(self) -> None:
        """Close the open epochs and store them."""
        self._keep(self.estimator.flush(), None)

    def _summary(self) -> str:
        return f"{self.packets} packets, {self.estimates} estimates"

    def _keep(self, est: ResponseEstimates, capture: PacketAccounting | None) -> None:
        """Store the estimates and the packets' accounting; count them at ``/metrics``."""
        rows = [
            (r["client"], r["server"], r["epoch_start_ns"], r["epoch_end_ns"], r["latency_ns"],
             r["samples"])
            for r in est.as_rows()
        ]  # fmt: skip
        stages = {"estimator": est.accounting.counts}
        if capture is not None:
            stages["capture"] = capture.buckets()
        packets = [(s, b, n) for s, counts in stages.items() for b, n in counts.items() if n]
        self.store.append_pirate(self.source, rows, packets)
        self.estimates += len(rows)
        m = self.metrics
        for stage, bucket, n in packets:
            m.pirate_packets.labels(stage, bucket).inc(n)
        latest: dict[str, tuple[int, int, int]] = {}  # server: (epoch, latency·samples, samples)
        for _, server, start, _, latency, samples in rows:
            m.pirate_estimates.labels(m.pirate_server(server)).observe(latency / NS)
            epoch, total, n = latest.get(server, (start, 0, 0))
            if start > epoch:
                epoch, total, n = start, 0, 0
            if start == epoch:
                latest[server] = (epoch, total + latency * samples, n + samples)
        for server, (_, total, n) in latest.items():
            m.pirate_latency.labels(m.pirate_server(server)).set(total / n / NS)
