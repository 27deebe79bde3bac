"""Pipelined measurement intervals and the per-interval caches of (identifier → timestamp).

Both capture points cut time into intervals on their synchronized clocks,
``t_{i+1} = t_i + δ`` (as in LDA, FineComb and RDA), and each keeps one synopsis per interval.
A packet belongs to the sender's interval of its send time and to the receiver's interval of its
receive time, so a packet sent shortly before ``t_{i+1}`` is counted by the sender in ``i`` and
by the receiver in ``i + 1``: reordered at the boundary, it looks lost in ``i`` and foreign in
``i + 1``. The design accounts for it by pipelining: the result for interval ``i`` is computed
once the receiver has closed ``i + lookahead`` (by default the next interval), with that later
interval's cache at hand, so that a late packet is recognised as late (RDA re-homes it into the
interval it was sent in; FineComb finds it in the next interval's stash). A packet delayed by
more than ``lookahead`` intervals is indistinguishable from a loss and is counted as one.

RDA keeps, per interval and side, a cache of the packets' identifiers and timestamps
(for late binding and the deletion of decoded packets); :class:`IntervalCache` is that
cache, sorted by identifier for lookups by binary search.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar, overload

import numpy as np

from tacit.errors import ConfigError, InputError
from tacit.oneway_latency.identifiers import sample_mask
from tacit.oneway_latency.stream import PacketStream
from tacit.runs import distinct


@dataclass(frozen=True)
class IntervalParams:
    """Interval boundaries ``t_i = start_ns + i · length_ns`` on the synchronized clock.

    ``length_ns`` (δ): 10 ms for the simulations. The paper's prototype (§IX) measures in
    one-second intervals, which the agent uses (``tacit latency oneway agent --interval``); its
    §VII simulation replays whole traces without intervals. 10 ms keeps a simulated interval at
    10^3–10^5 packets at 0.1–10 Mpps, the range the synopses are sized for, and is well above
    the one-way delays simulated (tens of µs), so that few packets cross a boundary.
    """

    start_ns: int = 0
    length_ns: int = 10_000_000

    def __post_init__(self) -> None:
        if self.length_ns <= 0:
            raise ConfigError(f"interval length must be positive, got {self.length_ns} ns")

    def index(self, time: np.ndarray) -> np.ndarray:
        """The interval of every timestamp (negative before ``start_ns``)."""
        return (np.asarray(time, dtype=np.int64) - self.start_ns) // self.length_ns

    @overload
    def start(self, i: int) -> int: ...
    @overload
    def start(self, i: np.ndarray) -> np.ndarray: ...
    def start(self, i: int | np.ndarray) -> int | np.ndarray:
        """``t_i``, the first nanosecond of interval ``i`` (of each, for an array)."""
        return self.start_ns + i * self.length_ns


@dataclass(frozen=True)
class IntervalCache:
    """One side's packets of one interval: identifiers (sorted, unique) and timestamps."""

    ids: np.ndarray
    ts: np.ndarray

    @classmethod
    def build(cls, ident: np.ndarray, time: np.ndarray, where: str = "") -> IntervalCache:
        """Sort by identifier; duplicates within an interval are an input error, since every
        synopsis here assumes an identifier names one packet."""
        order = np.argsort(ident, kind="stable")
        ids, ts = ident[order], time[order]
        dup = np.flatnonzero(ids[1:] == ids[:-1])
        if len(dup):
            raise InputError(
                f"packet identifier {int(ids[dup[0]]):#x} occurs more than once in one interval",
                record=where or None,
            )
        return cls(ids, ts)

    @classmethod
    def empty(cls) -> IntervalCache:
        return cls(np.empty(0, np.uint64), np.empty(0, np.int64))

    @classmethod
    def merge(cls, caches: list[IntervalCache]) -> IntervalCache:
        """One cache over several intervals (for lookups ``lookahead`` intervals ahead)."""
        if len(caches) == 1:
            return caches[0]
        ident = np.concatenate([c.ids for c in caches])
        time = np.concatenate([c.ts for c in caches])
        return cls.build(ident, time, "across merged intervals")

    def __len__(self) -> int:
        return len(self.ids)

    def lookup(self, query: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(found, timestamp)`` of every queried identifier (timestamp 0 where not found)."""
        query = np.asarray(query, dtype=np.uint64)
        if not len(self.ids):
            return np.zeros(len(query), bool), np.zeros(len(query), np.int64)
        order = np.argsort(query)  # sorted queries search several times faster
        pos = np.empty(len(query), np.int64)
        pos[order] = np.minimum(np.searchsorted(self.ids, query[order]), len(self.ids) - 1)
        found = self.ids[pos] == query
        return found, np.where(found, self.ts[pos], 0)

    def contains(self, query: np.ndarray) -> np.ndarray:
        return self.lookup(query)[0]

    def sampled(self, rate: float, seed: int) -> IntervalCache:
        """The flow-hash sample of this cache (the same packets at both sides)."""
        if rate >= 1.0:
            return self
        keep = sample_mask(self.ids, rate, seed)
        return IntervalCache(self.ids[keep], self.ts[keep])

    def window(self, start_ns: int, end_ns: int) -> IntervalCache:
        """The packets with ``start_ns <= ts < end_ns``."""
        keep = (self.ts >= start_ns) & (self.ts < end_ns)
        return IntervalCache(self.ids[keep], self.ts[keep])


class CacheLookup(Protocol):
    """What reconciliation (:func:`~tacit.oneway_latency.rda.reconcile`) asks of the sender's
    cache: :meth:`IntervalCache.lookup`."""

    def lookup(self, query: np.ndarray) -> tuple[np.ndarray, np.ndarray]: ...


SenderCache = TypeVar("SenderCache", bound=CacheLookup, covariant=True)


class IntervalSplit:
    """One capture point's stream cut into intervals by its own (synchronized) clock.

    Packets before ``start_ns`` belong to no interval; they are counted in ``before_start``.
    """

    def __init__(self, stream: PacketStream, params: IntervalParams, side: str) -> None:
        self.params = params
        self.side = side
        index = params.index(stream.time)
        self.before_start = int(np.count_nonzero(index < 0))
        keep = index >= 0
        index = index[keep]
        order = np.argsort(index, kind="stable")
        self._index = index[order]
        self._ident = stream.ident[keep][order]
        self._time = stream.time[keep][order]
        self.indices = distinct(self._index)  # the intervals with packets, in order

    def cache(self, i: int) -> IntervalCache:
        lo, hi = np.searchsorted(self._index, [i, i + 1])
        if lo == hi:
            return IntervalCache.empty()
        return IntervalCache.build(
            self._ident[lo:hi], self._time[lo:hi], f"{self.side} interval {i}"
        )


@dataclass(frozen=True)
class IntervalWork(Generic[SenderCache]):
    """Everything the reconciliation of one sender interval may use."""

    index: int
    start_ns: int
    end_ns: int
    sender: SenderCache
    """The sender's packets: an :class:`IntervalCache`, except where only reconciliation
    (:func:`~tacit.oneway_latency.rda.reconcile`) uses them, which only calls ``lookup``: a
    receiving agent passes a stand-in that fetches the timestamps from the sender instead
    (:class:`~tacit.oneway_latency.remote_cache.RemoteCache`)."""
    receiver: IntervalCache
    receiver_later: IntervalCache
    """The receiver's packets of the next ``lookahead`` intervals (late arrivals live here)."""

    def sampled(
        self: IntervalWork[IntervalCache], rate: float, seed: int
    ) -> IntervalWork[IntervalCache]:
        """The same interval restricted to a flow-hash sample of its packets."""
        if rate >= 1.0:
            return self
        return dataclasses.replace(
            self,
            sender=self.sender.sampled(rate, seed),
            receiver=self.receiver.sampled(rate, seed),
            receiver_later=self.receiver_later.sampled(rate, seed),
        )


def pipeline(
    sender: IntervalSplit, receiver: IntervalSplit, lookahead: int = 1
) -> Iterator[IntervalWork[IntervalCache]]:
    """The sender's non-empty intervals in order, each with the receiver's caches of the same
    interval and of the ``lookahead`` following ones; each cache is built once."""
    if lookahead < 1:
        raise ConfigError(f"lookahead must be at least one interval, got {lookahead}")
    params = sender.params
    built: dict[int, IntervalCache] = {}

    def received(i: int) -> IntervalCache:
        if i not in built:
            built[i] = receiver.cache(i)
        return built[i]

    for i in sender.indices.tolist():
        for done in [j for j in built if j < i]:
            del built[done]
        yield IntervalWork(
            index=i,
            start_ns=params.start(i),
            end_ns=params.start(i + 1),
            sender=sender.cache(i),
            receiver=received(i),
            receiver_later=IntervalCache.merge([received(i + j) for j in range(1, lookahead + 1)]),
        )
