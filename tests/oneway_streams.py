"""Shared helpers for the one-way latency tests: simulated streams and hand-made intervals."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np

from tacit.oneway_latency.intervals import (
    IntervalCache,
    IntervalParams,
    IntervalSplit,
    IntervalWork,
    pipeline,
)
from tacit.oneway_latency.simulate import (
    SimulatedStream,
    StreamParams,
    simulate_stream,
    write_captures,
)


@lru_cache(maxsize=8)
def simulated(**overrides) -> SimulatedStream:
    """A default simulated stream (1 Mpps, 10 intervals of 10 ms) with ``overrides``."""
    return simulate_stream(StreamParams(**overrides))


def works(sim: SimulatedStream, lookahead: int = 1) -> list[IntervalWork]:
    params = IntervalParams()
    return list(
        pipeline(
            IntervalSplit(sim.sender, params, "sender"),
            IntervalSplit(sim.receiver, params, "receiver"),
            lookahead,
        )
    )


def work_of(
    sender: tuple[np.ndarray, np.ndarray],
    receiver: tuple[np.ndarray, np.ndarray],
    later: tuple[np.ndarray, np.ndarray] | None = None,
    start_ns: int = 0,
    end_ns: int = 10_000_000,
) -> IntervalWork:
    """One interval from (ids, timestamps) pairs of each side."""

    def cache(pair: tuple[np.ndarray, np.ndarray] | None) -> IntervalCache:
        if pair is None:
            return IntervalCache.empty()
        return IntervalCache.build(np.asarray(pair[0], np.uint64), np.asarray(pair[1], np.int64))

    return IntervalWork(0, start_ns, end_ns, cache(sender), cache(receiver), cache(later))


def random_ids(n: int, seed: int) -> np.ndarray:
    """``n`` distinct random identifiers."""
    rng = np.random.default_rng(seed)
    ids = np.unique(rng.integers(1, 2**64 - 1, size=n + n // 10 + 10, dtype=np.uint64))
    return rng.permutation(ids)[:n]


@lru_cache(maxsize=1)
def agent_captures(directory: str) -> tuple[Path, Path]:
    """The simulated stream (20 k packets, 10 intervals of 10 ms, loss and reordering across
    boundaries) written as the sender's and the receiver's pcap (:func:`write_captures`)."""
    sim = simulate_stream(StreamParams(rate_pps=200_000, loss_rate=3e-3, reorder_rate=0.3))
    out = Path(directory)
    sender, receiver = out / "sender.pcap", out / "receiver.pcap"
    write_captures(sim, sender, receiver)
    return sender, receiver
