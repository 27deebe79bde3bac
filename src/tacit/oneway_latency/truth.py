"""Ground truth: the latency of every packet seen at both capture points, per sender interval.

A packet belongs to the interval of its send time (the interval the sender counts it in). The
truth of an interval is over the packets of that interval that the receiver saw at all, in any
interval — what a measurement that loses no timestamp would report. Means use exact integer
sums; standard deviations are sample standard deviations (ddof = 1).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tacit.oneway_latency.intervals import IntervalParams
from tacit.oneway_latency.stream import PacketStream


@dataclass(frozen=True)
class IntervalTruth:
    """Per sender interval (``index``): packets sent, packets matched at the receiver, and the
    mean and standard deviation (ns) of the matched packets' latencies (NaN when undefined)."""

    index: np.ndarray
    sent: np.ndarray
    matched: np.ndarray
    mean_ns: np.ndarray
    std_ns: np.ndarray

    def row(self, interval: int) -> int | None:
        """The position of ``interval`` in the columns, None when nothing was sent in it."""
        pos = int(np.searchsorted(self.index, interval))
        return pos if pos < len(self.index) and self.index[pos] == interval else None


def packet_latencies(sender: PacketStream, receiver: PacketStream) -> tuple[np.ndarray, np.ndarray]:
    """``(received, latency_ns)`` per sender packet: whether the receiver saw its identifier,
    and receive minus send time (0 where not received)."""
    order = np.argsort(receiver.ident, kind="stable")
    rid = receiver.ident[order]
    if not len(rid):
        return np.zeros(len(sender), bool), np.zeros(len(sender), np.int64)
    pos = np.minimum(np.searchsorted(rid, sender.ident), len(rid) - 1)
    received = rid[pos] == sender.ident
    latency = np.where(received, receiver.time[order][pos] - sender.time, 0)
    return received, latency


def latency_truth(
    sender: PacketStream, receiver: PacketStream, params: IntervalParams
) -> IntervalTruth:
    """Per-interval truth of one-way latency; see the module docstring."""
    received, latency = packet_latencies(sender, receiver)
    interval = params.index(sender.time)
    valid = interval >= 0
    index, sent = np.unique(interval[valid], return_counts=True)
    rows = np.searchsorted(index, interval[valid & received])
    lat = latency[valid & received]
    matched = np.bincount(rows, minlength=len(index))
    sums = np.zeros(len(index), np.int64)
    np.add.at(sums, rows, lat)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = sums / matched
        dev = lat - mean[rows]
        sq = np.bincount(rows, weights=dev * dev, minlength=len(index))
        std = np.sqrt(sq / (matched - 1))
    std[matched < 2] = np.nan
    return IntervalTruth(index, sent, matched, mean, std)
