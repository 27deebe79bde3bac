"""Per-RPC queueing delay: one-way delay minus the path's windowed minimum."""

from __future__ import annotations

import numpy as np
import pytest

from tacit.diagnosis.queueing import QueueingParams, queueing_delay
from tacit.errors import ConfigError, InputError
from tacit.simulate.syslog_cascades import CascadeParams, simulate_cascades

S = 1_000_000_000
MS = 1_000_000


def test_clock_offset_cancels_and_queueing_is_exact():
    n = 10
    time = np.arange(n) * S
    offset = 3 * S  # receiver's clock ahead by 3 s
    base = 200_000
    extra = np.zeros(n, np.int64)
    extra[4] = 12 * MS
    one_way = offset + base + extra
    e2e = 2 * base + extra + 2 * MS
    q = queueing_delay(time, np.full(n, "a"), np.full(n, "b"), one_way, e2e)
    assert q.queueing_ns.tolist() == extra.tolist()
    assert q.flagged.tolist() == (extra > 0).tolist()
    assert q.share[4] == pytest.approx(12 / 14.4)


def test_minimum_per_path_and_window():
    # Two paths; path b->a has a longer route in the second window.
    time = np.r_[np.arange(6), np.arange(6), 600 + np.arange(6)] * S
    src = np.array(["a"] * 6 + ["b"] * 12)
    dst = np.array(["b"] * 6 + ["a"] * 12)
    one_way = np.r_[np.full(6, 1 * MS), np.full(6, 5 * MS), np.full(6, 9 * MS)]
    one_way[13] += 6 * MS
    q = queueing_delay(time, src, dst, one_way, np.full(18, 20 * MS))
    assert q.base_ns.tolist() == [1 * MS] * 6 + [5 * MS] * 6 + [9 * MS] * 6
    assert np.flatnonzero(q.flagged).tolist() == [13]


def test_sparse_windows_and_small_shares_not_flagged():
    time = np.array([0, 1, 2, 3, 4, 700]) * S
    one_way = np.array([1, 1, 1, 1, 3, 50]) * MS
    e2e = np.array([10, 10, 10, 10, 100, 100]) * MS
    q = queueing_delay(time, np.full(6, "a"), np.full(6, "b"), one_way, e2e)
    assert q.estimated.tolist() == [True] * 5 + [False]
    assert q.queueing_ns[4] == 2 * MS and not q.flagged.any()  # 2 ms of 100 ms


def test_bad_input():
    with pytest.raises(InputError):
        queueing_delay(np.zeros(2), np.array(["a", "a"]), np.array(["b", "b"]), [1, 1], [1, 0])
    with pytest.raises(InputError):
        queueing_delay(np.zeros(2), np.array(["a"]), np.array(["b", "b"]), [1, 1], [1, 1])
    with pytest.raises(ConfigError):
        QueueingParams(min_share=0)


def test_simulated_incidents_flag_the_rpcs_they_delay():
    sim = simulate_cascades(CascadeParams(seed=2))
    q = queueing_delay(
        sim.rpc_time, sim.rpc_src, sim.rpc_dst, sim.rpc_one_way_ns, sim.rpc_end_to_end_ns
    )
    truth = sim.rpc_incident >= 0
    tp = np.count_nonzero(q.flagged & truth)
    assert tp / max(1, q.flagged.sum()) >= 0.95
    assert tp / truth.sum() >= 0.85
