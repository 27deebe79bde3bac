"""A/B tests of a service version on an end-to-end metric (TraceWeaver, SIGCOMM '24, §6.4.2).

A new version B of a service takes a small share of its calls. Whether B improves what users see
is a question about the end-to-end latency of the requests that went through B, against those
that went through A — which needs traces: the version is a property of the callee's server span
(here: the instance that served it), the end-to-end latency a property of the request's root.
Without traces one can only compare all traffic in a period with B against a period without it,
where B's effect is diluted by its share; TraceWeaver's argument is that traces make a 5%
improvement detectable at 2% of traffic where the untraced comparison needs about 20%. The
paper's text was not retrievable here; this follows its description in the issue.

The comparison is a two-sample Welch t-test (unequal variances) on log end-to-end latency: the
log makes a relative improvement an additive one and tames the right tail of latencies.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats

from tacit.diagnosis.inject import pick_requests, scale_self_time
from tacit.diagnosis.tail import request_roots
from tacit.errors import ConfigError
from tacit.model.spans import SERVER, SpanTable
from tacit.model.traces import roots

VERSION_B = "@B"
"""Suffix of the instance name of the spans served by version B."""


@dataclass
class ABResult:
    """One comparison: sample sizes, mean latencies (ms), relative effect, t and p."""

    method: str
    n_a: int
    n_b: int
    mean_a_ms: float
    mean_b_ms: float
    effect: float
    t: float
    p: float

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def route_to_b(
    spans: SpanTable, service: str, share: float, effect: float, seed: int
) -> tuple[SpanTable, np.ndarray]:
    """Simulate version B: a random ``share`` of the requests calling ``service`` are served by
    B, whose self time is ``1 + effect`` times A's (later events move, :mod:`.inject`); B's
    spans get their instance suffixed with :data:`VERSION_B`. Returns the spans and B's rows."""
    if effect <= -1:
        raise ConfigError(f"effect must be above -100%, not {effect}")
    rows = pick_requests(spans, service, share, seed)
    out = scale_self_time(spans, rows, 1 + effect)
    codes = {
        int(i): out.strings.code(f"{out.strings[int(i)]}{VERSION_B}") for i in out.instance[rows]
    }
    out.instance[rows] = [codes[int(i)] for i in out.instance[rows]]
    return out, rows


def version_b_rows(spans: SpanTable, service: str) -> tuple[np.ndarray, np.ndarray]:
    """Server spans of ``service``, and the mask of those served by version B."""
    rows = np.flatnonzero((spans.service == spans.strings.find(service)) & (spans.kind == SERVER))
    names = spans.strings.values
    is_b = np.array([names[i].endswith(VERSION_B) for i in spans.instance[rows]], dtype=bool)
    return rows, is_b


def welch(method: str, a: np.ndarray, b: np.ndarray) -> ABResult:
    """Welch's t-test on log latencies (ns) of groups A and B."""
    if len(a) < 2 or len(b) < 2:
        raise ConfigError(f"{method}: need two samples of at least 2 (got {len(a)} and {len(b)})")
    t, p = stats.ttest_ind(np.log(b), np.log(a), equal_var=False)
    return ABResult(
        method=method,
        n_a=len(a),
        n_b=len(b),
        mean_a_ms=float(a.mean() / 1e6),
        mean_b_ms=float(b.mean() / 1e6),
        effect=float(np.exp(np.log(b).mean() - np.log(a).mean()) - 1),
        t=float(t),
        p=float(p),
    )


def ab_traces(spans: SpanTable, service: str) -> ABResult:
    """End-to-end latency of the requests whose call to ``service`` went to B against those that
    went to A (requests through both versions are left out). ``spans.parent`` may be a
    reconstruction's: a B span's request is the root its chosen parents lead to."""
    rows, is_b = version_b_rows(spans, service)
    heads = request_roots(spans)
    root = roots(spans.parent)
    e2e = spans.end - spans.start
    through_b = np.isin(heads, root[rows[is_b]])
    through_a = np.isin(heads, root[rows[~is_b]])
    return welch(
        "traces: end-to-end, A vs B requests",
        e2e[heads[through_a & ~through_b]],
        e2e[heads[through_b & ~through_a]],
    )


def ab_spans(spans: SpanTable, service: str) -> ABResult:
    """The per-span comparison: ``service``'s own span latency, B against A (not end-to-end)."""
    rows, is_b = version_b_rows(spans, service)
    d = spans.end - spans.start
    return welch("spans: the service's own latency, A vs B", d[rows[~is_b]], d[rows[is_b]])


def ab_periods(spans: SpanTable, service: str, share: float, effect: float, seed: int) -> ABResult:
    """Without traces: end-to-end latency of all requests in a period where ``share`` of the
    calls go to B, against a period without B. The requests are split at random into the two
    periods (so both see the same workload); B is routed in the first only."""
    heads = request_roots(spans)
    root = roots(spans.parent)
    rng = np.random.default_rng(seed)
    in_b_period = rng.random(len(heads)) < 0.5
    keep = np.isin(root, heads[in_b_period])
    period_b, _ = route_to_b(spans.take(keep), service, share, effect, seed)
    control = spans.take(~keep)
    e2e_b = (period_b.end - period_b.start)[request_roots(period_b)]
    e2e_a = (control.end - control.start)[request_roots(control)]
    return welch("no traces: end-to-end, period with B vs without", e2e_a, e2e_b)
