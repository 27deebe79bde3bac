"""The compiled beam search (tacit.reconstruct.beam) against a naive exhaustive reference.

With a beam as wide as the number of consistent mappings the search must return exactly the
paper's ranking: every timing-consistent mapping, scored by its gaps, best first. The reference
here lists them by brute force over every combination of outgoing spans.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from beamsearch import run_search
from spanrows import table
from tacit.model.spans import CLIENT, NONE, SERVER, SpanTable
from tacit.reconstruct.callgraph import CallPath, Slot
from tacit.reconstruct.candidates import SKIP
from tacit.reconstruct.delays import Gaussian, Mixture

SEQUENTIAL = CallPath([Slot("b", "X", 0), Slot("b", "X", 1), Slot("c", "Y", 0)], [[], [0], [1]])
"""a.E -> b.X -> b.X -> c.Y"""
PARALLEL = CallPath([Slot("b", "X", 0), Slot("c", "Y", 0), Slot("d", "Z", 0)], [[], [], [0, 1]])
"""a.E -> (b.X || c.Y) -> d.Z"""
TWINS = CallPath([Slot("b", "X", 0), Slot("b", "X", 1), Slot("c", "Y", 0)], [[], [], [0, 1]])
"""a.E -> (b.X || b.X) -> c.Y: two unordered calls to one backend"""
LATE = CallPath([Slot("b", "X", 0, early_ns=15, late_ns=25), Slot("c", "Y", 0)], [[], []])
ANCHORED = CallPath(
    [Slot("b", "X", 0), Slot("c", "Y", 0), Slot("d", "Z", 0)], [[], [], []], anchors=[None, 0, 1]
)
"""An asynchronous fan-out: Y's gap timed from X's start, Z's from Y's."""
FROM_END = CallPath(
    [Slot("b", "X", 0), Slot("c", "Y", 0), Slot("d", "Z", 0)],
    [[], [], []],
    anchors=[None, 0, 1],
    anchor_ends=[False, True, False],
)
"""Unordered calls, Y's gap timed from the end of X's call (it opens as X closes), Z's from
Y's start."""
FOUR_TWINS = CallPath(
    [Slot("b", "X", k) for k in range(4)] + [Slot("c", "Y", 0)],
    [[], [0], [], [2], [1, 3]],
)
"""a.E -> (b.X -> b.X || b.X -> b.X) -> c.Y: four calls to one backend, two chains"""
"""a.E -> (b.X, which may start 15 before and end 25 after the request || c.Y)"""


def simulate_instance(path: CallPath, rng: np.random.Generator, n_in: int, noise: int):
    """Incoming spans each making the path's calls, plus ``noise`` stray calls."""
    rows: list[tuple] = []
    truth: dict[int, tuple[int, ...]] = {}
    for _ in range(n_in):
        s = int(rng.integers(0, 400))
        r = len(rows)
        rows.append((SERVER, "E", None, s, 0, NONE))
        ready, calls = {}, {}
        for j in path.order:
            t = max((ready[p] for p in path.preds[j]), default=s) + int(rng.integers(0, 20))
            e = t + int(rng.integers(1, 60))
            ready[j] = e
            sl = path.slots[j]
            calls[j] = len(rows)
            rows.append((CLIENT, sl.endpoint, sl.service, t, e, r))
        rows[r] = (SERVER, "E", None, s, max(ready.values()) + int(rng.integers(0, 20)), NONE)
        # Occurrences of one backend count its calls in start order.
        for callee in {sl.callee for sl in path.slots}:
            same = sorted(j for j, sl in enumerate(path.slots) if sl.callee == callee)
            by_start = sorted((calls[j] for j in same), key=lambda row: (rows[row][3], row))
            calls.update(zip(same, by_start, strict=True))
        truth[r] = tuple(calls[j] for j in range(len(path.slots)))
    callees = sorted({sl.callee for sl in path.slots})
    for _ in range(noise):
        svc, ep = callees[int(rng.integers(len(callees)))]
        t = int(rng.integers(0, 600))
        rows.append((CLIENT, ep, svc, t, t + int(rng.integers(1, 80)), NONE))
    return table(rows), truth


def models_for(path: CallPath, rng: np.random.Generator) -> list:
    """A gap model per slot and one for the response, some mixtures."""
    out: list = []
    for j in range(len(path.slots) + 1):
        if j % 2:
            out.append(Mixture(np.array([0.3, 0.7]), rng.uniform(0, 30, 2), rng.uniform(3, 20, 2)))
        else:
            out.append(Gaussian(rng.uniform(0, 30, 1), rng.uniform(3, 20, 1)))
    return out


def logpdf(model, x: float) -> float:
    return float(model.logpdf(np.array([x]), np.zeros(1, np.int64))[0])


def reference(spans: SpanTable, path: CallPath, models, r: int, skip: list[float]) -> dict:
    """Every consistent mapping of incoming span ``r`` with its score, by brute force."""
    out = np.flatnonzero(spans.kind == CLIENT)
    s = spans.strings
    options = []
    for j, sl in enumerate(path.slots):
        key = (s.find(sl.service), s.find(sl.endpoint))
        opts = [int(o) for o in out if (spans.peer[o], spans.endpoint[o]) == key]
        options.append(opts + ([SKIP] if skip[j] > -np.inf else []))
    r0, r1 = int(spans.start[r]), int(spans.end[r])
    found = {}
    for combo in itertools.product(*options):
        real = [o for o in combo if o != SKIP]
        if len(set(real)) != len(real):
            continue
        # Calls to one backend go to its slots in occurrence (= start) order.
        if any(
            combo[a] != SKIP
            and combo[b] != SKIP
            and path.slots[a].callee == path.slots[b].callee
            and path.slots[a].occurrence < path.slots[b].occurrence
            and (spans.start[combo[a]], combo[a]) > (spans.start[combo[b]], combo[b])
            for a in range(len(combo))
            for b in range(len(combo))
        ):
            continue
        done: dict[int, int] = {}
        score = math.log(0.5)
        ok = True
        for j in path.order:
            sl = path.slots[j]
            t = max([r0, *(done[p] for p in path.preds[j])])
            earliest = t if path.preds[j] else r0 - sl.early_ns
            o = combo[j]
            if o == SKIP:
                done[j] = t
                score += skip[j]
                continue
            if not (spans.start[o] >= earliest and spans.end[o] <= r1 + sl.late_ns):
                ok = False
                break
            done[j] = int(spans.end[o])
            a = path.anchor(j)  # a gap timed from a sibling's start or end, where it has one
            event = getattr(spans, path.anchor_event(j))
            origin = int(event[combo[a]]) if a is not None and combo[a] != SKIP else t
            score += (math.log1p(-math.exp(skip[j])) if skip[j] > -np.inf else 0.0) + logpdf(
                models[j], (spans.start[o] - origin) / 1000
            )
        if ok:
            last = max([r0, *done.values()])
            found[combo] = score + logpdf(models[-1], (r1 - last) / 1000)
    return found


def listed(cs, scores, r: int) -> dict:
    return {
        tuple(int(x) for x in cs.calls[c]): float(scores[c])
        for c in np.flatnonzero(cs.incoming == r)
    }


@pytest.mark.parametrize(
    "path",
    [SEQUENTIAL, PARALLEL, TWINS, LATE, ANCHORED, FROM_END],
    ids=["sequential", "parallel", "twins", "late", "anchored", "from_end"],
)
@pytest.mark.parametrize("seed", range(12))
def test_exhaustive_search_is_the_papers_ranking(path, seed):
    rng = np.random.default_rng(seed)
    spans, truth = simulate_instance(path, rng, n_in=int(rng.integers(2, 5)), noise=4)
    models = models_for(path, rng)
    cs, scores = run_search(spans, path, models)
    assert cs.graph is path and cs.calls.shape == (len(cs), len(path.slots))
    for r, true_calls in truth.items():
        got = listed(cs, scores, r)
        want = reference(spans, path, models, r, [-np.inf] * len(path.slots))
        assert set(got) == set(want)
        for combo, score in got.items():
            assert score == pytest.approx(want[combo], abs=1e-9)
        assert true_calls in got
        mine = np.flatnonzero(cs.incoming == r)
        assert np.all(np.diff(scores[mine]) <= 1e-12), "candidates come best first"


@pytest.mark.parametrize(
    "path",
    [SEQUENTIAL, PARALLEL, ANCHORED, FROM_END],
    ids=["sequential", "parallel", "anchored", "from_end"],
)
@pytest.mark.parametrize("seed", range(8))
def test_optional_slots_add_skipped_mappings(path, seed):
    rng = np.random.default_rng(100 + seed)
    spans, _ = simulate_instance(path, rng, n_in=3, noise=3)
    models = models_for(path, rng)
    skip = [-np.inf, -np.inf, math.log(0.2)]
    cs, scores = run_search(spans, path, models, skip=skip)
    for r in np.flatnonzero(spans.kind == SERVER):
        got = listed(cs, scores, int(r))
        want = reference(spans, path, models, int(r), skip)
        assert set(got) == set(want)
        assert any(c[2] == SKIP for c in got)


@pytest.mark.parametrize("seed", range(6))
def test_optional_twins_look_past_the_skipped_ones(seed):
    """Where the nearest calls to the same backend may be skipped, the bounds come from the
    nearest placed one, however far (the search's twin lists stop at the first twin that is
    never skipped, so that n calls to one backend cost O(n), not n²)."""
    rng = np.random.default_rng(200 + seed)
    spans, _ = simulate_instance(FOUR_TWINS, rng, n_in=2, noise=2)
    models = models_for(FOUR_TWINS, rng)
    skip = [-np.inf, math.log(0.3), math.log(0.3), -np.inf, -np.inf]
    cs, scores = run_search(spans, FOUR_TWINS, models, skip=skip)
    for r in np.flatnonzero(spans.kind == SERVER):
        got = listed(cs, scores, int(r))
        want = reference(spans, FOUR_TWINS, models, int(r), skip)
        assert set(got) == set(want)
        for combo, score in got.items():
            assert score == pytest.approx(want[combo], abs=1e-9)
        assert any(SKIP in c for c in got)


def test_a_narrow_beam_returns_consistent_mappings_with_their_exact_scores():
    rng = np.random.default_rng(5)
    spans, _ = simulate_instance(SEQUENTIAL, rng, n_in=6, noise=10)
    models = models_for(SEQUENTIAL, rng)
    wide, wide_scores = run_search(spans, SEQUENTIAL, models)
    narrow, narrow_scores = run_search(spans, SEQUENTIAL, models, width=2, branch=3, keep=2)
    assert len(narrow)  # a partial mapping may die out, but not every one
    for r in np.flatnonzero(spans.kind == SERVER):
        everything = listed(wide, wide_scores, int(r))
        kept = listed(narrow, narrow_scores, int(r))
        assert len(kept) <= 2
        for combo, score in kept.items():
            assert everything[combo] == pytest.approx(score)


def test_keep_returns_the_best_candidates_of_an_exhaustive_search():
    rng = np.random.default_rng(9)
    spans, _ = simulate_instance(PARALLEL, rng, n_in=4, noise=8)
    models = models_for(PARALLEL, rng)
    wide, wide_scores = run_search(spans, PARALLEL, models)
    top, top_scores = run_search(spans, PARALLEL, models, keep=3)
    for r in np.flatnonzero(spans.kind == SERVER):
        everything = sorted(listed(wide, wide_scores, int(r)).values(), reverse=True)
        assert sorted(listed(top, top_scores, int(r)).values(), reverse=True) == pytest.approx(
            everything[:3]
        )


def test_calls_outside_the_request_are_candidates_only_within_the_tolerance():
    spans = table(
        [
            (SERVER, "E", None, 100, 200, NONE),
            (CLIENT, "X", "b", 80, 120, NONE),  # starts 20 before: beyond early = 15
            (CLIENT, "X", "b", 90, 120, NONE),  # starts 10 before: within
            (CLIENT, "X", "b", 190, 230, NONE),  # ends 30 after: beyond late = 25
            (CLIENT, "X", "b", 150, 220, NONE),  # ends 20 after: within
            (CLIENT, "Y", "c", 160, 200, NONE),
        ]
    )
    models = [Gaussian(np.zeros(1), np.ones(1) * 1e6)] * 3
    cs, _ = run_search(spans, LATE, models)
    assert sorted(map(tuple, cs.calls.tolist())) == [(2, 5), (4, 5)]


def test_a_path_lacking_enough_calls_is_skipped():
    # Two b.X calls are needed, only one is around: no candidate at all.
    spans = table(
        [
            (SERVER, "E", None, 0, 100, NONE),
            (CLIENT, "X", "b", 10, 20, 0),
            (CLIENT, "Y", "c", 30, 40, 0),
            (CLIENT, "X", "b", 500, 510, NONE),
        ]
    )
    models = [Gaussian(np.zeros(1), np.ones(1) * 1e6)] * 4
    cs, _ = run_search(spans, SEQUENTIAL, models)
    assert len(cs) == 0


def test_the_refit_measures_anchored_gaps_as_the_search_scores_them():
    """``candidate_gaps`` (what the models are refitted on) times an anchored slot from its
    anchor's start, or end, as the compiled search does."""
    from tacit.reconstruct.delays import candidate_gaps, slot_ready

    rng = np.random.default_rng(3)
    spans, _ = simulate_instance(ANCHORED, rng, n_in=3, noise=2)
    cs, _ = run_search(spans, ANCHORED)
    gaps = candidate_gaps(spans, cs, slot_ready(spans, cs))
    start = spans.start[cs.calls]
    assert np.allclose(gaps[:, 0], (start[:, 0] - spans.start[cs.incoming]) / 1000)
    assert np.allclose(gaps[:, 1], (start[:, 1] - start[:, 0]) / 1000)
    assert np.allclose(gaps[:, 2], (start[:, 2] - start[:, 1]) / 1000)
    # From the end of the anchor's call where the path says so.
    spans, _ = simulate_instance(FROM_END, rng, n_in=3, noise=2)
    cs, _ = run_search(spans, FROM_END)
    gaps = candidate_gaps(spans, cs, slot_ready(spans, cs))
    start, end = spans.start[cs.calls], spans.end[cs.calls]
    assert np.allclose(gaps[:, 1], (start[:, 1] - end[:, 0]) / 1000)
    assert np.allclose(gaps[:, 2], (start[:, 2] - start[:, 1]) / 1000)


@pytest.mark.parametrize("seed", range(40))
def test_the_kth_highest_score_is_numpys(seed):
    """The selection the beam keeps its widest entries by, against ``np.partition``: ties,
    infinities and every k."""
    from tacit.reconstruct.beam import _kth_highest

    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 60))
    values = rng.choice([-math.inf, -3.0, -1.5, 0.0, 2.0, *rng.normal(size=4)], size=n + 5)
    for k in range(1, n + 1):
        assert _kth_highest(values, n, k) == -np.partition(-values[:n], k - 1)[k - 1]
