"""Pirate's Algorithm 2 as published: ``N`` inter-packet-gap modes of ``(min, max, count, sum)``
per connection, and the proportional mode sum at the end of each epoch (Vannarth Shobhana et
al., "Measuring Round-Trip Response Latencies Under Asymmetric Routing", §3.3–3.4).

Insertion (Algorithm 2, ``UpdateModes``): the modes are kept in ascending order; a gap ``g``
joins the first mode with ``min − ε ≤ g ≤ max + ε`` — extending its ``min`` (then merging it
with the mode below when they come within ε) or its ``max`` (then with the mode above); a gap
near no mode starts a singleton mode while fewer than ``N`` exist, and is otherwise discarded
(counted). The paper's ε is "a fixed parameter" (absolute, ``PirateParams.mode_epsilon_ns``,
with ``mode_epsilon_ratio`` 0); by default tacit widens it to a ratio of the mode's ``max``:
``ε = max(mode_epsilon_ns, mode_epsilon_ratio · max)``. With a fixed ε of 100 µs the gaps
that end batches, spread over a few ms by service-time noise, split into several modes; the
largest of them, often a single gap, is then taken for the IBG and the estimate is the
epoch's whole time over one, far too high. A relative
ε keeps one mode per phenomenon at any scale; the reproduction report shows both. For the
same reason tacit lets a mode be the IBG only when it holds at least ``ibg_min_share`` of the
epoch's gaps (a mode of the distribution rather than a lone outlier, such as one response
delayed by a CPU-throttled period in the §5.1 experiment); 0 gives the paper's rule. And the
IBG need not be one mode: when a connection's response latency varies within the epoch, its
batch-ending gaps fill several modes, and counting only the largest divides the epoch's time by
too few batches, so the estimate is too high. The modes within a factor ``1 / ibg_spread_ratio``
below the IBG also count as inter-batch gaps. Where the latencies spread further (a
CPU-throttled server answering one request in flight per connection, most quickly and a few
several times slower), the slow tail still passes ``ibg_min_share`` and the estimate divides the
epoch by its few gaps; so the inter-batch gaps must also hold
``ibg_min_time_share`` of the time summed (the estimate at most that many times their mean),
else the next mode down is the IBG.

Estimate (§3.3, "Computing a proportional mode sum"): after de-noising — modes at a
retransmission-timer value are dropped (:mod:`~tacit.response_latency.timers`; idle gaps never
enter) — the largest mode is the inter-batch gap (IBG), and the average response latency is
``Σ_{m_i ≤ IBG} Pr(m_i)/Pr(IBG) · m_i`` over the modes' average values, which is the sum of
the gaps in those modes divided by the IBG's count: the time the connection spent, per batch.
With the second §3.4 heuristic (``PirateParams.batch_end_only``) only a mode holding a gap that
followed a non-MTU packet may be the IBG. The histogram starts empty every epoch.

The functions work on ``(connections, N)`` arrays so that the estimator's compiled loop keeps
every connection's histogram; :class:`ModeSumHistogram` wraps one connection's.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from tacit.response_latency.params import PirateParams
from tacit.response_latency.timers import matches_timer, timer_gaps_ns

MODE_SUM_DTYPES = {
    "low": np.int64,
    "high": np.int64,
    "count": np.uint32,
    "total": np.int64,
    "candidates": np.uint32,
}
"""The per-mode state of Algorithm 2 and its types; per connection also the number of live
modes and of discarded gaps (:data:`CONNECTION_DTYPES`)."""

CONNECTION_DTYPES = {"live": np.uint8, "discarded": np.uint32}


def mode_sum_arrays(connections: int, n: int) -> dict[str, np.ndarray]:
    """Empty histograms: the :data:`MODE_SUM_DTYPES` arrays ``(connections, n)`` and the
    :data:`CONNECTION_DTYPES` arrays ``(connections,)``."""
    arrays: dict[str, np.ndarray] = {
        k: np.zeros((connections, n), dtype=t) for k, t in MODE_SUM_DTYPES.items()
    }
    arrays.update({k: np.zeros(connections, dtype=t) for k, t in CONNECTION_DTYPES.items()})
    return arrays


@njit(cache=True, inline="always")
def _epsilon(high, c, m, eps, ratio):  # pragma: no cover - compiled
    """ε around mode ``m``: the fixed ε, or the ratio of the mode's max when larger."""
    return max(eps, np.int64(ratio * high[c, m]))


@njit(cache=True, inline="always")
def _merge_next(low, high, count, total, cand, live, c, m, eps, ratio):  # pragma: no cover
    """``ConsiderMergeModes(m, m + 1)``: merge them when they come within ε."""
    k = np.int64(live[c])
    if m < 0 or m + 1 >= k or low[c, m + 1] - high[c, m] > _epsilon(high, c, m, eps, ratio):
        return
    high[c, m] = max(high[c, m], high[c, m + 1])
    count[c, m] += count[c, m + 1]
    total[c, m] += total[c, m + 1]
    cand[c, m] += cand[c, m + 1]
    for j in range(m + 1, k - 1):
        low[c, j], high[c, j] = low[c, j + 1], high[c, j + 1]
        count[c, j], total[c, j], cand[c, j] = count[c, j + 1], total[c, j + 1], cand[c, j + 1]
    live[c] = k - 1


@njit(cache=True)
def add_gap_published(
    low, high, count, total, cand, live, discarded, c, g, eps, ratio, candidate
):  # pragma: no cover - compiled
    """Algorithm 2's ``UpdateModes`` for gap ``g`` (ns) of connection ``c``; ``candidate``:
    the gap followed a non-MTU packet (§3.4). Returns the mode's slot, -1 when discarded."""
    k = np.int64(live[c])
    at = k
    for m in range(k):
        e = _epsilon(high, c, m, eps, ratio)
        if low[c, m] - e <= g <= high[c, m] + e:
            count[c, m] += 1
            total[c, m] += g
            if candidate:
                cand[c, m] += 1
            if g < low[c, m]:
                low[c, m] = g
                _merge_next(low, high, count, total, cand, live, c, m - 1, eps, ratio)
                return m - 1 if m > 0 and live[c] < k else m
            if g > high[c, m]:
                high[c, m] = g
                _merge_next(low, high, count, total, cand, live, c, m, eps, ratio)
            return m
        if g < low[c, m]:
            at = m
            break
    if k >= low.shape[1]:
        discarded[c] += 1
        return -1
    for j in range(k, at, -1):
        low[c, j], high[c, j] = low[c, j - 1], high[c, j - 1]
        count[c, j], total[c, j], cand[c, j] = count[c, j - 1], total[c, j - 1], cand[c, j - 1]
    low[c, at], high[c, at], count[c, at], total[c, at] = g, g, 1, g
    cand[c, at] = 1 if candidate else 0
    live[c] = k + 1
    return at


@njit(cache=True, inline="always")
def _ibg_sums(total, count, kept, ends, mean, c, ibg, spread):  # pragma: no cover - compiled
    """With mode ``ibg`` as the IBG: the time of the kept gaps up to it, the count of the
    inter-batch gaps (the IBG's, and with ``spread`` those of the eligible modes below it whose
    mean is at least ``spread`` times the IBG's) and their time."""
    s, n, t = np.int64(0), np.int64(0), np.int64(0)
    for m in range(ibg + 1):
        if kept[m]:
            s += total[c, m]
        if m == ibg or (spread > 0 and ends[m] and mean[m] >= spread * mean[ibg]):
            n += count[c, m]
            t += total[c, m]
    return s, n, t


@njit(cache=True)
def close_epoch_published(
    low,
    high,
    count,
    total,
    cand,
    live,
    c,
    timers,
    tolerance,
    remove_timers,
    use_candidates,
    min_share,
    spread,
    min_time_share,
):  # pragma: no cover - compiled
    """End connection ``c``'s epoch: ``(sum, n)`` of the proportional mode sum (the estimate is
    ``sum / n``; ``n`` is the IBG's count, 0 when there is no IBG), then empty the histogram.
    The IBG is the largest eligible mode that holds at least ``min_share`` of the epoch's gaps
    (0: any mode, the paper) and whose inter-batch gaps hold at least ``min_time_share`` of the
    time summed (0: any; when no mode does, the largest of the others). With ``spread`` > 0,
    the eligible modes below the IBG whose mean is at least ``spread`` times the IBG's also
    count in ``n`` (their gaps are in ``sum`` either way)."""
    k = np.int64(live[c])
    gaps = np.int64(0)
    mean = np.empty(k, dtype=np.int64)
    kept = np.empty(k, dtype=np.bool_)  # not a timer's mode (de-noising)
    ends = np.empty(k, dtype=np.bool_)  # may hold inter-batch gaps
    for m in range(k):
        gaps += count[c, m]
        mean[m] = total[c, m] // max(np.int64(count[c, m]), 1)
        kept[m] = not (remove_timers and matches_timer(mean[m], timers, tolerance))
        ends[m] = kept[m] and (cand[c, m] > 0 or not use_candidates)
    s, n, eligible = np.int64(0), np.int64(0), False
    for m in range(k - 1, -1, -1):
        if not (ends[m] and count[c, m] >= min_share * gaps):
            continue
        ms, mn, mt = _ibg_sums(total, count, kept, ends, mean, c, m, spread)
        if not eligible:  # the largest eligible mode: the IBG when none holds the time share
            s, n, eligible = ms, mn, True
        if mt >= min_time_share * ms:
            s, n = ms, mn
            break
    for m in range(k):
        count[c, m] = 0
        total[c, m] = 0
        cand[c, m] = 0
    live[c] = 0
    return s, n


class ModeSumHistogram:
    """One connection's Algorithm 2 histogram (the compiled functions above, for one
    connection)."""

    def __init__(self, params: PirateParams | None = None) -> None:
        self.params = params or PirateParams()
        self._timers = timer_gaps_ns(self.params)
        self._a = mode_sum_arrays(1, self.params.max_modes)

    @property
    def discarded(self) -> int:
        """Gaps discarded because all ``N`` modes were live and none was near."""
        return int(self._a["discarded"][0])

    def _modes(self) -> tuple[np.ndarray, ...]:
        a = self._a
        return a["low"], a["high"], a["count"], a["total"], a["candidates"], a["live"]

    def add(self, gap_ns: int, after_non_mtu: bool = True) -> int:
        """Add one gap; returns the slot of its mode (-1: discarded)."""
        return add_gap_published(
            *self._modes(),
            self._a["discarded"],
            0,
            np.int64(gap_ns),
            np.int64(self.params.mode_epsilon_ns),
            self.params.mode_epsilon_ratio,
            after_non_mtu,
        )

    def modes(self) -> list[tuple[int, int, int, int]]:
        """``(min, max, count, sum)`` of the live modes, ascending."""
        a, k = self._a, int(self._a["live"][0])
        cols = [a[name][0, :k].tolist() for name in ("low", "high", "count", "total")]
        return list(zip(*cols, strict=True))

    def close_epoch(self) -> tuple[int | None, int]:
        """End the epoch: ``(estimate ns or None, IBG count)``."""
        p = self.params
        s, n = close_epoch_published(
            *self._modes(),
            0,
            self._timers,
            p.timer_tolerance,
            p.remove_timer_modes,
            p.batch_end_only,
            p.ibg_min_share,
            p.ibg_spread_ratio,
            p.ibg_min_time_share,
        )
        return (int(s // n) if n else None), int(n)
