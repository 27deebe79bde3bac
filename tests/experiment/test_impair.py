"""The relay's impairment, as a pure function of arrival times and the seed (no namespaces)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import norm

from tacit.errors import ConfigError
from tacit.experiment.impair import DueQueue, Impairment, ImpairParams, schedule

N = 40_000
PATH = ImpairParams(delay_ns=5_000_000, jitter_ns=1_000_000, loss=0.02, reorder=0.05, seed=3)


def arrivals(n: int = N, gap_ns: int = 1_000_000, seed: int = 1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.cumsum(rng.integers(1, 2 * gap_ns, size=n))


def within(count: int, n: int, p: float) -> bool:
    """``count`` of ``n`` is a plausible binomial(n, p) draw (5 standard deviations)."""
    return abs(count - n * p) < 5 * np.sqrt(n * p * (1 - p))


def test_drops_early_sends_and_holds_follow_the_parameters() -> None:
    t = arrivals()
    s = schedule(t, PATH)
    d = s.decisions
    assert within(int(d.dropped.sum()), N, PATH.loss)
    kept = ~d.dropped
    assert not (d.dropped & d.early).any()
    assert within(int(d.early.sum()), int(kept.sum()), PATH.reorder)
    assert (s.due_ns[d.dropped] == -1).all()
    assert (s.due_ns[d.early] == t[d.early]).all()  # sent at once
    held = kept & ~d.early
    hold = s.due_ns[held] - t[held]
    assert (hold == d.hold_ns[held]).all()
    assert abs(hold.mean() - PATH.delay_ns) < 5 * PATH.jitter_ns / np.sqrt(held.sum())
    assert abs(hold.std() / PATH.jitter_ns - 1) < 0.03
    assert (d.hold_ns[~held] == 0).all()


def test_holds_are_clipped_at_zero() -> None:
    p = ImpairParams(delay_ns=1_000_000, jitter_ns=2_000_000, seed=5)
    d = schedule(arrivals(), p).decisions
    assert not d.dropped.any() and not d.early.any()
    assert d.hold_ns.min() == 0
    assert within(int((d.hold_ns == 0).sum()), N, norm.cdf(-0.5))  # P(1 ms + 2 ms·Z < 0)


def test_the_seed_fixes_the_decisions_in_any_blocks() -> None:
    t = arrivals(5000)
    whole = schedule(t, PATH)
    again = schedule(t, PATH)
    assert (whole.due_ns == again.due_ns).all() and (whole.order == again.order).all()
    other = schedule(t, ImpairParams(**{**PATH.__dict__, "seed": 4}))
    assert (other.due_ns != whole.due_ns).any()
    live = Impairment(PATH)  # the relay draws blocks as packets come
    blocks = [live.draw(k) for k in (1, 7, 992, 4000)]
    for name in ("dropped", "early", "hold_ns"):
        joined = np.concatenate([getattr(b, name) for b in blocks])
        assert (joined == getattr(whole.decisions, name)).all()


def test_departures_follow_due_times_and_early_sends_overtake() -> None:
    t = arrivals(3000)
    s = schedule(t, PATH)
    due = s.due_ns[s.order]
    assert (np.diff(due) >= 0).all()  # in due-time order
    assert set(s.order.tolist()) == set(np.flatnonzero(~s.decisions.dropped).tolist())
    # an early packet leaves before every packet that arrived before it and is still held
    rank = np.empty(len(t), np.int64)
    rank[s.order] = np.arange(len(s.order))
    overtaken = 0
    for i in np.flatnonzero(s.decisions.early):
        waiting = np.flatnonzero((t < t[i]) & (s.due_ns > t[i]))
        assert (rank[waiting] > rank[i]).all()
        overtaken += len(waiting)
    assert overtaken > s.decisions.early.sum()  # ~5 packets held at any time


def test_the_relay_queue_releases_in_the_schedule_order() -> None:
    t = arrivals(3000)
    s = schedule(t, PATH)
    queue, left = DueQueue(), []
    for i in range(len(t)):  # the relay: release what is due, then take the arrival
        left += queue.pop_due(int(t[i]))
        if s.decisions.early[i]:
            left.append(i)
        elif not s.decisions.dropped[i]:
            queue.put(int(s.due_ns[i]), i)
    assert sorted(queue.waiting()) == sorted(i for i in range(len(t)) if s.due_ns[i] > t[-1])
    left += queue.pop_due(int(s.due_ns.max()))
    assert len(queue) == 0 and queue.next_due() is None
    assert left == s.order.tolist()


def test_no_impairment_relays_in_arrival_order() -> None:
    t = arrivals(1000)
    s = schedule(t, ImpairParams())
    assert (s.due_ns == t).all() and (s.order == np.arange(len(t))).all()


@pytest.mark.parametrize(
    "bad", [{"loss": 1.5}, {"reorder": -0.1}, {"delay_ns": -1}, {"jitter_ns": -5}]
)
def test_parameters_are_checked(bad) -> None:
    with pytest.raises(ConfigError):
        ImpairParams(**bad)
