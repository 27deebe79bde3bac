"""Per-RPC queueing delay, and the RPCs whose latency it explains.

YTrace (Kanuparthy et al., arXiv 1602.03273, §4, network localization) estimates the network
queueing an RPC met as its one-way delay minus the smallest one-way delay on the same path
(pair of hosts) over a window: the minimum approximates propagation and transmission, and a
constant clock offset between the two hosts cancels in the difference. An RPC is flagged when
its queueing is a significant share of its end-to-end latency, and the network problems on its
path are then looked up (:func:`tacit.diagnosis.problem_graphs.graphs_for_rpcs`).

The window is tumbling (aligned to multiples of ``window_ns``) per path, so that the minimum
adapts to route changes. The paper gives no numeric threshold in the text available here; the
defaults below are tacit's and documented as such.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tacit.errors import ConfigError, InputError
from tacit.runs import run_bounds

S = 1_000_000_000
MS = 1_000_000


@dataclass(frozen=True)
class QueueingParams:
    """``window_ns``: the span over which the path's minimum one-way delay is taken (10 min);
    ``min_samples``: fewest RPCs on a path in a window for its minimum to be a baseline (5;
    RPCs in sparser windows are not estimated);
    ``min_share``: queueing / end-to-end latency at or above which an RPC is flagged (0.25,
    tacit's choice: a quarter of the latency spent in queues); ``min_queueing_ns``: an absolute
    floor (1 ms) so that sub-millisecond jitter on fast RPCs is not flagged."""

    window_ns: int = 600 * S
    min_samples: int = 5
    min_share: float = 0.25
    min_queueing_ns: int = 1 * MS

    def __post_init__(self) -> None:
        if self.window_ns <= 0:
            raise ConfigError(f"window must be positive, not {self.window_ns} ns")
        if not 0.0 < self.min_share <= 1.0:
            raise ConfigError(f"min_share must be in (0, 1], not {self.min_share}")
        if self.min_samples < 1:
            raise ConfigError(f"min_samples must be at least 1, not {self.min_samples}")
        if self.min_queueing_ns < 0:
            raise ConfigError("min_queueing_ns cannot be negative")


@dataclass
class Queueing:
    """Per RPC (input order): whether its window had enough RPCs to be ``estimated``, the
    path's windowed minimum one-way delay (``base_ns``), the queueing delay, its share of the
    end-to-end latency (0 where not estimated), and whether it is flagged."""

    estimated: np.ndarray
    base_ns: np.ndarray
    queueing_ns: np.ndarray
    share: np.ndarray
    flagged: np.ndarray


def queueing_delay(
    time: np.ndarray,
    src: np.ndarray,
    dst: np.ndarray,
    one_way_ns: np.ndarray,
    end_to_end_ns: np.ndarray,
    params: QueueingParams | None = None,
) -> Queueing:
    """Queueing delay of every RPC (columns of equal length; ``src``/``dst`` name its hosts).

    The one-way delay may include a constant clock offset between the hosts (it cancels);
    end-to-end latencies must be positive."""
    p = params or QueueingParams()
    cols = [np.asarray(c) for c in (time, src, dst, one_way_ns, end_to_end_ns)]
    if len({len(c) for c in cols}) != 1:
        raise InputError("RPC columns differ in length")
    time, src, dst, one_way, e2e = cols
    one_way = one_way.astype(np.int64)
    bad = np.flatnonzero(e2e <= 0)
    if len(bad):
        raise InputError("end-to-end latency must be positive", record=int(bad[0]))
    _, path = np.unique(np.stack([src.astype(str), dst.astype(str)]), axis=1, return_inverse=True)
    window = np.asarray(time, np.int64) // p.window_ns
    order = np.lexsort((window, path.ravel()))
    starts, lengths = run_bounds(path.ravel()[order], window[order])
    mins = np.minimum.reduceat(one_way[order], starts) if len(starts) else one_way[:0]
    base = np.empty_like(one_way)
    base[order] = np.repeat(mins, lengths)
    estimated = np.empty(len(one_way), dtype=bool)
    estimated[order] = np.repeat(lengths >= p.min_samples, lengths)
    queueing = np.where(estimated, one_way - base, 0)
    share = queueing / e2e.astype(np.float64)
    flagged = estimated & (share >= p.min_share) & (queueing >= p.min_queueing_ns)
    return Queueing(estimated, base, queueing, share, flagged)
