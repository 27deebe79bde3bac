"""Detection: which traces are significantly slower or faster than their baseline.

YTrace (Kanuparthy et al., "End-to-end Performance Diagnosis in Large Cloud and Content
Providers", §Detection): a session's latency is compared with "a baseline (normal behavior) ...
based on history", conditioned on "pre-defined confounding variables" (the page's attributes,
the user's, the time of day), and flagged when it deviates significantly; "YTrace currently
estimates a simple baseline as the historic inter-quartile range, since we are interested in
... both low and high user experience metrics". Here the key is the combination of the declared
confounders (endpoint, client group, time-of-day bucket), and a latency above ``Q3 + k·IQR``
is slower, below ``Q1 - k·IQR`` faster. The paper gives no multiplier: ``k = 1.5`` is Tukey's
fence, the standard IQR outlier rule (tacit's choice).

Confounders are read off each trace's root span (:data:`CONFOUNDERS`) or computed by a function
of the spans and the root rows. Every trace is accounted for: evaluated (normal, slower,
faster), or not, because its key has too little history or it is outside the evaluation window.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from tacit.errors import ConfigError
from tacit.model.spans import SpanTable
from tacit.runs import run_bounds

NORMAL = 0
SLOWER = 1
FASTER = -1
NO_BASELINE = 2
NOT_EVALUATED = 3
VERDICT_NAMES = {
    NORMAL: "normal",
    SLOWER: "slower",
    FASTER: "faster",
    NO_BASELINE: "no baseline (too little history for its key)",
    NOT_EVALUATED: "outside the evaluation window",
}

DAY_NS = 86_400 * 10**9

Confounder = str | Callable[[SpanTable, np.ndarray], np.ndarray]
"""A confounder: a name from :data:`CONFOUNDERS`, or a function of (spans, root rows) giving one
integer (or string) per trace."""


@dataclass(frozen=True)
class DetectParams:
    """Detection parameters (YTrace §3).

    ``k``: fence multiplier of the IQR (Tukey's 1.5). ``min_history``: a key needs this many
    historical traces for a baseline (a quartile of fewer is noise). ``bucket_ns``: width of the
    time-of-day buckets of the ``hour`` confounder (one hour, UTC).
    """

    k: float = 1.5
    min_history: int = 20
    bucket_ns: int = 3_600 * 10**9

    def __post_init__(self) -> None:
        if not (self.k >= 0):
            raise ConfigError(f"detect: k must be >= 0, got {self.k}")
        if self.min_history < 1:
            raise ConfigError(f"detect: min_history must be >= 1, got {self.min_history}")
        if not (0 < self.bucket_ns <= DAY_NS):
            raise ConfigError(
                f"detect: the time-of-day bucket must be in (0, 1 day], got {self.bucket_ns} ns"
            )


def _root_column(column: str) -> Callable[[SpanTable, np.ndarray], np.ndarray]:
    return lambda spans, roots: getattr(spans, column)[roots]


CONFOUNDERS: dict[str, Callable[[SpanTable, np.ndarray], np.ndarray]] = {
    "endpoint": _root_column("endpoint"),
    "service": _root_column("service"),
    "client": _root_column("peer"),
}
"""Confounders read off the root span: its endpoint, its service, and the client group (the
root's ``peer``: who called the entry point). ``hour`` is the time-of-day bucket (see
:class:`DetectParams`)."""


@dataclass
class Detection:
    """Per trace: its ``key`` (index into ``keys``, tuples of confounder values), ``latency``,
    the key's baseline ``q1``/``q3`` and fences ``low``/``high`` (NaN without a baseline), and
    its ``verdict`` (:data:`VERDICT_NAMES`). ``history`` marks the traces the baselines were
    learned from; ``accounting`` counts traces by verdict."""

    keys: list[tuple]
    key: np.ndarray
    latency: np.ndarray
    history: np.ndarray
    q1: np.ndarray
    q3: np.ndarray
    low: np.ndarray
    high: np.ndarray
    verdict: np.ndarray
    accounting: dict[str, int]

    def flagged(self) -> np.ndarray:
        """Indices of the traces flagged slower or faster."""
        return np.flatnonzero((self.verdict == SLOWER) | (self.verdict == FASTER))

    def ranked(self) -> np.ndarray:
        """The flagged traces, farthest from their key's interquartile midpoint first."""
        flagged = self.flagged()
        distance = np.abs(self.latency[flagged] - (self.q1[flagged] + self.q3[flagged]) / 2)
        return flagged[np.argsort(-distance, kind="stable")]


def confounder_keys(
    spans: SpanTable,
    roots: np.ndarray,
    confounders: Sequence[Confounder],
    params: DetectParams | None = None,
) -> tuple[np.ndarray, list[tuple]]:
    """The key of each trace (by root row) under ``confounders``, and the keys' values.

    String-coded columns are shown by their strings; ``hour`` by the bucket's start (HH:MM).
    """
    params = params or DetectParams()
    if not confounders:
        return np.zeros(len(roots), dtype=np.int64), [()]
    cols: list[np.ndarray] = []
    shows: list[Callable[[int], str]] = []
    for c in confounders:
        if c == "hour":
            bucket = (spans.start[roots] % DAY_NS) // params.bucket_ns
            cols.append(bucket)
            minutes = params.bucket_ns // (60 * 10**9)

            def clock(v: int, m: int = minutes) -> str:
                return f"{v * m // 60:02d}:{v * m % 60:02d}"

            shows.append(clock)
        elif isinstance(c, str):
            if c not in CONFOUNDERS:
                known = ", ".join([*CONFOUNDERS, "hour"])
                raise ConfigError(f"unknown confounder {c!r}: expected one of {known}")
            cols.append(CONFOUNDERS[c](spans, roots))

            def name(v: int) -> str:
                return spans.strings[v] or "-"

            shows.append(name)
        else:
            values = np.asarray(c(spans, roots))
            if len(values) != len(roots):
                raise ConfigError(
                    f"confounder {c!r} gave {len(values)} values for {len(roots)} traces"
                )
            uniq, codes = np.unique(values, return_inverse=True)
            cols.append(codes)

            def value(v: int, u: np.ndarray = uniq) -> str:
                return u[v].item()

            shows.append(value)
    uniq, key = np.unique(
        np.stack([np.asarray(x, np.int64) for x in cols], axis=1), axis=0, return_inverse=True
    )
    labels = [
        tuple(show(int(v)) for show, v in zip(shows, row, strict=True)) for row in uniq.tolist()
    ]
    return key.ravel(), labels


def history_window(
    start: np.ndarray, fraction: float = 0.5, until: int | None = None
) -> np.ndarray:
    """The history mask: traces starting before ``until`` (ns), or else in the first
    ``fraction`` of the time span of ``start``."""
    if until is None:
        if not 0 < fraction <= 1:
            raise ConfigError(f"history fraction must be in (0, 1], got {fraction}")
        if len(start) == 0:
            return np.zeros(0, dtype=bool)
        lo, hi = int(start.min()), int(start.max())
        if fraction >= 1:
            return np.ones(len(start), dtype=bool)
        until = lo + round((hi - lo) * fraction)
    return start < until


def detect(
    latency: np.ndarray,
    key: np.ndarray,
    history: np.ndarray,
    evaluate: np.ndarray | None = None,
    params: DetectParams | None = None,
    keys: list[tuple] | None = None,
) -> Detection:
    """Flag each trace in ``evaluate`` (default: all) against its key's IQR baseline learned from
    the traces in ``history`` (masks over traces); see the module docstring."""
    params = params or DetectParams()
    n = len(latency)
    evaluate = np.ones(n, dtype=bool) if evaluate is None else evaluate
    n_keys = int(key.max()) + 1 if n else 0
    hist = np.flatnonzero(history)
    order = hist[np.lexsort((latency[hist], key[hist]))]
    q1k = np.full(n_keys, np.nan)
    q3k = np.full(n_keys, np.nan)
    if len(order):
        starts, lens = run_bounds(key[order])
        values = latency[order].astype(np.float64)
        enough = lens >= params.min_history
        k_ids = key[order][starts]
        for p, out in ((0.25, q1k), (0.75, q3k)):
            out[k_ids[enough]] = _quantile(values, starts[enough], lens[enough], p)
    q1, q3 = q1k[key], q3k[key]
    iqr = q3 - q1
    low, high = q1 - params.k * iqr, q3 + params.k * iqr
    verdict = np.full(n, NOT_EVALUATED, dtype=np.int8)
    ev = evaluate
    verdict[ev & np.isnan(q1)] = NO_BASELINE
    judged = ev & ~np.isnan(q1)
    verdict[judged] = NORMAL
    with np.errstate(invalid="ignore"):
        verdict[judged & (latency > high)] = SLOWER
        verdict[judged & (latency < low)] = FASTER
    counts = np.bincount(verdict - FASTER, minlength=NOT_EVALUATED - FASTER + 1)
    accounting = {"traces": n, "history": int(history.sum())}
    accounting.update({VERDICT_NAMES[v]: int(counts[v - FASTER]) for v in VERDICT_NAMES})
    return Detection(
        keys=keys if keys is not None else [(i,) for i in range(n_keys)],
        key=key,
        latency=latency,
        history=history,
        q1=q1,
        q3=q3,
        low=low,
        high=high,
        verdict=verdict,
        accounting=accounting,
    )


def _quantile(values: np.ndarray, starts: np.ndarray, lens: np.ndarray, p: float) -> np.ndarray:
    """The ``p`` quantile of each sorted run ``values[s:s+len]`` (linear interpolation, as
    numpy's default)."""
    pos = (lens - 1) * p
    lo = np.floor(pos).astype(np.int64)
    hi = np.minimum(lo + 1, lens - 1)
    frac = pos - lo
    a, b = values[starts + lo], values[starts + hi]
    return a + frac * (b - a)
