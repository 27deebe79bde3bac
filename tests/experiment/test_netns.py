"""The namespace experiment: two live agents across a netem path, against tcpdump's truth."""

from __future__ import annotations

import pytest

from tacit.experiment.netns import NetnsParams, namespaces_unavailable, run_netns_experiment


def _run(params: NetnsParams, tmp_path_factory):
    reason = namespaces_unavailable(params.emulate)
    if reason:
        pytest.skip(f"namespace experiment unavailable: {reason}")
    return run_netns_experiment(params, tmp_path_factory.mktemp("netns"))


@pytest.fixture(scope="module")
def emulated(tmp_path_factory):
    """Across netem: 5 ms ± 1 ms, 1 % loss, 5 % reordered."""
    return _run(NetnsParams(), tmp_path_factory)


@pytest.fixture(scope="module")
def forwarded(tmp_path_factory):
    """Without netem (kernels without it, e.g. this CI's): the router's forwarding only."""
    return _run(NetnsParams(emulate=False, duration_s=1.0, subnet=78), tmp_path_factory)


def check_counts(result, least_intervals: int) -> list[dict]:
    assert len(result.rows) >= least_intervals
    for row in result.rows:
        assert row["status"] != "not published", row
    complete = [r for r in result.rows if r["status"] == "complete"]
    assert len(complete) >= 0.8 * len(result.rows)
    for row in complete:  # the agents saw exactly the packets tcpdump saw at each end
        assert row["packets_sender"] == row["truth_sent"]
        assert row["matched"] == row["truth_matched"]
    assert result.receiver_summary["rejected"] == []
    assert result.receiver_summary["packets"]["after_close"] == 0
    return complete


def test_agents_measure_the_emulated_delay(emulated) -> None:
    complete = check_counts(emulated, 9)  # 2 s of traffic in intervals of 200 ms
    # microsecond capture timestamps against nanosecond truth on ~5 ms delays
    assert emulated.mean_error_max < 1e-3
    for row in complete:
        assert 3e6 < row["mean_ns"] < 7e6  # netem: 5 ms ± 1 ms, 5 % sent at once
    assert emulated.std_error < 0.10 and emulated.std_error_max < 0.25


def test_agents_measure_the_forwarding_delay(forwarded) -> None:
    complete = check_counts(forwarded, 4)
    for row in complete:  # delays of microseconds, timestamps rounded to microseconds
        assert abs(row["mean_ns"] - row["truth_mean_ns"]) < 1000
