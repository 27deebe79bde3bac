"""Live packet capture on an interface (libpcap through pcapy-ng), decoded by the pcap reader.

Frames are taken from libpcap in batches (``next_batch``: one call per batch, not per packet),
wrapped as an in-memory classic pcap (global header + one record per frame) and decoded by
:func:`tacit.formats.pcap.read_packet_buffer`, the compiled reader every capture file goes
through: one decoder, the same :class:`~tacit.model.packets.PacketTable` columns and the same
accounting of every record. The same path serves a capture file filtered by libpcap
(:func:`filtered_file`).

Timestamps are libpcap's (the kernel's receive or transmit time on the system clock), in
microseconds: pcapy-ng's batches carry ``(sec, usec)``. ``next_batch`` does not return a
frame's length on the wire, so a frame cut by the snap length gets ``wire_len`` = its captured
length; its ``truncated`` flag still comes from the IP header. The default snap length is
libpcap's largest (262144), which no frame on Linux reaches, so nothing is cut by default.

The handle is non-blocking and waited on with ``select``: with TPACKET_V3, libpcap's read
timeout does not fire while no packet arrives, so a blocking read could not honour a stop.
"""

from __future__ import annotations

import math
import select
import struct
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tacit.errors import ConfigError, InputError
from tacit.formats.pcap import (
    MAX_SNAPLEN,
    capture_format,
    iter_packet_chunks,
    join_reads,
    read_packet_buffer,
)
from tacit.model.captures import PacketRead

_PCAP_HEADER = struct.Struct("<IHHiIII")
_PCAP_US_MAGIC = 0xA1B2C3D4
_RECORD = 16


@dataclass(frozen=True)
class CaptureStats:
    """libpcap's counters (``pcap_stats``) since the filter was set: packets the filter passed
    (``received``), dropped by the kernel for lack of buffer space (``dropped``) and by the
    interface (``if_dropped``); plus ``delivered``: frames handed to the decoder.

    The kernel starts taking every frame on the interface when the capture is activated, a
    moment before the filter is attached; what it took (or dropped) then is not what the
    filter asked for, so the counters are read once the filter is in place and reported as
    differences from that reading."""

    received: int
    dropped: int
    if_dropped: int
    delivered: int


def _pcapy():
    try:
        import pcapy
    except ImportError as e:  # pragma: no cover - the test environment has the extra
        raise ConfigError(
            "live capture and BPF filters need pcapy-ng (libpcap): "
            f"pip install 'tacit-traces[live]' ({e})"
        ) from None
    return pcapy


def wrap_frames(data: bytes, meta: bytes, linktype: int, snaplen: int) -> bytes:
    """One pcap file (microsecond timestamps) holding the frames of one ``next_batch`` result:
    ``meta`` is four native uint32 per frame (sec, usec, offset into ``data``, captured length).
    Vectorized: the record headers and the frame bytes are scattered into place by index."""
    m = np.frombuffer(meta, dtype=np.uint32).reshape(-1, 4).astype(np.int64)
    sec, usec, off, cap = m[:, 0], m[:, 1], m[:, 2], m[:, 3]
    n = len(m)
    before = np.cumsum(cap) - cap
    start = _PCAP_HEADER.size + _RECORD * np.arange(1, n + 1) + before  # of each frame's bytes
    out = np.empty(_PCAP_HEADER.size + _RECORD * n + int(cap.sum()), np.uint8)
    out[: _PCAP_HEADER.size] = np.frombuffer(
        _PCAP_HEADER.pack(_PCAP_US_MAGIC, 2, 4, 0, 0, snaplen, linktype), np.uint8
    )
    heads = np.stack([sec, usec, cap, cap], axis=1).astype("<u4").view(np.uint8)
    out[(start - _RECORD)[:, None] + np.arange(_RECORD)] = heads.reshape(n, _RECORD)
    total = int(cap.sum())
    within = np.arange(total) - np.repeat(before, cap)
    src = np.frombuffer(data, np.uint8)
    out[np.repeat(start, cap) + within] = src[np.repeat(off, cap) + within]
    return out.tobytes()


BUFFER_BYTES = 32 << 20
"""The kernel's capture buffer. With TPACKET_V3, libpcap cuts it into blocks of 256 KiB (its
largest snap length), each handed over once full or when its timer (:data:`BLOCK_TIMEOUT_MS`)
runs out: a burst packs its blocks, but a trickle takes a block per timeout, so the 128
blocks here hold about 1.3 s of a trickle while the reader is held up (libpcap's 2 MiB
default, 0.1 s). What does not fit is dropped, and counted (:meth:`LiveCapture.stats`)."""
BLOCK_TIMEOUT_MS = 10
"""How long a block waits for more packets: the delay a packet can add before it is read,
which a one-way latency agent's ``grace_ns`` must cover."""


_ACTIVATE_ERRORS = {
    -1: "libpcap failed to start the capture",
    -5: "no such device",
    -6: "monitor mode not supported",
    -8: "permission denied (capturing needs root or CAP_NET_RAW)",
    -9: "the interface is not up",
    -11: "permission denied for promiscuous mode",
    -13: "capture not supported on this device",
}
"""pcap_activate's errors (pcap/pcap.h: PCAP_ERROR, _NO_SUCH_DEVICE, _RFMON_NOTSUP,
_PERM_DENIED, _IFACE_NOT_UP, _PROMISC_PERM_DENIED, _CAPTURE_NOTSUP)."""


class LiveCapture:
    """Capture on ``interface`` with a BPF filter; :meth:`batches` yields decoded batches.

    Raises :class:`~tacit.errors.ConfigError` for a missing interface, no permission to
    capture, or a filter libpcap cannot compile. Use as a context manager, or :meth:`close`.
    """

    def __init__(
        self,
        interface: str,
        bpf_filter: str = "",
        snaplen: int = MAX_SNAPLEN,
        *,
        promiscuous: bool = False,
        batch_frames: int = 8192,
        poll_seconds: float = 0.05,
        payloads: bool = False,
        buffer_bytes: int = BUFFER_BYTES,
    ) -> None:
        pcapy = _pcapy()
        self.payloads = payloads
        self.interface = interface
        self.bpf_filter = bpf_filter
        self.snaplen = snaplen
        self.batch_frames = batch_frames
        self.poll_seconds = poll_seconds
        self.delivered = 0
        self.drained_ns = time.time_ns()
        """The system time of the last read that found nothing more: every frame captured
        before it (less libpcap's buffer timeout) has been delivered."""
        self._stop = threading.Event()
        try:
            self._handle = pcapy.create(interface)
            self._handle.set_snaplen(snaplen)
            self._handle.set_promisc(int(promiscuous))
            self._handle.set_timeout(BLOCK_TIMEOUT_MS)
            self._handle.set_buffer_size(buffer_bytes)
            status = self._handle.activate()
        except pcapy.PcapError as e:
            raise ConfigError(f"cannot capture on {interface!r}: {e}") from None
        if status < 0:  # pcap_activate's errors (pcapy-ng returns them instead of raising)
            self._handle.close()
            reason = _ACTIVATE_ERRORS.get(status, f"libpcap error {status}")
            raise ConfigError(f"cannot capture on {interface!r}: {reason}")
        try:
            if bpf_filter:
                self._handle.setfilter(bpf_filter)
            self._handle.setnonblock(1)
        except pcapy.PcapError as e:
            self._handle.close()
            raise ConfigError(f"bad capture filter {bpf_filter!r}: {e}") from None
        self._counted_from = self._handle.stats()
        self.linktype = self._handle.datalink()
        self.source = f"live:{interface}"
        self.empty()  # compiles the decoder now, not on the first packets

    def empty(self) -> PacketRead:
        """A read of no frames, in this capture's link type."""
        buf = wrap_frames(b"", b"", self.linktype, self.snaplen)
        return read_packet_buffer(buf, self.source, payloads=self.payloads)

    def __enter__(self) -> LiveCapture:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def stop(self) -> None:
        """Make :meth:`batches` return after its current wait (callable from any thread)."""
        self._stop.set()

    def close(self) -> None:
        self._stop.set()
        if self._handle is not None:
            self._handle.close()
            self._handle = None

    def stats(self) -> CaptureStats:
        received, dropped, if_dropped = (
            now - then for now, then in zip(self._handle.stats(), self._counted_from, strict=True)
        )
        return CaptureStats(received, dropped, if_dropped, self.delivered)

    def batches(
        self, max_seconds: float | None = None, *, idle: bool = False
    ) -> Iterator[PacketRead | None]:
        """Decoded batches of what has been captured, until ``max_seconds`` have passed (from
        this call) or :meth:`stop`. Waits at most ``poll_seconds`` between batches; with
        ``idle``, yields None after every wait that found nothing more, so that a consumer
        sees time pass (:attr:`drained_ns`) when nothing arrives. A ``max_seconds`` that is not
        positive and finite is refused (a NaN deadline would never pass)."""
        if max_seconds is not None and not (math.isfinite(max_seconds) and max_seconds > 0):
            raise ConfigError(
                f"a live capture needs a positive, finite duration, got {max_seconds} s"
            )
        deadline = None if max_seconds is None else time.monotonic() + max_seconds
        fd = self._handle.getfd()
        while not self._stop.is_set():
            wait = self.poll_seconds
            if deadline is not None:
                wait = min(wait, deadline - time.monotonic())
                if wait <= 0:
                    break
            select.select([fd], [], [], wait)
            while not self._stop.is_set():
                read = self._next()
                if read is None:
                    break
                yield read
            if idle:
                yield None
        while (read := self._next()) is not None:  # what is already captured
            yield read

    def _next(self) -> PacketRead | None:
        if self._handle is None:
            return None
        now = time.time_ns()
        data, meta = self._handle.next_batch(self.batch_frames)
        if not meta:
            self.drained_ns = now
            return None
        return self._decode(data, meta)

    def _decode(self, data: bytes, meta: bytes) -> PacketRead:
        n = len(meta) // _RECORD
        self.delivered += n
        buf = wrap_frames(data, meta, self.linktype, self.snaplen)
        return read_packet_buffer(buf, self.source, payloads=self.payloads)


def capture_for(
    interface: str, seconds: float, bpf_filter: str = "", *, payloads: bool = False
) -> tuple[PacketRead, CaptureStats]:
    """Everything captured on ``interface`` for ``seconds``, as one read (with ``payloads``,
    the captured bytes of every packet too), and libpcap's counts."""
    with LiveCapture(interface, bpf_filter, payloads=payloads) as cap:
        parts = [read for read in cap.batches(seconds) if read is not None]
        return join_reads(parts or [cap.empty()], cap.source), cap.stats()


def open_filtered_file(path: str | Path, bpf_filter: str) -> Any:
    """A libpcap handle reading a capture file (pcap or pcapng, not compressed) through a BPF
    filter; raises :class:`~tacit.errors.InputError` for a file libpcap cannot read and
    :class:`~tacit.errors.ConfigError` for a filter it cannot compile. Close it when done."""
    pcapy = _pcapy()
    name = str(path)
    try:
        handle = pcapy.open_offline(name)
    except pcapy.PcapError as e:
        raise InputError(f"libpcap cannot read it: {e}", path=name) from None
    try:
        handle.setfilter(bpf_filter)
    except pcapy.PcapError as e:
        handle.close()
        raise ConfigError(f"bad capture filter {bpf_filter!r}: {e}") from None
    return handle


def filtered_file(
    path: str | Path, bpf_filter: str, batch_frames: int = 65536, *, payloads: bool = False
) -> Iterator[PacketRead]:
    """The packets of a capture file that pass a BPF filter, read by libpcap
    (:func:`open_filtered_file`) in batches, decoded like live frames (so with microsecond
    timestamps); with ``payloads``, their captured payload bytes too."""
    pcapy = _pcapy()
    name = str(path)
    handle = open_filtered_file(name, bpf_filter)
    try:
        linktype = handle.datalink()
        while True:
            try:
                data, meta = handle.next_batch(batch_frames)
            except pcapy.PcapError as e:
                raise InputError(f"libpcap: {e}", path=name) from None
            if not meta:
                return
            frames = wrap_frames(data, meta, linktype, MAX_SNAPLEN)
            yield read_packet_buffer(frames, name, payloads=payloads)
    finally:
        handle.close()


def capture_file_batches(
    path: str | Path, bpf_filter: str = "", chunk_records: int = 65536, *, payloads: bool = False
) -> Iterator[PacketRead]:
    """The packets of a capture file in batches of at most ``chunk_records``: through libpcap
    when there is a BPF filter (:func:`filtered_file`), else tacit's own reader (gzip too);
    with ``payloads``, their captured payload bytes too."""
    if bpf_filter:
        return filtered_file(path, bpf_filter, chunk_records, payloads=payloads)
    return iter_packet_chunks(path, chunk_records, payloads=payloads)


def check_capture_file(path: str | Path, bpf_filter: str = "") -> None:
    """Refuse, before a long-running reader of :func:`capture_file_batches` starts, a file that
    is not a capture or a filter libpcap cannot compile (as :class:`LiveCapture` refuses a bad
    interface or filter when it opens). A corrupt record later still ends the reading after
    the packets before it."""
    if bpf_filter:
        open_filtered_file(path, bpf_filter).close()
    else:
        capture_format(path)
