"""tacit's centre-tracking histogram of inter-packet-gap modes (``algorithm="centres"``), a
variant of Pirate's Algorithm 2 (§3.3–3.4) of tacit's own; the algorithm as published is
:mod:`~tacit.response_latency.mode_sum`.

Each connection keeps at most ``N`` modes; a mode has a centre (ns), a count of the gaps it
absorbed (aged: halved at every epoch end, so that stale modes give way), and the number and sum
of the gaps it absorbed in the current epoch. A gap joins the nearest mode whose centre is within
``ε`` of it (relative to the centre), which moves towards it (a running mean whose weight stops
falling at :data:`CENTRE_MEMORY` gaps, so that a centre follows a drifting latency); two modes
that come within ``ε`` of each other merge (ε-merging). A gap near no mode starts one, in a free
slot or in place of the mode with the smallest count (whose gaps of the epoch are then lost).

At the end of an epoch the estimate is the *proportional mode sum* over the response modes —
those centred at or above a floor and not at a timer value
(:mod:`~tacit.response_latency.timers`): ``Σ_m (n_m / n) · mean_m`` with ``n_m`` the epoch's
gaps in mode ``m``, ``mean_m`` their mean and ``n = Σ n_m``. (That is the mean of the epoch's
gaps that fell in response modes: the modes decide which gaps count, the gaps set the value.)
The floor is the gap threshold δ as published, or, by default, adaptive per connection: a
ratio of the centre of the mode holding the most time (:func:`close_epoch`).

The functions work on ``(connections, N)`` arrays so that the estimator's compiled loop can
keep every connection's histogram; :class:`ModeHistogram` wraps one connection's for direct use.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from tacit.response_latency.params import PirateParams
from tacit.response_latency.timers import matches_timer, timer_gaps_ns

CENTRE_MEMORY = 16
"""After this many gaps a mode's centre moves by 1/16 of each new gap's distance (an
exponentially weighted mean) rather than by ever smaller steps. Chosen: with one gap per
response this follows a service time that changes over a few dozen responses."""

MODE_DTYPES = {
    "centre": np.int64,
    "count": np.uint32,
    "epoch_count": np.uint32,
    "epoch_sum": np.int64,
}
"""The per-mode state and its types (for the state size per connection)."""


def mode_arrays(connections: int, n: int) -> tuple[np.ndarray, ...]:
    """Empty histograms: ``(centre, count, epoch_count, epoch_sum)``, each ``(connections, n)``."""
    return tuple(np.zeros((connections, n), dtype=t) for t in MODE_DTYPES.values())


@njit(cache=True)
def add_gap(centre, count, epoch_count, epoch_sum, c, gap, eps):  # pragma: no cover
    """Put one gap (ns, ≥ 0) into connection ``c``'s histogram; returns the mode it went to."""
    n = centre.shape[1]
    best, best_d, free, weakest = -1, np.inf, -1, -1
    for m in range(n):
        if count[c, m] == 0:
            if free < 0:
                free = m
            continue
        d = abs(gap - centre[c, m])
        if d <= eps * centre[c, m] and d < best_d:
            best, best_d = m, d
        if weakest < 0 or count[c, m] < count[c, weakest]:
            weakest = m
    if best < 0:
        m = free if free >= 0 else weakest
        centre[c, m] = gap
        count[c, m] = 1
        epoch_count[c, m] = 1
        epoch_sum[c, m] = gap
        return m
    count[c, best] += 1
    epoch_count[c, best] += 1
    epoch_sum[c, best] += gap
    w = min(count[c, best], CENTRE_MEMORY)
    centre[c, best] += (gap - centre[c, best]) // w
    return _merge_into(centre, count, epoch_count, epoch_sum, c, best, eps)


@njit(cache=True, inline="always")
def _merge_into(centre, count, epoch_count, epoch_sum, c, m, eps):  # pragma: no cover
    """Merge every mode within ε of mode ``m`` into it (count-weighted centre)."""
    for o in range(centre.shape[1]):
        if o == m or count[c, o] == 0:
            continue
        near = min(centre[c, o], centre[c, m])
        if abs(centre[c, o] - centre[c, m]) <= eps * near:
            a, b = np.int64(count[c, m]), np.int64(count[c, o])
            centre[c, m] = (centre[c, m] * a + centre[c, o] * b) // (a + b)
            count[c, m] += count[c, o]
            epoch_count[c, m] += epoch_count[c, o]
            epoch_sum[c, m] += epoch_sum[c, o]
            count[c, o] = 0
            epoch_count[c, o] = 0
            epoch_sum[c, o] = 0
    return m


@njit(cache=True)
def close_epoch(
    centre, count, epoch_count, epoch_sum, c, floor, timers, tolerance, remove_timers, ratio
):  # pragma: no cover - compiled
    """End connection ``c``'s epoch: ``(sum, n, floor)`` of its gaps in response modes (the
    proportional mode sum is ``sum / n``) and the floor used, then clear the epoch's counts and
    halve the counts.

    Response modes are centred at or above the floor and not at a timer value. With ``ratio``
    0 the floor is the fixed δ ``floor`` (Algorithm 2 as published). Otherwise it is adaptive,
    ``ratio`` times the centre of the *dominant* mode: the non-timer mode that holds the most
    of the epoch's time (the sum of its gaps in the epoch, not the aged count × centre, so that
    it follows a step in latency within the epoch). A client
    spends its time waiting for responses, so the causal pairs' mode dominates whatever the
    scale (µs on loopback, 100 ms across a continent), while the gaps inside bursts are many
    but short, and the gaps that a pipelining client's later requests end are spread thinly
    below the causal mode."""
    if ratio > 0:
        heavy, mass = -1, np.int64(0)
        for m in range(centre.shape[1]):
            timer = remove_timers and matches_timer(centre[c, m], timers, tolerance)
            if epoch_count[c, m] > 0 and not timer and epoch_sum[c, m] > mass:
                heavy, mass = m, epoch_sum[c, m]
        if heavy >= 0:
            floor = max(np.int64(ratio * centre[c, heavy]), np.int64(1))
    total, n = np.int64(0), np.int64(0)
    for m in range(centre.shape[1]):
        timer = remove_timers and matches_timer(centre[c, m], timers, tolerance)
        if epoch_count[c, m] > 0 and centre[c, m] >= floor and not timer:
            total += epoch_sum[c, m]
            n += epoch_count[c, m]
        epoch_count[c, m] = 0
        epoch_sum[c, m] = 0
        count[c, m] >>= 1
    return total, n, floor


class ModeHistogram:
    """One connection's mode histogram (the compiled functions above, for one connection)."""

    def __init__(self, params: PirateParams | None = None) -> None:
        self.params = params or PirateParams()
        self._timers = timer_gaps_ns(self.params)
        self.centre, self.count, self.epoch_count, self.epoch_sum = mode_arrays(
            1, self.params.max_modes
        )

    def add(self, gap_ns: int) -> int:
        """Add one gap; returns the slot of the mode it went to."""
        arrays = (self.centre, self.count, self.epoch_count, self.epoch_sum)
        return add_gap(*arrays, 0, np.int64(gap_ns), self.params.merge_epsilon)

    def modes(self) -> list[tuple[int, int, int]]:
        """``(centre, count, epoch_count)`` of the live modes, by centre."""
        live = np.flatnonzero(self.count[0] > 0)
        rows = [
            (int(self.centre[0, m]), int(self.count[0, m]), int(self.epoch_count[0, m]))
            for m in live
        ]
        return sorted(rows)

    def close_epoch(self) -> tuple[int | None, int]:
        """End the epoch: ``(estimate ns or None, gaps supporting it)``."""
        p = self.params
        arrays = (self.centre, self.count, self.epoch_count, self.epoch_sum)
        total, n, _ = close_epoch(
            *arrays,
            0,
            p.gap_threshold_ns,
            self._timers,
            p.timer_tolerance,
            p.remove_timer_modes,
            p.mode_floor_ratio,
        )
        return (int(total // n) if n else None), int(n)
