"""TCP byte streams from captured packets: one direction of a connection as bytes, with the
capture time of every byte.

Sequence numbers are unwrapped (RFC 9293 §3.4: 32-bit, modulo 2^32) into stream offsets; every
byte takes the time of the first packet that carried it, so retransmitted and duplicate bytes
count once; bytes no packet carried are *unseen* gaps, bytes whose packet was cut by the snap
length are *uncaptured* (their time is known, their content not). The application protocols
read these streams (:mod:`tacit.formats.protocols`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from tacit.model.messages import MISSING
from tacit.model.packets import FIN, SYN, PacketPayloads, PacketTable
from tacit.runs import distinct


@dataclass
class StreamBytes:
    """Bytes of reassembled streams carried more than once (``duplicate``), in gaps no captured
    packet covered (``unseen``), or cut by the snap length (``uncaptured``)."""

    duplicate: int = 0
    unseen: int = 0
    uncaptured: int = 0


@dataclass
class ByteStream:
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
        self.whole = not self.holes[-1]  # every byte captured: no hole anywhere
        self.end = len(self.data)

    def hole(self, start: int, stop: int) -> bool:
        """Whether any byte of ``[start, stop)`` is missing from ``data``."""
        if self.whole or stop <= start:
            return False
        k0, k1 = np.searchsorted(self.piece, [start, stop - 1], side="right") - 1
        return bool(self.holes[k1 + 1] - self.holes[k0])

    def time(self, offset: int) -> int:
        """The capture time of the byte at ``offset`` (:data:`MISSING` when never seen)."""
        return int(self.piece_time[np.searchsorted(self.piece, offset, side="right") - 1])

    def times(self, offsets: np.ndarray) -> np.ndarray:
        """:meth:`time` of every offset in ``offsets`` at once."""
        return self.piece_time[np.searchsorted(self.piece, offsets, side="right") - 1]


def reassemble(
    p: PacketTable, payloads: PacketPayloads, rows: np.ndarray, counts: StreamBytes
) -> ByteStream:
    """The byte stream carried by ``rows`` (one direction, time order); the bytes carried twice,
    never seen and not captured are added to ``counts``."""
    flags = p.tcp_flags[rows]
    closed = bool(np.any(flags & FIN))
    seq = p.seq[rows].astype(np.int64)
    if not len(rows):
        return _empty_stream(False, False)
    step = (np.diff(seq) + 2**31) % 2**32 - 2**31  # unwrapped: each step within ±2^31
    at = seq[0] + np.concatenate([[0], np.cumsum(step)]) + (flags & SYN != 0)
    wire = np.maximum(p.payload_len[rows].astype(np.int64), 0)
    held = np.minimum(payloads.offsets[rows + 1] - payloads.offsets[rows], wire)
    syn = np.flatnonzero(flags & SYN)
    data_rows = np.flatnonzero(wire > 0)
    base = int(at[syn[0]]) if len(syn) else int(at[data_rows].min()) if len(data_rows) else 0
    origin = at - base
    lo, hi, cap = origin, origin + wire, origin + held
    early = np.minimum(hi, 0) - np.minimum(lo, 0)  # before the stream start (e.g. keepalives)
    counts.duplicate += int(early[data_rows].sum())
    lo, cap = np.maximum(lo, 0), np.maximum(cap, 0)
    keep = data_rows[hi[data_rows] > lo[data_rows]]
    if not len(keep):
        return _empty_stream(closed, len(syn) > 0)
    bounds = distinct(np.concatenate([[0], lo[keep], hi[keep], cap[keep]]))
    first, held_k = _first_cover(
        np.searchsorted(bounds, lo[keep]),
        np.searchsorted(bounds, hi[keep]),
        np.searchsorted(bounds, cap[keep]),
        len(bounds) - 1,
    )
    size = np.diff(bounds)
    seen = first >= 0
    counts.duplicate += int((hi[keep] - lo[keep]).sum() - size[seen].sum())
    counts.unseen += int(size[~seen].sum())
    counts.uncaptured += int(size[seen & ~held_k].sum())
    seg = keep[np.maximum(first, 0)]
    piece_time = np.where(seen, p.time[rows[seg]], MISSING)
    take = np.flatnonzero(held_k)
    src = payloads.offsets[rows[seg[take]]] + bounds[take] - origin[seg[take]]
    data = _place(payloads.data, src, bounds[take], size[take], int(bounds[-1]))
    return ByteStream(data.tobytes(), bounds[:-1], piece_time, held_k, closed, len(syn) > 0)


def _empty_stream(closed: bool, start_seen: bool) -> ByteStream:
    return ByteStream(
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


@njit(cache=True)
def _place(buf, src, dest, size, n):
    """``n`` zero bytes, ``size[k]`` bytes of ``buf`` from ``src[k]`` copied in at ``dest[k]``."""
    out = np.zeros(n, dtype=np.uint8)
    for k in range(src.size):
        out[dest[k] : dest[k] + size[k]] = buf[src[k] : src[k] + size[k]]
    return out
