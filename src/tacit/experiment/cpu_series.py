"""A per-second CPU allocation series for the server of Pirate's §5.1 experiment.

Pirate §5.1 derives the server's CPU allocation from Google's Borg cluster trace (2019): for
the job with the largest average CPU utilisation, the trace gives a histogram of per-second
usage for every 5-minute window; the paper samples each second from its window's histogram and
enforces the result with cgroups. No package on PyPI or Debian ships that trace, and the paper
publishes no statistics of the series beyond its source, so this series is *generated*, in the
same structure: every ``window_seconds`` a window's usage distribution (a beta distribution
whose mean is drawn around ``mean``), and every second one draw from the current window's
distribution, floored at ``floor`` of a core so that the server always makes some progress.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tacit.errors import ConfigError


@dataclass(frozen=True)
class CpuSeriesParams:
    """Shares of one core: windows of ``window_seconds`` whose means are drawn from a beta
    distribution of mean ``mean`` and ``concentration``; seconds drawn around their window's
    mean with ``second_concentration``; at least ``floor``. Chosen: a busy job (mean 0.6 of a
    core), varying by about ±0.15 from second to second."""

    mean: float = 0.6
    concentration: float = 20.0
    second_concentration: float = 10.0
    window_seconds: int = 300
    floor: float = 0.2

    def __post_init__(self) -> None:
        if not 0 < self.floor < self.mean < 1:
            raise ConfigError("need 0 < floor < mean < 1 (shares of one core)")
        if self.concentration <= 0 or self.second_concentration <= 0 or self.window_seconds < 1:
            raise ConfigError("concentrations and window_seconds must be positive")


NEAR_FULL_CORE = CpuSeriesParams(mean=0.99, floor=0.98)
"""A series that leaves the server almost a whole core every second (the bounds exclude 1), for
runs that should not be throttled: a throttled CFS period stalls the server, and the stalls make
a mode of their own among the client's gaps."""


def _beta(rng: np.random.Generator, mean: float, concentration: float, size=None):
    return rng.beta(mean * concentration, (1 - mean) * concentration, size)


def cpu_allocation_series(seconds: int, params: CpuSeriesParams, seed: int) -> np.ndarray:
    """``seconds`` per-second CPU shares (fractions of one core) of the seeded series."""
    if seconds < 1:
        raise ConfigError(f"need at least one second, got {seconds}")
    rng = np.random.default_rng([seed, 5])
    windows = -(-seconds // params.window_seconds)
    means = _beta(rng, params.mean, params.concentration, windows)
    per_second = np.repeat(means, params.window_seconds)[:seconds]
    draws = _beta(rng, np.clip(per_second, 0.01, 0.99), params.second_concentration)
    return np.maximum(draws, params.floor)
