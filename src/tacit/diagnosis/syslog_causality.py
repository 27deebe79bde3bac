"""Causal rules between syslog templates: lagged correlation, then a quasi-experiment.

YTrace (Kanuparthy et al., §Datacenter network diagnosis) mines causal rules "template A causes
template B", intra-device or inter-device, with Quasi Experimental Design: "first, we find (in a
larger time window) template pairs that have a statistically significant correlation in their
timeseries"; then, per correlated pair, QED tests "the hypothesis that an element of the treated
set [A and B together] is much more likely than an element of the untreated set [B without A]".
Problem graphs are then built per small time window, intra-device edges first, then
inter-device ones; "at any point of time, we typically have 100-200 causal rules". The paper
gives no window lengths, lags, tests or thresholds (it refers to its earlier work, Log-Prophet,
Zhou et al., arXiv 1605.06150), so the details below are tacit's:

* Series are per (device, template) presence in ``window_ns`` windows (:class:`Presence`);
  for inter-device rules the effect's series of a device is its presence on any topology
  neighbour. The correlation of a pair pools all devices and is the largest Pearson
  correlation over lags 0..``max_lag`` windows (cause leading).
* Treated set: occurrences of A on a device (the first of each burst: ``horizon_ns`` apart).
  Untreated set: for each treated occurrence, a matched time on the same device (and link) at
  the nearest of ±2, ±3, ... horizons with no A within one horizon — matching on the unit and on
  time controls for devices' and hours' different background rates.
* Outcome: B occurs on the device (intra) or a neighbour (inter) within ``horizon_ns`` after.
  The test is McNemar's exact one-sided test on the matched pairs (B after treatment but not
  after control, against the reverse), Bonferroni-corrected over the pairs tested, and the rate
  difference must reach ``min_lift``.
* A rule A→C that a chain A→B→C of accepted rules explains is dropped when, among the treated
  occurrences of A *not* followed by B, C is not significantly more frequent than in their
  controls (the effect goes through B): the transitive reduction of the rule graph.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
from scipy import sparse
from scipy.stats import binomtest

from tacit.budget import check_allocation
from tacit.diagnosis.syslog_templates import (
    TemplateParams,
    Templates,
    mine_templates,
    window_counts,
)
from tacit.errors import ConfigError
from tacit.model.syslog_records import SyslogRecords
from tacit.runs import distinct

S = 1_000_000_000
INTRA, INTER = "intra", "inter"


@dataclass(frozen=True)
class CausalityParams:
    """Parameters of rule mining (defaults are tacit's; the papers give none retrievable).

    ``window_ns``: bin of the count series; ``max_lag``: lags tried, in windows;
    ``min_correlation``: correlation filter; ``horizon_ns``: how soon after the cause the
    effect must follow; ``alpha``: family-wise significance of the QED; ``min_lift``: smallest
    treated-minus-control rate; ``min_treated``: fewest treated occurrences to test a pair;
    ``max_control_shift``: farthest control, in horizons."""

    window_ns: int = 60 * S
    max_lag: int = 1
    min_correlation: float = 0.2
    horizon_ns: int = 60 * S
    alpha: float = 0.01
    min_lift: float = 0.2
    min_treated: int = 5
    max_control_shift: int = 10

    def __post_init__(self) -> None:
        if self.window_ns <= 0 or self.horizon_ns <= 0:
            raise ConfigError("window and horizon must be positive")
        if self.max_lag < 0 or self.max_control_shift < 2:
            raise ConfigError("max_lag must be >= 0 and max_control_shift >= 2")
        if not 0 < self.alpha < 1:
            raise ConfigError(f"alpha must be in (0, 1), not {self.alpha}")
        if not 0 < self.min_correlation <= 1:
            raise ConfigError(
                f"min_correlation must be in (0, 1], not {self.min_correlation}: "
                "only positively correlated pairs are kept"
            )


@dataclass(frozen=True)
class Rule:
    """``cause`` → ``effect`` (template indices) within a device (intra) or across a link
    (inter), with the evidence: correlation and its lag, treated and control rates, matched
    pairs and the QED's p-value (before correction)."""

    cause: int
    effect: int
    scope: str
    correlation: float
    lag: int
    treated_rate: float
    control_rate: float
    pairs: int
    p_value: float

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class SyslogEvents:
    """Events as columns: ``time`` (ns), ``device`` and ``template`` codes, with their counts,
    and the files they were read from (``sources``, to name in errors)."""

    time: np.ndarray
    device: np.ndarray
    template: np.ndarray
    n_devices: int
    n_templates: int
    sources: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        order = np.lexsort((self.time, self.device, self.template))
        self.time = np.asarray(self.time, np.int64)[order]
        self.device = np.asarray(self.device, np.int64)[order]
        self.template = np.asarray(self.template, np.int64)[order]
        self._key = self.template * self.n_devices + self.device  # sorted
        self.count = np.bincount(self.template, minlength=self.n_templates)
        """Events per template."""

    def _rows(self, first_key: int, end_key: int) -> slice:
        lo, hi = np.searchsorted(self._key, [first_key, end_key])
        return slice(int(lo), int(hi))

    def devices_of(self, template: int) -> np.ndarray:
        """The devices ``template`` occurs on, ascending."""
        rows = self._rows(template * self.n_devices, (template + 1) * self.n_devices)
        return distinct(self.device[rows])

    def times(self, template: int, device: int) -> np.ndarray:
        """Sorted times of ``template`` on ``device``."""
        k = template * self.n_devices + device
        return self.time[self._rows(k, k + 1)]


@dataclass(frozen=True)
class Presence:
    """The binary series rule mining correlates, stored sparsely: one entry per (template,
    unit, window) cell that holds at least one event, windows counted from the first. Dense,
    the series would take templates × units × windows cells: 214 GiB for loghub's 2,000-line
    BGL sample (105 templates, 1,778 devices, 307,652 one-minute windows)."""

    template: np.ndarray
    unit: np.ndarray
    window: np.ndarray
    n_templates: int
    n_units: int
    n_windows: int

    @classmethod
    def of(cls, events: SyslogEvents, window_ns: int) -> Presence:
        """Where each template occurs, per device and ``window_ns`` window."""
        c = window_counts(events.time, events.device, events.template, window_ns)
        first = int(c.window.min()) if len(c.window) else 0
        n_w = int(c.window.max()) - first + 1 if len(c.window) else 0
        return cls(
            c.template, c.device, c.window - first, events.n_templates, events.n_devices, n_w
        )

    def around(self, neighbors: list[np.ndarray]) -> Presence:
        """Where each template occurs on a topology neighbour of each device."""
        sizes = np.array([len(nb) for nb in neighbors], dtype=np.int64)
        flat = np.concatenate([np.empty(0, np.int64), *neighbors]).astype(np.int64)
        per = sizes[self.unit]  # each cell spreads to this many neighbours
        first = np.r_[0, np.cumsum(sizes)][self.unit]
        rank = np.arange(per.sum()) - np.repeat(np.cumsum(per) - per, per)
        cells = np.stack(
            [
                np.repeat(self.template, per),
                flat[np.repeat(first, per) + rank],
                np.repeat(self.window, per),
            ]
        )
        t, u, w = np.unique(cells, axis=1)
        return Presence(t, u, w, self.n_templates, self.n_units, self.n_windows)


@dataclass(frozen=True)
class PairCorrelations:
    """The pairs of templates whose series correlate positively at some lag: per pair, the
    ``cause`` and ``effect`` templates, the largest ``corr`` over the lags and its ``lag``
    (the smallest, on ties). Pairs are in order of ``(cause, effect)``."""

    cause: np.ndarray
    effect: np.ndarray
    corr: np.ndarray
    lag: np.ndarray


_PAIR_BYTES = 128
"""What one co-occurrence of two templates takes while correlated: the sparse product's index
and value, the correlation's terms, and the pair's key, correlation and lag kept per lag."""


def lagged_correlation(
    cause: Presence, effect: Presence, max_lag: int, sources: Sequence[str] = ()
) -> PairCorrelations:
    """Largest Pearson correlation between pairs of series, over lags 0..``max_lag``.

    The effect is shifted by the lag and series are pooled over units (devices or a device's
    neighbours), so each series has units × (windows − lag) cells. For 0/1 series of ``N``
    cells, with ``n_a``, ``n_b`` ones and ``n_ab`` ones in common, Pearson's r is
    ``(N n_ab − n_a n_b) / sqrt((N n_a − n_a²)(N n_b − n_b²))`` (0 where a series is
    constant). It is positive only where ``n_ab > 0``, so only the pairs that share a cell at
    some lag are computed, from the non-empty cells alone: the work and memory grow with the
    co-occurring pairs, not with templates², which a log of many rare templates makes huge.
    The co-occurrences are bounded before they are counted, against the memory budget
    (:func:`tacit.budget.check_allocation`, naming ``sources``)."""
    n_t, n_w = cause.n_templates, cause.n_windows
    keys, corrs, lags = [], [], []
    for lag in range(min(max_lag, n_w - 1) + 1):
        span = n_w - lag
        a_t, a_cell = _cells(cause, cause.window < span, 0, span)
        b_t, b_cell = _cells(effect, effect.window >= lag, lag, span)
        cells = distinct(np.concatenate([a_cell, b_cell]))
        a_cell, b_cell = np.searchsorted(cells, a_cell), np.searchsorted(cells, b_cell)
        shared = np.bincount(a_cell, minlength=len(cells)) @ np.bincount(
            b_cell, minlength=len(cells)
        )
        check_allocation(
            (min(int(shared), n_t * n_t), _PAIR_BYTES),
            np.uint8,
            f"{int(shared):,} co-occurrences of {n_t:,} templates at lag {lag}",
            sources,
        )
        a = _matrix(a_t, a_cell, n_t, len(cells))
        b = _matrix(b_t, b_cell, n_t, len(cells))
        n = float(cause.n_units * span)
        n_ab = (a @ b.T).tocoo()
        i, j = n_ab.row.astype(np.int64), n_ab.col.astype(np.int64)
        na = np.bincount(a_t, minlength=n_t).astype(np.float64)[i]
        nb = np.bincount(b_t, minlength=n_t).astype(np.float64)[j]
        spread = np.sqrt((n * na - na**2) * (n * nb - nb**2))
        cov = n * n_ab.data - na * nb
        c = np.divide(cov, spread, out=np.zeros_like(cov), where=spread > 0)
        positive = c > 0
        keys.append(i[positive] * n_t + j[positive])
        corrs.append(c[positive])
        lags.append(np.full(int(positive.sum()), lag, dtype=np.int64))
    key = np.concatenate([np.empty(0, np.int64), *keys])
    corr = np.concatenate([np.empty(0), *corrs])
    lag_of = np.concatenate([np.empty(0, np.int64), *lags])
    order = np.lexsort((lag_of, -corr, key))  # per pair: the largest, then the smallest lag
    key, corr, lag_of = key[order], corr[order], lag_of[order]
    first = np.r_[True, key[1:] != key[:-1]] if len(key) else np.zeros(0, bool)
    return PairCorrelations(key[first] // n_t, key[first] % n_t, corr[first], lag_of[first])


def _cells(p: Presence, keep: np.ndarray, shift: int, span: int) -> tuple[np.ndarray, np.ndarray]:
    """The templates of the kept cells of ``p`` and the cells' numbers among
    units × ``span`` windows, windows moved back by ``shift``."""
    return p.template[keep], p.unit[keep] * span + (p.window[keep] - shift)


def _matrix(rows: np.ndarray, cols: np.ndarray, n_rows: int, n_cols: int) -> sparse.csr_matrix:
    """A 0/1 sparse matrix with ones at (``rows``, ``cols``)."""
    ones = np.ones(len(rows), dtype=np.float64)
    return sparse.csr_matrix((ones, (rows, cols)), shape=(n_rows, n_cols))


def _burst_heads(t: np.ndarray, horizon: int) -> np.ndarray:
    return t[np.r_[True, np.diff(t) > horizon]] if len(t) else t


def _followed(effect_times: np.ndarray, t: np.ndarray, horizon: int) -> np.ndarray:
    """Whether an effect time falls in (t, t + horizon] for each t."""
    if not len(effect_times):
        return np.zeros(len(t), dtype=bool)
    return np.searchsorted(effect_times, t + horizon, "right") > np.searchsorted(
        effect_times, t, "right"
    )


def _controls(cause_times: np.ndarray, t: np.ndarray, params: CausalityParams) -> np.ndarray:
    """For each treated time, the nearest shifted time with no cause within one horizon
    (-1 where none within ``max_control_shift`` horizons)."""
    h = params.horizon_ns
    out = np.full(len(t), -1, dtype=np.int64)
    for k in range(2, params.max_control_shift + 1):
        for sign in (-1, 1):
            todo = out < 0
            if not todo.any():
                return out
            c = t[todo] + sign * k * h
            lo = np.searchsorted(cause_times, c - h, "left")
            hi = np.searchsorted(cause_times, c + h, "right")
            ok = hi == lo
            idx = np.flatnonzero(todo)[ok]
            out[idx] = c[ok]
    return out


@dataclass
class _Trial:
    """Matched pairs of one pair of templates: cause time and device, outcomes."""

    t: np.ndarray
    device: np.ndarray
    treated: np.ndarray
    control: np.ndarray


def _effect_times(
    events: SyslogEvents, b: int, device: int, scope: str, neighbors: list[np.ndarray]
) -> np.ndarray:
    """Times of ``b`` where an effect of a cause on ``device`` shows: the device itself
    (intra), or any of its neighbours (inter)."""
    if scope == INTRA:
        return events.times(b, device)
    times = [events.times(b, int(e)) for e in neighbors[device]]
    return np.sort(np.concatenate(times or [np.empty(0, np.int64)]))


def _trial(
    events: SyslogEvents,
    a: int,
    b: int,
    scope: str,
    neighbors: list[np.ndarray],
    params: CausalityParams,
) -> _Trial:
    """Matched treated/untreated outcomes of ``b`` after ``a``, over every device."""
    h = params.horizon_ns
    ts, devs, treated, control = [], [], [], []
    for d in events.devices_of(a).tolist():
        ct = events.times(a, d)
        heads = _burst_heads(ct, h)
        if not len(heads):
            continue
        ctrl = _controls(ct, heads, params)
        keep = ctrl >= 0
        heads, ctrl = heads[keep], ctrl[keep]
        et = _effect_times(events, b, d, scope, neighbors)
        ts.append(heads)
        devs.append(np.full(len(heads), d))
        treated.append(_followed(et, heads, h))
        control.append(_followed(et, ctrl, h))
    if not ts:
        e = np.zeros(0, np.int64)
        return _Trial(e, e, e.astype(bool), e.astype(bool))
    return _Trial(*(np.concatenate(x) for x in (ts, devs, treated, control)))


def _mcnemar(treated: np.ndarray, control: np.ndarray) -> float:
    """One-sided exact McNemar p-value: outcome more frequent after treatment."""
    n10 = int(np.count_nonzero(treated & ~control))
    n01 = int(np.count_nonzero(~treated & control))
    if n10 + n01 == 0:
        return 1.0
    return float(binomtest(n10, n10 + n01, 0.5, alternative="greater").pvalue)


def neighbor_lists(n_devices: int, links: np.ndarray) -> list[np.ndarray]:
    """Each device's neighbours (codes) given undirected ``links`` ([n, 2] codes)."""
    d = directed_links(links)
    bounds = np.searchsorted(d[:, 0], np.arange(n_devices + 1))
    return [d[bounds[i] : bounds[i + 1], 1] for i in range(n_devices)]


def directed_links(links: np.ndarray) -> np.ndarray:
    """Both directions of every undirected link ([n, 2] device codes), without duplicates."""
    links = np.asarray(links, dtype=np.int64).reshape(-1, 2)
    both = np.concatenate([links, links[:, ::-1]])
    return np.unique(both[both[:, 0] != both[:, 1]], axis=0)


def mine_rules(
    events: SyslogEvents, links: np.ndarray, params: CausalityParams | None = None
) -> list[Rule]:
    """Intra- and inter-device causal rules between templates (see the module docstring).

    ``links``: undirected topology links as [n, 2] device codes (devices of ``events``). An
    inter-device rule A→B means: after A on a device, B on one of its neighbours."""
    p = params or CausalityParams()
    neighbors = neighbor_lists(events.n_devices, links)
    x = Presence.of(events, p.window_ns)
    corr = {
        INTRA: lagged_correlation(x, x, p.max_lag, events.sources),
        INTER: lagged_correlation(x, x.around(neighbors), p.max_lag, events.sources),
    }
    candidates, tests = [], 0
    for scope, pc in corr.items():
        ok = pc.corr >= p.min_correlation
        if scope == INTRA:
            ok &= pc.cause != pc.effect
        tests += int(np.count_nonzero(ok))
        # A cause with fewer events than min_treated has fewer treated occurrences: untested.
        ok &= events.count[pc.cause] >= p.min_treated
        for a, b, c, lag in zip(pc.cause[ok], pc.effect[ok], pc.corr[ok], pc.lag[ok], strict=True):
            candidates.append((scope, int(a), int(b), float(c), int(lag)))
    tests = max(1, tests)
    rules = []
    for scope, a, b, strength, delay in candidates:
        tr = _trial(events, a, b, scope, neighbors, p)
        if len(tr.t) < p.min_treated:
            continue
        pv = _mcnemar(tr.treated, tr.control)
        rt, rc = float(tr.treated.mean()), float(tr.control.mean())
        if pv * tests < p.alpha and rt - rc >= p.min_lift:
            rules.append(Rule(a, b, scope, strength, delay, rt, rc, len(tr.t), pv))
    return _transitive_reduction(rules, events, neighbors, p, tests)


def _compose(first: str, second: str) -> str:
    return INTRA if first == second == INTRA else INTER


def _transitive_reduction(
    rules: list[Rule],
    events: SyslogEvents,
    neighbors: list[np.ndarray],
    p: CausalityParams,
    tests: int,
) -> list[Rule]:
    """Drop A→C when an accepted chain A→B→C explains it (module docstring, last point)."""
    by_cause: dict[int, list[Rule]] = {}
    for r in rules:
        by_cause.setdefault(r.cause, []).append(r)
    kept = []
    for r in rules:
        chains = [
            ab
            for ab in by_cause.get(r.cause, [])
            if ab.effect != r.effect
            and any(
                bc.effect == r.effect and _compose(ab.scope, bc.scope) == r.scope
                for bc in by_cause.get(ab.effect, [])
            )
        ]
        if not chains or _direct(r, chains[0], events, neighbors, p, tests):
            kept.append(r)
    return kept


def _direct(
    r: Rule,
    ab: Rule,
    events: SyslogEvents,
    neighbors: list[np.ndarray],
    p: CausalityParams,
    tests: int,
) -> bool:
    """Whether A→C holds on the treated occurrences of A that B did not follow."""
    tr = _trial(events, r.cause, r.effect, r.scope, neighbors, p)
    via = np.zeros(len(tr.t), dtype=bool)
    for d in distinct(tr.device):
        sel = tr.device == d
        mid = _effect_times(events, ab.effect, int(d), ab.scope, neighbors)
        via[sel] = _followed(mid, tr.t[sel], p.horizon_ns)
    rest = ~via
    return bool(
        np.count_nonzero(rest) >= p.min_treated
        and _mcnemar(tr.treated[rest], tr.control[rest]) * tests < p.alpha
        and tr.treated[rest].mean() - tr.control[rest].mean() >= p.min_lift
    )


@dataclass
class SyslogRules:
    """Templates of every message, the events they make, and the rules mined from them."""

    templates: Templates
    events: SyslogEvents
    devices: list[str]
    links: np.ndarray
    rules: list[Rule]

    def named(self) -> list[dict]:
        """The rules with template texts instead of indices."""
        texts = self.templates.texts
        return [
            {**r.as_dict(), "cause": texts[r.cause], "effect": texts[r.effect]} for r in self.rules
        ]


def mine_syslog_rules(
    records: SyslogRecords,
    links: list[tuple[str, str]],
    template_params: TemplateParams | None = None,
    params: CausalityParams | None = None,
) -> SyslogRules:
    """Template the messages of ``records`` (Drain3), then mine rules between the templates
    over the topology ``links`` (device name pairs; links to unknown devices are ignored)."""
    templates = mine_templates(records.content, template_params)
    devices = records.devices
    events = SyslogEvents(
        records.time,
        records.device,
        templates.template,
        len(devices),
        len(templates.texts),
        tuple(records.files),
    )
    code = {d: i for i, d in enumerate(devices)}
    pairs = [(code[a], code[b]) for a, b in links if a in code and b in code]
    link_codes = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    return SyslogRules(
        templates, events, devices, link_codes, mine_rules(events, link_codes, params)
    )
