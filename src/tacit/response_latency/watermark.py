"""The watermark controller of Pirate's latency-aware layer-4 load balancer.

Follows Vannarth Shobhana et al., "Measuring (Round-Trip) Response Latencies Under Asymmetric
Routing" (Pirate), arXiv 2505.14358, §4 ("Use Case: DSR Layer-4 Load Balancer"; §5.6 evaluates
it, two clients and four servers behind a Katran load balancer, on 99th-percentile response
latency): once per control interval the load balancer compares each server's response latency,
as Pirate infers it from client → server packets, with the other servers' and adjusts the
server's Maglev weight (:mod:`tacit.response_latency.maglev`), so that new connections avoid
slow servers. §4 rests on three ideas: watermarks, freshness, and regression to the mean. The
rules here, in the order they are checked:

1. Freshness. Only a server whose estimate rests on at least ``freshness`` latency samples per
   active connection in the interval (and that had an active connection) is *fresh*; the mean
   latency ``m`` is the plain mean over fresh servers, and the two latency rules below act on
   fresh servers only. With fewer than two fresh servers there is nothing to compare with and
   neither rule acts.
2. High watermark. A fresh server with latency ``L > alpha_high * m`` has its weight cut in the
   ratio ``m / L`` (a server twice as slow as the mean loses half its weight), never below
   ``min_weight`` times its configured weight, so that it keeps receiving a few connections and
   its estimate stays fresh.
3. Low watermark. A fresh server with ``L < alpha_low * m`` whose weight is below its configured
   weight gets it back, by at most ``max_increase`` times the configured weight per interval
   (so that a server that has just recovered is not flooded with new connections at once: §4's
   "cap on the per-server increment in weight, to avoid the thundering herd problem"), and
   never above the configured weight. Between the watermarks the weight is kept (hysteresis).
4. Regression to the mean. A server on which neither latency rule has acted for
   ``regress_after`` consecutive intervals (because its latency sits between the watermarks or
   its estimate is not fresh) moves back toward its configured weight — the mean weight when,
   as by default, all servers are configured alike — by the same capped step; so a server
   that receives too few connections to be measured is not starved forever.

Weights never exceed their configured values (default 1 for every server): they only matter
relative to each other (Maglev gives entries in proportion to them), so taking weight from a
slow server is what moves its share of new connections to the others.

Where tacit departs from §4:

* The watermarks. §4: "αhigh (respectively, αlow) times the latency of the server with the
  smallest average latency". Here they are multiples of the mean latency over fresh servers.
* The weight moved. §4 takes weight from servers above the high watermark and places it on
  servers below the low one: "the weight shifted from a high-latency server is proportional to
  its latency", and each eligible server "receives an equal share of the total weight that is
  shifted away from the high-latency servers, subject to a cap". Here a slow server's weight is
  multiplied by ``m / L``; nothing is handed to other servers, which only win back their own
  configured weight, in capped steps (rule 3).
* Freshness. §4 defines it as "the ratio of the total number of requests received in the last
  measurement interval to the number of concurrent active connections at the end of that
  interval", and uses it only to choose the servers that may take weight: "We only consider a
  low-latency server eligible to take on additional weight if its freshness is at least as high
  as any high-latency server". Here it counts latency samples per active connection, is tested
  against a fixed threshold, and gates both latency rules and the mean.
* Regression to the mean. §4: "if latencies have not changed in the recent k measurement
  intervals, the weights are slowly equalized across servers (we use k = 3)". Here the
  condition is that no latency rule acted for k intervals, and "slowly" is the capped step.

§4 gives no value for the cap and no floor: ``max_increase`` and ``min_weight`` are tacit's
(:class:`WatermarkParams`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tacit.errors import ConfigError

HOLD, DECREASE, INCREASE, REGRESS = 0, 1, 2, 3
"""What the controller did to a server's weight in an interval (:attr:`WatermarkStep.action`)."""
ACTION_NAMES = ("hold", "decrease", "increase", "regress")


@dataclass(frozen=True)
class WatermarkParams:
    """Controller parameters (module docstring).

    - ``alpha_high`` = 1.5, ``alpha_low`` = 1.2: the watermarks (Pirate §4's values), here
      multiples of the mean latency over fresh servers, there of the smallest server latency.
    - ``regress_after`` = 3: intervals without a latency-driven change before a weight regresses
      to the mean (Pirate §4, ``k = 3``).
    - ``freshness`` = 1.0: latency samples per active connection in the interval for an
      estimate to count as fresh (tacit's threshold: Pirate §4 measures requests per active
      connection and compares servers with each other, not with a threshold; here one sample
      per connection on average is asked for).
    - ``max_increase`` = 0.1: the largest increase of a weight in one interval, as a fraction
      of its configured weight (tacit's value for §4's unquantified cap: a server at the floor
      is back in ten intervals).
    - ``min_weight`` = 0.05: the floor of a weight, as a fraction of its configured weight
      (tacit's; §4 has no floor).
    """

    alpha_high: float = 1.5
    alpha_low: float = 1.2
    regress_after: int = 3
    freshness: float = 1.0
    max_increase: float = 0.1
    min_weight: float = 0.05

    def __post_init__(self) -> None:
        if not 1.0 <= self.alpha_low <= self.alpha_high:
            raise ConfigError(
                f"need 1 ≤ alpha_low ≤ alpha_high, got {self.alpha_low} and {self.alpha_high}"
            )
        if self.regress_after < 1:
            raise ConfigError(f"regress_after must be ≥ 1, got {self.regress_after}")
        if self.freshness < 0 or self.max_increase <= 0:
            raise ConfigError("freshness must be ≥ 0 and max_increase > 0")
        if not 0.0 < self.min_weight <= 1.0:
            raise ConfigError(f"min_weight must be in (0, 1], got {self.min_weight}")


@dataclass(frozen=True)
class WatermarkStep:
    """The outcome of one control interval: the new weights, what was done to each server
    (:data:`HOLD` ...), which estimates were fresh, and the mean latency over them (NaN when
    fewer than two were)."""

    weights: np.ndarray
    action: np.ndarray
    fresh: np.ndarray
    mean_latency_ns: float


class WatermarkController:
    """Per-server weights adjusted once per control interval from latency estimates."""

    def __init__(
        self,
        configured: np.ndarray | int,
        params: WatermarkParams | None = None,
    ) -> None:
        """``configured``: the configured weights, or a number of servers (weights 1)."""
        self.params = params or WatermarkParams()
        base = (
            np.ones(configured)
            if isinstance(configured, int)
            else np.asarray(configured, dtype=np.float64)
        )
        if base.ndim != 1 or base.size == 0 or not np.all(np.isfinite(base) & (base > 0)):
            raise ConfigError("configured weights must be positive, one per server")
        self.configured = base.copy()
        self.weights = base.copy()
        self.idle = np.zeros(base.size, dtype=np.int64)  # intervals since a latency rule acted

    def step(
        self, latency_ns: np.ndarray, samples: np.ndarray, connections: np.ndarray
    ) -> WatermarkStep:
        """Apply the rules to one interval's per-server latency estimates (NaN: none), the
        number of latency samples behind each, and each server's active connections."""
        p = self.params
        latency = np.asarray(latency_ns, dtype=np.float64)
        samples = np.asarray(samples, dtype=np.float64)
        connections = np.asarray(connections, dtype=np.float64)
        n = self.weights.size
        if latency.shape != (n,) or samples.shape != (n,) or connections.shape != (n,):
            raise ConfigError(
                f"need one latency, sample count and connection count per server ({n})"
            )
        fresh = (
            (connections > 0)
            & (samples >= p.freshness * connections)
            & np.isfinite(latency)
            & (latency > 0)
        )
        w, base = self.weights.copy(), self.configured
        action = np.full(n, HOLD, dtype=np.int8)
        mean = float(latency[fresh].mean()) if fresh.sum() >= 2 else float("nan")
        if fresh.sum() >= 2:
            high = fresh & (latency > p.alpha_high * mean)
            w[high] = np.maximum(w[high] * mean / latency[high], p.min_weight * base[high])
            action[high] = DECREASE
            low = fresh & (latency < p.alpha_low * mean) & (w < base)
            w[low] = np.minimum(w[low] + p.max_increase * base[low], base[low])
            action[low] = INCREASE
        acted = action != HOLD
        self.idle = np.where(acted, 0, self.idle + 1)
        regress = ~acted & (self.idle >= p.regress_after) & (w != base)
        w[regress] = np.minimum(w[regress] + p.max_increase * base[regress], base[regress])
        action[regress] = REGRESS
        self.weights = w
        return WatermarkStep(w.copy(), action, fresh, mean)
