"""Where an agent's packets come from: a capture file (as fast as possible, or paced by its
timestamps) or a live interface, in batches that carry the capture clock after them."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tacit.formats.live import CaptureStats, capture_file_batches, check_capture_file
from tacit.model.captures import PacketAccounting, PacketRead
from tacit.model.packets import NO_TIME

log = logging.getLogger("tacit.oneway_latency.agent")
"""The agent's log: a live source says there when it starts capturing."""


@dataclass
class Batch:
    """Packets from a source and the capture clock after them: every packet still to come has
    a timestamp at least ``clock_ns - grace`` (a file: the last timestamp read; live: now)."""

    read: PacketRead | None
    clock_ns: int


class PcapSource:
    """A capture file, replayed as fast as possible (interval boundaries by capture time) or,
    with ``realtime``, paced by its capture timestamps. A BPF ``bpf_filter`` makes libpcap
    read the file (:func:`tacit.formats.live.capture_file_batches`)."""

    live = False
    stats: CaptureStats | None = None
    """A file has no kernel counters: what it holds is in the reads' accounting."""

    def __init__(
        self,
        path: str | Path,
        *,
        realtime: bool = False,
        bpf_filter: str = "",
        chunk_records: int = 65536,
    ) -> None:
        self.path = str(path)
        self.realtime = realtime
        self.bpf_filter = bpf_filter
        self.chunk_records = chunk_records
        self._stop = threading.Event()
        check_capture_file(self.path, bpf_filter)  # refused now, not once the agent runs

    def stop(self) -> None:
        self._stop.set()

    def batches(self) -> Iterator[Batch]:
        reads = capture_file_batches(self.path, self.bpf_filter, self.chunk_records)
        origin: tuple[int, float] | None = None
        for read in reads:
            if self._stop.is_set():
                return
            times = read.packets.time[read.packets.time != NO_TIME]
            if not self.realtime or not len(times):
                yield Batch(read, int(times.max()) if len(times) else -(2**62))
                continue
            origin = origin or (int(times[0]), time.monotonic())
            yield from self._paced(read, origin)

    def _paced(self, read: PacketRead, origin: tuple[int, float]) -> Iterator[Batch]:
        """The read cut into 1 ms slices of capture time, each released at its time."""
        t = read.packets.time
        edges = np.arange(int(t.min()), int(t.max()) + 1_000_001, 1_000_000)
        cuts = np.searchsorted(t, edges)
        first = True
        for lo, hi, edge in zip(cuts[:-1], cuts[1:], edges[1:], strict=True):
            if self._stop.is_set():
                return
            time.sleep(max(0.0, origin[1] + (edge - origin[0]) / 1e9 - time.monotonic()))
            rows = np.arange(lo, hi)
            part = PacketRead(read.packets.take(rows), PacketAccounting(), read.format)
            if first:  # the read's accounting travels with its first slice
                part.accounting, first = read.accounting, False
            yield Batch(part, int(edge))


class LiveSource:
    """Live capture on an interface (:class:`tacit.formats.live.LiveCapture`) for
    ``duration_s`` seconds (None: until stopped). The capture clock is the system time at
    which the capture last had nothing more to deliver: an agent that falls behind closes
    no interval whose packets still wait in the kernel's buffer."""

    live = True

    def __init__(
        self, interface: str, bpf_filter: str = "", duration_s: float | None = None
    ) -> None:
        from tacit.formats.live import LiveCapture

        self.capture = LiveCapture(interface, bpf_filter)
        self.duration_s = duration_s
        self.stats: CaptureStats | None = None
        """libpcap's counters once the capture has ended: the packets the kernel dropped for
        want of buffer space never reach the agent, and are counted only here."""

    def stop(self) -> None:
        self.capture.stop()

    def batches(self) -> Iterator[Batch]:
        log.info("capturing on %s", self.capture.interface)
        try:
            for read in self.capture.batches(self.duration_s, idle=True):
                yield Batch(read, self.capture.drained_ns)
            yield Batch(None, time.time_ns())
        finally:
            self.stats = self.capture.stats()
            log.info("capture stats: %s", self.stats)
            self.capture.close()
