"""The slowest requests and their culprit services (TraceWeaver, SIGCOMM '24, §6.4.1).

TraceWeaver's first use case takes the slowest p% of requests by end-to-end latency and compares
each service's latency in them with its latency in all traffic: the services that are much
slower in the slow requests are the culprits. A per-span view (each service's own slowest p% of
spans) cannot do this — every service has a tail, so it blames every service. The paper's
experiment (§6.4.1): Reserve and Profile are slowed by 40 ms in a random 10 % of requests, the
slowest 2 % are taken, and the reconstructed traces name the two culprits as the ground truth
does (Fig. 6c; ``bench/bench_tail.py`` repeats it on the real exports). YTrace (Kanuparthy et al.,
§4, localization) supplies the latency a service is charged with: its *self* latency, the time
its server spans are not waiting on a call they made (span duration minus the union of its
children), so that a slow callee does not make its callers look slow too.

The end-to-end latency of a request is the duration of its root (a server span without parent).

**Culprits.** A culprit is a service in which the typical (median) slow request spends at least
``min_ratio`` times as long as the typical request does (self latency, median over the service's
server spans in the subset against all of them). The default, a doubling, is this module's
choice (the paper names no number): it asks for a change the size of the tail itself rather than
a statistically significant one, because in the slowest requests every service is a little
slower (load, queueing) and significance would flag them all. The rule applies unchanged to the
per-span view (each service's subset is its own slowest spans), where every service's tail is
more than twice its median — which is why that view blames every service. Each service's
``share`` of the end-to-end excess (its mean self latency per request, slow minus all, over the
end-to-end mean, slow minus all) is reported beside it: where the time of the slow requests went.

**Uncertain links.** On reconstructed traces a span belongs to a slow request only with some
probability: each client span's top-K alternative parents (``Reconstruction.alternatives``,
log-likelihood scores) are turned into probabilities by a softmax, and the probability that a
span is in a slow request is propagated from the roots down the alternatives. Slow-subset
statistics weight every server span by that probability instead of trusting the single best
assignment (a sparse matrix of link probabilities, one product per level: 1 M spans in under a
second).

**Bad input.** Requests are found by
:func:`tacit.diagnosis.execution_graph.trace_roots`: a cycle of parent links is an
:class:`tacit.errors.InputError` naming the trace and record; spans under a missing parent are
left out of their trace and counted in the profile's ``accounting``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numba
import numpy as np
import scipy.sparse as sp

from tacit.diagnosis.execution_graph import trace_roots
from tacit.errors import ConfigError
from tacit.model.spans import NONE, SERVER, SpanTable
from tacit.reconstruct.alternatives import Alternatives
from tacit.reconstruct.result import Reconstruction
from tacit.runs import contained, distinct, run_bounds


@dataclass(frozen=True)
class TailParams:
    """Parameters of :func:`tail_profile`.

    ``percent``: the slowest share of requests (2%: TraceWeaver §6.4.1's experiment).
    ``metric``: ``"self"`` (self latency, YTrace §4) or ``"span"`` (server span duration).
    ``min_ratio``: a culprit's median latency in the subset over its median in all traffic.
    """

    percent: float = 2.0
    metric: str = "self"
    min_ratio: float = 2.0

    def __post_init__(self) -> None:
        if not 0 < self.percent <= 100:
            raise ConfigError(f"percent must be in (0, 100], not {self.percent}")
        if self.metric not in ("self", "span"):
            raise ConfigError(f"metric must be 'self' or 'span', not {self.metric!r}")


@dataclass
class TailProfile:
    """Per-service latency in a slow subset against all traffic, and the culprits it names.

    ``profile[service]``: ``mean_all``, ``mean_slow``, ``median_all``, ``median_slow`` (ms, per
    server span), ``ratio`` (mean_slow / mean_all), ``excess_ms`` (per request) and ``share``
    (of the end-to-end excess). ``requests``: all requests; ``slow``: requests in the subset;
    ``e2e``: mean end-to-end latency (ms) of all and of the slow subset.
    """

    view: str
    percent: float
    requests: int
    slow: int
    e2e: dict[str, float]
    profile: dict[str, dict[str, float]]
    culprits: list[str]
    accounting: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {
            "view": self.view,
            "percent": self.percent,
            "requests": self.requests,
            "slow": self.slow,
            "e2e": self.e2e,
            "culprits": self.culprits,
            "profile": self.profile,
            "accounting": self.accounting,
        }


def self_latency(spans: SpanTable) -> np.ndarray:
    """Per span: its duration minus the union of its children's intervals (clipped to it), ns."""
    has = np.flatnonzero(spans.parent != NONE)
    order = has[np.lexsort((spans.start[has], spans.parent[has]))]
    return _self_latency(spans.start, spans.end, spans.parent, order)


@numba.njit(cache=True)
def _self_latency(start, end, parent, kids):  # pragma: no cover - compiled
    out = end - start
    i = 0
    while i < len(kids):
        p = parent[kids[i]]
        lo, hi = start[p], end[p]
        covered = 0
        reach = lo
        while i < len(kids) and parent[kids[i]] == p:
            s = max(start[kids[i]], reach)
            e = min(end[kids[i]], hi)
            if e > s:
                covered += e - s
                reach = e
            i += 1
        out[p] -= covered
    return out


def request_roots(spans: SpanTable) -> tuple[np.ndarray, np.ndarray, dict[str, int]]:
    """The requests of ``spans``: the root row of each trace that is a server span, every span's
    topmost ancestor, and warnings (:func:`tacit.diagnosis.execution_graph.trace_roots`: the
    subtrees of spans whose parent is missing are counted as fragments, not as requests; a cycle
    of parent links raises :class:`tacit.errors.InputError` naming the trace)."""
    _, root, heads, warnings = trace_roots(spans)
    return heads[spans.kind[heads] == SERVER], root, warnings


def requests_between(spans: SpanTable, start_ns: int, end_ns: int) -> SpanTable:
    """The traces of the requests whose root starts in ``[start_ns, end_ns)`` (a time window,
    e.g. a fault's), whole."""
    heads, root, _ = request_roots(spans)
    begins = spans.start[heads]
    return spans.take(contained(root, heads[(begins >= start_ns) & (begins < end_ns)]))


def link_probabilities(
    spans: SpanTable, rec: Reconstruction | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every link as (child rows, parent rows, probabilities): certain parents with probability
    1, and for each client span of ``rec.alternatives`` each alternative parent with the softmax
    of its log-likelihood score among them (the chosen parent, when not among the scored
    alternatives, is added with the best score)."""
    alts = Alternatives.of(rec.alternatives) if rec is not None else Alternatives.empty()
    starts, sizes = run_bounds(alts.owner)
    alt_rows = alts.owner[starts]
    group = np.repeat(np.arange(len(alt_rows)), sizes)
    cand, score = alts.parent, alts.score
    chosen = spans.parent[alt_rows]
    listed = np.zeros(len(alt_rows), dtype=bool)
    listed[group[cand == chosen[group]]] = True
    best = np.full(len(alt_rows), -np.inf)
    np.maximum.at(best, group, score)
    best[~np.isfinite(best)] = 0.0
    extra = np.flatnonzero((chosen != NONE) & ~listed)
    group = np.concatenate([group, extra])
    cand = np.concatenate([cand, chosen[extra]])
    w = np.exp(np.concatenate([score, best[extra]]) - best[group])
    prob = w / np.bincount(group, w, len(alt_rows))[group]
    certain = np.flatnonzero(spans.parent != NONE)
    certain = certain[~contained(certain, alt_rows)]
    return (
        np.concatenate([certain, alt_rows[group]]),
        np.concatenate([spans.parent[certain], cand]),
        np.concatenate([np.ones(len(certain)), prob]),
    )


def slow_probability(
    spans: SpanTable, slow_roots: np.ndarray, rec: Reconstruction | None = None
) -> np.ndarray:
    """Per span, the probability that it belongs to a request rooted at one of ``slow_roots``.

    With ``rec`` (uncertain links; ``spans.parent`` is then ``rec.parent``), a client span's
    parent is each of its alternatives with softmax probability (:func:`link_probabilities`);
    otherwise parents are certain. The probability flows down one level a round.
    """
    n = len(spans)
    child, parent, prob = link_probabilities(spans, rec)
    step = sp.csr_matrix((prob, (child, parent)), shape=(n, n))
    p = np.zeros(n)
    p[slow_roots] = 1.0
    for _ in range(64):  # one level a round; traces are far shallower
        nxt = step @ p
        nxt[slow_roots] = 1.0
        if np.allclose(nxt, p):
            break
        p = nxt
    return p


def tail_profile(
    spans: SpanTable, params: TailParams | None = None, rec: Reconstruction | None = None
) -> TailProfile:
    """The slowest ``params.percent`` of requests against all traffic (see the module docstring).

    ``spans`` are traces (ground truth, or reconstructed: ``parent`` from ``rec``, which is then
    used for the probabilities of uncertain links).
    """
    p = params or TailParams()
    heads, root, warnings = request_roots(spans)
    if len(heads) == 0:
        raise ConfigError("no requests: no server span without a parent in the traces")
    e2e = (spans.end - spans.start)[heads]
    is_slow = np.zeros(len(heads), dtype=bool)
    is_slow[np.argsort(-e2e, kind="stable")[: max(1, round(len(heads) * p.percent / 100))]] = True
    slow_roots, k = heads[is_slow], int(is_slow.sum())
    weight = slow_probability(spans, slow_roots, rec)
    in_request = contained(root, heads)
    value = self_latency(spans) if p.metric == "self" else spans.end - spans.start
    server = np.flatnonzero((spans.kind == SERVER) & in_request)
    e2e_excess = (e2e[is_slow].mean() - e2e.mean()) / 1e6
    profile = _profile(spans, server, value, weight, len(heads), k)
    for v in profile.values():
        v["share"] = v["excess_ms"] / e2e_excess if e2e_excess > 0 else 0.0
    return TailProfile(
        view="requests",
        percent=p.percent,
        requests=len(heads),
        slow=k,
        e2e={
            "mean_all_ms": float(e2e.mean() / 1e6),
            "mean_slow_ms": float(e2e[is_slow].mean() / 1e6),
        },
        profile=profile,
        culprits=_culprits(profile, p.min_ratio),
        accounting={
            "spans": len(spans),
            "server_spans_in_requests": len(server),
            "spans_outside_requests": int((~in_request).sum()),
            **warnings,
        },
    )


def span_tail_profile(spans: SpanTable, params: TailParams | None = None) -> TailProfile:
    """The per-span view: each service's own slowest ``percent`` of server spans by duration (what
    a per-span latency dashboard shows) against all of its spans, with the same culprit rule; it
    needs no traces."""
    p = params or TailParams()
    value = spans.end - spans.start
    server = np.flatnonzero(spans.kind == SERVER)
    weight = np.zeros(len(spans))
    for svc in distinct(spans.service[server]):
        rows = server[spans.service[server] == svc]
        k = max(1, round(len(rows) * p.percent / 100))
        weight[rows[np.argsort(-value[rows], kind="stable")[:k]]] = 1.0
    n = len(server)
    k = int(weight.sum())
    profile = _profile(spans, server, value, weight, n, k, per_span=True)
    total = sum(max(v["excess_ms"], 0.0) for v in profile.values())
    for v in profile.values():
        v["share"] = v["excess_ms"] / total if total > 0 else 0.0
    return TailProfile(
        view="spans",
        percent=p.percent,
        requests=n,
        slow=k,
        e2e={},
        profile=profile,
        culprits=_culprits(profile, p.min_ratio),
        accounting={"spans": len(spans), "server_spans": n},
    )


def _profile(
    spans: SpanTable,
    server: np.ndarray,
    value: np.ndarray,
    weight: np.ndarray,
    n_all: int,
    n_slow: int,
    per_span: bool = False,
) -> dict[str, dict[str, float]]:
    """Per-service statistics of ``value`` at ``server`` rows: all vs weighted slow subset.

    ``excess_ms`` is per request (sum over the service's spans / number of requests) for the
    request view; per span (mean slow − mean all) for the per-span view.
    """
    out: dict[str, dict[str, float]] = {}
    svc = spans.service[server]
    for code in distinct(svc):
        rows = server[svc == code]
        v = value[rows] / 1e6
        w = weight[rows]
        slow_w = w.sum()
        mean_slow = float((v * w).sum() / slow_w) if slow_w > 0 else 0.0
        mean_all = float(v.mean())
        median_all = float(np.median(v))
        median_slow = _weighted_median(v, w)
        if per_span:
            excess = mean_slow - mean_all
        else:
            excess = float((v * w).sum() / n_slow - v.sum() / n_all)
        out[str(spans.strings[int(code)])] = {
            "spans": len(rows),
            "spans_slow": float(slow_w),
            "mean_all": mean_all,
            "mean_slow": mean_slow,
            "median_all": median_all,
            "median_slow": median_slow,
            "ratio": mean_slow / mean_all if mean_all > 0 else float("inf"),
            "median_ratio": median_slow / median_all if median_all > 0 else float("inf"),
            "excess_ms": excess,
        }
    return dict(sorted(out.items(), key=lambda kv: -kv[1]["excess_ms"]))


def _weighted_median(v: np.ndarray, w: np.ndarray) -> float:
    if w.sum() <= 0:
        return float("nan")
    order = np.argsort(v)
    cum = np.cumsum(w[order])
    return float(v[order][np.searchsorted(cum, cum[-1] / 2)])


def _culprits(profile: dict[str, dict[str, float]], min_ratio: float) -> list[str]:
    """Services whose median latency in the subset is at least ``min_ratio`` times their median
    in all traffic, largest ratio first."""
    hit = [
        (v["median_ratio"], name) for name, v in profile.items() if v["median_ratio"] >= min_ratio
    ]
    return [name for _, name in sorted(hit, reverse=True)]


def blind_and_reconstruct(spans: SpanTable) -> tuple[SpanTable, Reconstruction]:
    """Blind ground-truth traces (as :func:`tacit.model.roles.infer_roles` left them) and
    reconstruct them with TraceWeaver, the call graph learned from their own ground truth as
    :func:`tacit.evaluation.reconstruction.evaluate` does; returns the reconstructed traces (parents
    from the reconstruction) and the reconstruction."""
    from tacit.model.roles import infer_roles
    from tacit.reconstruct.callgraph import learn_callgraph
    from tacit.reconstruct.pipeline import reconstruct_blind

    traces, _, rec = reconstruct_blind(infer_roles(spans).without_truth(), learn_callgraph(spans))
    return traces, rec
