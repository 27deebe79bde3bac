"""A packet source of ``tacit serve`` read in a thread of its own: a capture file (read once,
in batches) or an interface (captured live by libpcap), through a BPF filter. Both are checked
when the feed is made, so that a missing file or interface, no permission or a bad filter is a
start-up error; what goes wrong later (a corrupt capture) ends this source only, logged and
shown in its status, after what it read before is finished (:meth:`PacketFeed._end`), and the
service goes on."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

from tacit.errors import TacitError
from tacit.formats.live import (
    CaptureStats,
    LiveCapture,
    capture_file_batches,
    check_capture_file,
)
from tacit.model.captures import PacketRead

log = logging.getLogger("tacit.serve")

CHUNK_RECORDS = 65_536
"""Records of a capture file per batch (the readers' state carries across batches)."""


class PacketFeed:
    """Reads ``source`` (a :class:`~pathlib.Path`: a capture file; else the name of an
    interface) and hands every batch to :meth:`_take`, then calls :meth:`_end` once the source
    ends or the feed is stopped. ``payloads``: read the payload bytes too; ``idle``: a live
    source also hands None to :meth:`_take` after each wait that found nothing, so the
    subclass sees time pass."""

    kind = "packet"
    """What the feed is for, in the thread's name and the log."""

    def __init__(
        self, source: Path | str, bpf: str = "", *, payloads: bool = False, idle: bool = False
    ) -> None:
        self.pcap = source if isinstance(source, Path) else None
        self.bpf = bpf
        self.payloads = payloads
        self.idle = idle
        self.capture = (
            None if isinstance(source, Path) else LiveCapture(source, bpf, payloads=payloads)
        )
        if self.pcap is not None:
            check_capture_file(self.pcap, bpf)
        self.source = str(source) if self.capture is None else self.capture.source
        self.packets = 0
        self.live: CaptureStats | None = None
        """libpcap's counters of a live source as of its latest batch (what the kernel dropped
        for want of buffer is there, not in ``packets``)."""
        self.error: str | None = None
        self.finished = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"tacit-{self.kind}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop reading, and let the subclass finish what it holds (:meth:`_end`)."""
        self._stop.set()
        if self.capture is not None:
            self.capture.stop()
        if self._thread.is_alive():
            self._thread.join()

    def status(self) -> dict[str, object]:
        return {
            "source": self.source,
            "packets": self.packets,
            "live": None if self.live is None else asdict(self.live),
            "finished": self.finished.is_set(),
            "error": self.error,
        }

    def _take(self, read: PacketRead | None) -> None:
        raise NotImplementedError

    def _end(self) -> None:
        raise NotImplementedError

    def _summary(self) -> str:
        return f"{self.packets} packets"

    def _batches(self) -> Iterator[PacketRead | None]:
        if self.capture is not None:
            for read in self.capture.batches(idle=self.idle):
                if read is not None or self.idle:
                    yield read
        else:
            yield from capture_file_batches(
                str(self.pcap), self.bpf, CHUNK_RECORDS, payloads=self.payloads
            )

    def _run(self) -> None:
        try:
            try:
                for read in self._batches():
                    if read is not None:
                        self.packets += len(read.packets)
                    if self.capture is not None:  # read here, where the handle is used
                        self.live = self.capture.stats()
                    self._take(read)
                    if self._stop.is_set():
                        break
            except TacitError as e:  # a corrupt capture, say: this source ends, the service
                self.error = str(e)  # goes on, and what came before is finished below
                log.error("%s source %s: %s", self.kind, self.source, e)
            self._end()
        except Exception as e:
            self.error = f"{type(e).__name__}: {e}"
            log.exception("%s source %s failed", self.kind, self.source)
        finally:
            if self.capture is not None:
                self.capture.close()
            self.finished.set()
            log.info("%s source %s: %s", self.kind, self.source, self._summary())
