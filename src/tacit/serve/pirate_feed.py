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

import logging
import threading
from collections.abc import Iterator
from pathlib import Path

from tacit.errors import TacitError
from tacit.formats.live import LiveCapture, capture_file_batches, check_capture_file
from tacit.model.captures import PacketAccounting, PacketRead
from tacit.response_latency import PirateParams, ResponseEstimates, StreamingEstimator
from tacit.serve.metrics import ServeMetrics
from tacit.serve.store import Store

log = logging.getLogger("tacit.serve")

CHUNK_RECORDS = 65_536
"""Records of a capture file per batch (the estimator's state carries across batches)."""
NS = 1e9


class PirateFeed:
    """One packet source for Pirate: ``source`` is a capture file (a :class:`~pathlib.Path`) or
    the name of an interface to capture on live (libpcap), either through the BPF filter
    ``bpf``, both checked now (a missing file or interface, no permission or a bad filter is a
    start-up error);
    ``server`` (ADDR:PORT, ADDR or PORT) picks the connections as the estimator does (default:
    every connection, its direction from the handshake)."""

    def __init__(
        self,
        store: Store,
        metrics: ServeMetrics,
        params: PirateParams,
        source: Path | str,
        bpf: str = "",
        server: str | None = None,
    ) -> None:
        self.store = store
        self.metrics = metrics
        self.estimator = StreamingEstimator(params, server)
        self.pcap = source if isinstance(source, Path) else None
        self.bpf = bpf
        self.capture = None if isinstance(source, Path) else LiveCapture(source, bpf)
        if self.pcap is not None:
            check_capture_file(self.pcap, bpf)
        self.source = str(source) if self.capture is None else self.capture.source
        self.packets = 0
        self.estimates = 0
        self.error: str | None = None
        self.finished = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tacit-pirate", daemon=True)

    def start(self) -> None:
        if self.pcap is not None:
            self.store.restart_pirate(self.source)
        self._thread.start()

    def stop(self) -> None:
        """Stop reading, close the open epochs and store them."""
        self._stop.set()
        if self.capture is not None:
            self.capture.stop()
        if self._thread.is_alive():
            self._thread.join()

    def status(self) -> dict[str, object]:
        return {
            "source": self.source,
            "packets": self.packets,
            "estimates": self.estimates,
            "finished": self.finished.is_set(),
            "error": self.error,
        }

    def _batches(self) -> Iterator[PacketRead]:
        if self.capture is not None:
            for read in self.capture.batches():
                if read is not None:
                    yield read
        else:
            yield from capture_file_batches(str(self.pcap), self.bpf, CHUNK_RECORDS)

    def _run(self) -> None:
        try:
            for read in self._batches():
                self._keep(self.estimator.feed(read.packets), read.accounting)
                self.packets += len(read.packets)
                if self._stop.is_set():
                    break
            self._keep(self.estimator.flush(), None)
        except TacitError as e:  # a corrupt capture, say: this source ends, the service goes on
            self.error = str(e)
            log.error("Pirate source %s: %s", self.source, e)
        except Exception as e:
            self.error = f"{type(e).__name__}: {e}"
            log.exception("Pirate source %s failed", self.source)
        finally:
            if self.capture is not None:
                self.capture.close()
            self.finished.set()
            log.info(
                "Pirate source %s: %d packets, %d estimates",
                self.source,
                self.packets,
                self.estimates,
            )

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
