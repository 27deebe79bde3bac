"""A/B tests of a service version on an end-to-end metric (TraceWeaver, SIGCOMM '24, §6.4.2).

A new version B of a service takes a small share of its calls. Whether B improves what users see
is a question about the end-to-end latency of the requests that went through B, against those
that went through A — which needs traces: the version is a property of the callee's server span
(here: the instance that served it), the end-to-end latency a property of the request's root.
Without traces one can only compare all traffic in a period with B against a period without it,
where B's effect is diluted by its share; TraceWeaver's argument is that traces make a 5%
improvement detectable at 2% of traffic where the untraced comparison needs about 20% (§6.4.2,
Fig. 6d: two-sample t-tests, p < 0.05, with A and B separated at 90 % accuracy; the paper's
metric is a user-satisfaction score, here the end-to-end latency).

**What "a 5% improvement" is.** The claim is about what users see, so the target reading
(``basis="e2e-mean"``, the default of the benchmark) is: version B's requests have a 5% lower
end-to-end latency, in expectation (geometric mean), by a uniform speed-up of B's own code —
B's self time (YTrace §4: its duration minus the union of its calls) is scaled by one factor
(:func:`self_time_factor`), calibrated on all the service's requests so that the mean of
``log(1 - (1 - factor) * self / end-to-end)`` is ``log(0.95)``. This assumes the service's self
time is on its requests' critical path (true of a service called in sequence); the realised
effect is measured, not assumed (:func:`ab_power` reports it). The version must be a plausible
one: B's self time shrinks by one factor for all its calls, cache hits and misses alike, and the
service must own enough of its requests' time. In HotelReservation (load100) every request
calls each of six services once; the benchmark's B is the reservation service, the one that owns
the largest part of its requests' time (frontend, profile, geo and search own too little of
theirs to save 5% even with no self time at all). Two other readings stay available: ``"self"``
— B's own code is 5% faster (self time 0.95 of A's; what a microbenchmark shows, which moves
the service's requests by much less than 5%), and ``"e2e"`` — B saves 5% of each request it
serves, cut from its self time and clipped at zero (so B realises less than 5% where its calls
are shorter than 5% of their request).

**Power.** :func:`ab_power` repeats the routing over seeds and counts the tests with p below
alpha; ``bench/bench_abtest.py`` runs it on a bootstrap of the real traces
(:func:`tacit.diagnosis.inject.resample_traces`). For each seed B is routed once, to the largest
share, and reconstructed once; each smaller share takes a nested random subset of B's requests
as its B group, and the requests through the rest of B are left out of its test (they are
neither version's sample). The smaller share's reconstruction then sees a workload with more of
B's timings than a real deployment of that share would; checked against one routing and
reconstruction per share, the reconstructed test's p stays close to the ground-truth test's in
both designs, so reconstructing once per seed loses nothing measurable.

The comparison is a two-sample Welch t-test (unequal variances) on log end-to-end latency: the
log makes a relative improvement an additive one and tames the right tail of latencies.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import optimize, stats

from tacit.diagnosis.inject import pick_requests, scale_self_time
from tacit.diagnosis.tail import blind_and_reconstruct, request_roots, self_latency
from tacit.errors import ConfigError
from tacit.model.spans import SERVER, SpanTable
from tacit.runs import contained, distinct

VERSION_B = "@B"
"""Suffix of the instance name of the spans served by version B."""

BASES = ("self", "e2e", "e2e-mean")
"""What B's ``effect`` is relative to: the service's self time, each request's latency, or the
expected latency of B's requests (module docstring)."""


@dataclass
class ABResult:
    """One comparison: sample sizes, mean latencies (ms), relative effect, t and p.

    The test compares log latencies, so ``effect`` is the ratio of the geometric means
    (``geomean_b_ms / geomean_a_ms - 1``); the arithmetic means can differ in sign from it
    when a few slow requests dominate one group."""

    method: str
    n_a: int
    n_b: int
    mean_a_ms: float
    mean_b_ms: float
    geomean_a_ms: float
    geomean_b_ms: float
    effect: float
    t: float
    p: float

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def self_time_factor(spans: SpanTable, service: str, effect: float) -> float:
    """The factor on ``service``'s self time that changes the end-to-end latency of its requests
    by ``effect`` in expectation: the mean over its server spans of
    ``log(1 + (factor - 1) * self / end-to-end)`` equals ``log(1 + effect)`` (``basis
    "e2e-mean"``, module docstring). Raises :class:`ConfigError` when the service's self time is
    too small a part of its requests for that effect."""
    rows = np.flatnonzero((spans.service == spans.strings.find(service)) & (spans.kind == SERVER))
    if len(rows) == 0:
        raise ConfigError(f"no server spans of service {service!r} in the traces")
    _, root, _ = request_roots(spans)
    e2e = (spans.end - spans.start)[root[rows]]
    part = np.divide(self_latency(spans)[rows], e2e, out=np.zeros(len(rows)), where=e2e > 0)
    target = np.log1p(effect)

    def gap(factor: float) -> float:
        return float(np.mean(np.log(np.maximum(1 + (factor - 1) * part, 1e-12)))) - target

    if effect == 0:
        return 1.0
    if effect < 0 and gap(0.0) > 0:
        raise ConfigError(
            f"{service}'s self time is too small a part of its requests for a {effect:+.1%} "
            f"change: even without it they are only {np.expm1(gap(0.0) + target):+.1%} faster"
        )
    hi = 2.0
    while effect > 0 and gap(hi) < 0:
        if hi > 1e6:
            raise ConfigError(f"{service} has no self time to scale by a {effect:+.1%} change")
        hi *= 2
    return float(optimize.brentq(gap, 0.0, 1.0) if effect < 0 else optimize.brentq(gap, 1.0, hi))


def route_to_b(
    spans: SpanTable, service: str, share: float, effect: float, seed: int, basis: str = "self"
) -> tuple[SpanTable, np.ndarray]:
    """Simulate version B: a random ``share`` of the requests calling ``service`` are served by
    B, whose self time changes by ``effect`` (a fraction of A's self time, of each request's
    end-to-end latency, or of the expected end-to-end latency of B's requests: ``basis``, see
    the module docstring); later events move (:mod:`.inject`). B's spans get their instance
    suffixed with :data:`VERSION_B`. Returns the spans and B's rows."""
    if effect <= -1:
        raise ConfigError(f"effect must be above -100%, not {effect}")
    if basis not in BASES:
        raise ConfigError(f"basis must be one of {', '.join(BASES)}, not {basis!r}")
    rows = pick_requests(spans, service, share, seed)
    factor = np.full(len(rows), 1 + effect)
    if basis == "e2e-mean":
        factor[:] = self_time_factor(spans, service, effect)
    if basis == "e2e":
        heads, root, _ = request_roots(spans)
        e2e = np.zeros(len(spans), dtype=np.int64)
        e2e[heads] = (spans.end - spans.start)[heads]
        own = self_latency(spans)[rows]
        change = effect * e2e[root[rows]]
        factor = np.clip(
            1 + np.divide(change, own, out=np.zeros(len(rows)), where=own > 0), 0, None
        )
    out = scale_self_time(spans, rows, factor)
    _suffix_instance(out, rows, VERSION_B)
    return out, rows


def _suffix_instance(spans: SpanTable, rows: np.ndarray, suffix: str) -> None:
    codes = {
        int(i): spans.strings.code(f"{spans.strings[int(i)]}{suffix}")
        for i in distinct(spans.instance[rows])
    }
    spans.instance[rows] = [codes[int(i)] for i in spans.instance[rows]]


def version_b_rows(spans: SpanTable, service: str) -> tuple[np.ndarray, np.ndarray]:
    """Server spans of ``service``, and per span the smallest share whose B group it is in:
    NaN for version A, 1 for B, the share of a nested subset (:func:`mark_nested`)."""
    rows = np.flatnonzero((spans.service == spans.strings.find(service)) & (spans.kind == SERVER))
    names = spans.strings.values
    tier = np.full(len(rows), np.nan)
    for code in distinct(spans.instance[rows]):
        _, b, shares = names[code].rpartition(VERSION_B)
        if b:
            tier[spans.instance[rows] == code] = float(shares.rpartition("/")[2] or 1)
    return rows, tier


def _groups(spans: SpanTable, service: str, share: float | None) -> tuple[np.ndarray, ...]:
    """Rows of ``service``'s server spans, and the masks of version A, of the B group (all of B,
    or the nested subset of ``share``) and of the rest of B."""
    rows, tier = version_b_rows(spans, service)
    is_b = ~np.isnan(tier)
    chosen = is_b if share is None else tier <= share
    return rows, ~is_b, chosen, is_b & ~chosen


def welch(method: str, a: np.ndarray, b: np.ndarray) -> ABResult:
    """Welch's t-test on log latencies (ns) of groups A and B."""
    if len(a) < 2 or len(b) < 2:
        raise ConfigError(f"{method}: need two samples of at least 2 (got {len(a)} and {len(b)})")
    a, b = np.maximum(a, 1), np.maximum(b, 1)  # a span cut to nothing: 1 ns, the resolution
    log_a, log_b = np.log(a), np.log(b)
    t, p = stats.ttest_ind(log_b, log_a, equal_var=False)
    return ABResult(
        method=method,
        n_a=len(a),
        n_b=len(b),
        mean_a_ms=float(a.mean() / 1e6),
        mean_b_ms=float(b.mean() / 1e6),
        geomean_a_ms=float(np.exp(log_a.mean()) / 1e6),
        geomean_b_ms=float(np.exp(log_b.mean()) / 1e6),
        effect=float(np.exp(log_b.mean() - log_a.mean()) - 1),
        t=float(t),
        p=float(p),
    )


def ab_traces(spans: SpanTable, service: str, share: float | None = None) -> ABResult:
    """End-to-end latency of the requests whose call to ``service`` went to B against those that
    went to A (requests through both versions are left out). ``spans.parent`` may be a
    reconstruction's: a B span's request is the root its chosen parents lead to. ``share``
    narrows group B to a nested subset (:func:`mark_nested`), leaving out the requests through
    the rest of B (they are neither version's sample)."""
    rows, a, b, rest = _groups(spans, service, share)
    heads, root, _ = request_roots(spans)
    e2e = spans.end - spans.start
    through_a, through_b, elsewhere = (contained(heads, root[rows[m]]) for m in (a, b, rest))
    return welch(
        "traces: end-to-end, A vs B requests",
        e2e[heads[through_a & ~through_b & ~elsewhere]],
        e2e[heads[through_b & ~through_a & ~elsewhere]],
    )


def ab_spans(spans: SpanTable, service: str, share: float | None = None) -> ABResult:
    """The per-span comparison: ``service``'s own span latency, B against A (not end-to-end);
    ``share`` narrows B as in :func:`ab_traces`."""
    rows, a, b, _ = _groups(spans, service, share)
    d = spans.end - spans.start
    return welch("spans: the service's own latency, A vs B", d[rows[a]], d[rows[b]])


def ab_periods(
    spans: SpanTable, service: str, share: float, effect: float, seed: int, basis: str = "self"
) -> ABResult:
    """Without traces: end-to-end latency of all requests in a period where ``share`` of the
    calls go to B, against a period without B. The requests are split at random into the two
    periods (so both see the same workload); B is routed in the first only."""
    heads, root, _ = request_roots(spans)
    rng = np.random.default_rng(seed)
    in_b_period = rng.random(len(heads)) < 0.5
    keep = contained(root, heads[in_b_period])
    period_b, _ = route_to_b(spans.take(keep), service, share, effect, seed, basis)
    control = spans.take(~keep)
    e2e_b = (period_b.end - period_b.start)[request_roots(period_b)[0]]
    e2e_a = (control.end - control.start)[request_roots(control)[0]]
    return welch("no traces: end-to-end, period with B vs without", e2e_a, e2e_b)


METHODS = ("traces (reconstructed)", "traces (ground truth)", "spans", "no traces")
"""The comparisons :func:`ab_power` runs, in order."""


def mark_nested(spans: SpanTable, service: str, share: float, seed: int) -> np.ndarray:
    """Mark, among B's spans, those of a seeded random ``share`` of the traces calling
    ``service``, drawn from the traces of B's smallest group so far (their instance gets
    ``/share`` after :data:`VERSION_B`, which survives blinding and the reordering of rows by role
    inference): a random subset of a random subset is a random subset, so the smaller share's
    routing is nested in the larger one's. Returns the marked rows."""
    rows, tier = version_b_rows(spans, service)
    want = round(share * len(distinct(spans.trace[rows])))
    inner = rows[tier == np.nanmin(tier)] if (~np.isnan(tier)).any() else rows[:0]
    traces = distinct(spans.trace[inner])
    if want > len(traces):
        raise ConfigError(f"a share of {share} is not nested in the routed share")
    chosen = np.random.default_rng([seed, want]).choice(traces, want, replace=False)
    marked = inner[contained(spans.trace[inner], chosen)]
    _suffix_instance(spans, marked, f"/{share:g}")
    return marked


def ab_power(
    spans: SpanTable,
    service: str,
    shares: Sequence[float],
    effect: float,
    seeds: Iterable[int],
    basis: str = "self",
    alpha: float = 0.05,
    blind: bool = True,
) -> list[dict[str, object]]:
    """Detection power of each comparison of :data:`METHODS` at each of ``shares``: over
    ``seeds`` (each a fresh random routing), the share of runs with p < ``alpha``, each run's p
    and B's mean effect on the metric. Per seed, B is routed to the largest share and the
    traces are blinded and reconstructed once (:func:`.tail.blind_and_reconstruct`: B changes
    the timings reconstruction works from, so routing comes first; ``blind=False`` skips it);
    the smaller shares take nested subsets of B (:func:`mark_nested`, module docstring). The
    untraced comparison routes each share on its own (:func:`ab_periods`). One row per share."""
    if not shares:
        raise ConfigError("ab_power needs at least one share")
    methods = METHODS if blind else METHODS[1:]
    p: dict[float, dict[str, list[float]]] = {s: {m: [] for m in methods} for s in shares}
    effects: dict[float, dict[str, list[float]]] = {s: {m: [] for m in methods} for s in shares}
    for seed in seeds:
        routed, _ = route_to_b(spans, service, max(shares), effect, seed, basis)
        for share in sorted(shares, reverse=True)[1:]:
            mark_nested(routed, service, share, seed)
        rebuilt = blind_and_reconstruct(routed)[0] if blind else None
        for share in shares:
            group = share if share < max(shares) else None  # the largest: all of B
            results = [
                ab_traces(routed, service, group),
                ab_spans(routed, service, group),
                ab_periods(spans, service, share, effect, seed, basis),
            ]
            if rebuilt is not None:
                results.insert(0, ab_traces(rebuilt, service, group))
            for m, r in zip(methods, results, strict=True):
                p[share][m].append(r.p)
                effects[share][m].append(r.effect)
    runs = len(p[shares[0]][methods[0]])
    if runs == 0:
        raise ConfigError("ab_power needs at least one seed")
    return [
        {"share": s, "runs": runs}
        | {
            m: {
                "power": float(np.mean(np.array(p[s][m]) < alpha)),
                "effect": float(np.mean(effects[s][m])),
                "p": p[s][m],
            }
            for m in methods
        }
        for s in shares
    ]
