"""The namespace experiment: two live agents across an impaired path (netem, or the userspace
relay where the kernel has no netem), against tcpdump's truth."""

from __future__ import annotations

import numpy as np
import pytest

from tacit.errors import ConfigError
from tacit.experiment.netns import (
    NetnsParams,
    namespaces_unavailable,
    out_of_order,
    run_netns_experiment,
)
from tacit.oneway_latency.stream import PacketStream

pytestmark = pytest.mark.live


def _run(params: NetnsParams, tmp_path_factory):
    reason = namespaces_unavailable(params.impairment)
    if reason:
        pytest.skip(f"namespace experiment unavailable: {reason}")
    return run_netns_experiment(params, tmp_path_factory.mktemp("netns"))


@pytest.fixture(scope="module", params=["netem", "relay"])
def impaired(request, tmp_path_factory):
    """5 ms ± 1 ms, 1 % loss, 5 % reordered: by netem (where the kernel has it) and by the relay."""
    return _run(NetnsParams(impairment=request.param), tmp_path_factory)


@pytest.fixture(scope="module")
def forwarded(tmp_path_factory):
    """No impairment: the router's kernel forwarding only."""
    return _run(NetnsParams(impairment="none", duration_s=1.0, subnet=78), tmp_path_factory)


def check_counts(result, least_intervals: int) -> list[dict]:
    assert len(result.rows) >= least_intervals
    for row in result.rows:
        assert row["status"] != "not published", row
    # every interval was reconciled; one whose difference the synopsis could not fully list
    # (RDA's decoding fails with a small probability, more often when a loaded machine delays
    # the relay's packets past the interval's end) is published as undecodable, from the
    # buckets it could read
    assert {r["status"] for r in result.rows} <= {"complete", "undecodable"}, result.rows
    complete = [r for r in result.rows if r["status"] == "complete"]
    assert len(complete) >= 0.5 * len(result.rows)
    # The agents saw exactly the packets tcpdump saw at each end, but for those their own
    # capture says the kernel dropped (a reader held back longer than its buffer lasts).
    dropped = {
        side: summary["capture"]["dropped"] + summary["capture"]["if_dropped"]
        for side, summary in (("s", result.sender_summary), ("r", result.receiver_summary))
    }
    for row in result.rows:
        assert row["truth_sent"] - dropped["s"] <= row["packets_sender"] <= row["truth_sent"]
        if row["status"] == "complete" and not any(dropped.values()):
            assert row["matched"] == row["truth_matched"]
        else:  # none at all when no bucket was clean
            assert (row["matched"] or 0) <= row["truth_matched"]
    assert sum(r["truth_matched"] - (r["matched"] or 0) for r in complete) <= sum(dropped.values())
    assert result.receiver_summary["rejected"] == []
    assert result.receiver_summary["packets"]["after_close"] == 0
    return complete


def test_agents_measure_the_impaired_delay(impaired) -> None:
    assert impaired.impairment in ("netem", "relay")
    complete = check_counts(impaired, 9)  # 2 s of traffic in intervals of 200 ms
    # microsecond capture timestamps against nanosecond truth on ~5 ms delays, over the
    # intervals whose packets the agents all saw (all complete ones, unless a capture dropped)
    exact = [r for r in complete if r["matched"] == r["truth_matched"]]
    assert exact and max(abs(r["mean_ns"] / r["truth_mean_ns"] - 1) for r in exact) < 1e-3
    # 5 ms ± 1 ms, 5 % sent at once; the relay, a Python process, adds its own scheduling
    # delay on a loaded machine, as much as it is held back (a 200 ms interval's mean of 7.2 ms,
    # and 9.7 ms, and more than 15 ms, seen under make test), and the agents measured it (the
    # error bound above). The median interval tells a doubled delay apart; single intervals
    # only that the delay was applied.
    means = [row["mean_ns"] for row in complete]
    assert all(m > 3e6 for m in means), means
    assert 4e6 < float(np.median(means)) < 8e6, means
    assert impaired.std_error < 0.10 and impaired.std_error_max < 0.25


def test_the_path_lost_and_reordered_packets(impaired) -> None:
    for side in ("s", "r"):  # the truth is complete: tcpdump dropped nothing
        assert impaired.captures[side]["dropped"] == 0, impaired.captures
    sent = impaired.truth_sent
    assert sent == sum(r["truth_sent"] for r in impaired.rows)
    assert impaired.truth_received == sent - impaired.truth_lost
    # 1 % of ~2000 lost; 5 % sent at once overtake the ~5 packets held, jitter reorders more
    assert 0 < impaired.truth_lost < 0.05 * sent
    assert impaired.truth_reordered >= 0.02 * sent


@pytest.mark.parametrize("impaired", ["relay"], indirect=True)
def test_relay_counts_agree_with_the_captures(impaired) -> None:
    relay = impaired.relay
    data = relay["forward_data"]
    assert data["received"] == impaired.truth_sent  # every datagram S sent reached the relay
    assert data["sent"] == impaired.truth_received  # and R saw exactly those it sent on
    assert data["dropped"] == impaired.truth_lost
    assert data["queued"] == data["send_errors"] == 0
    assert 0 < data["early"] < 0.15 * data["received"]
    fwd, back = relay["forward"], relay["backward"]
    assert fwd["received"] > data["received"]  # the sender agent's TCP toward R as well
    assert back["received"] == back["sent"] > 0  # R's TCP toward S, unimpaired
    assert fwd["received"] == fwd["sent"] + fwd["dropped"] + fwd["queued"] + fwd["send_errors"]
    assert set(relay["socket_drops"].values()) == {0}


def test_agents_measure_the_forwarding_delay(forwarded) -> None:
    assert forwarded.impairment == "none" and forwarded.relay == {}
    complete = check_counts(forwarded, 4)
    for row in complete:  # delays of microseconds, timestamps rounded to microseconds
        assert abs(row["mean_ns"] - row["truth_mean_ns"]) < 1000
    assert forwarded.truth_lost == 0


def test_out_of_order_counts_packets_overtaken() -> None:
    ident = np.array([10, 11, 12, 13, 14, 15], np.uint64)
    sender = PacketStream(ident, np.arange(6) * 1000)
    # 12 overtakes 11 (11 arrives late), 15 overtakes 13 and 14; 10 is lost
    arrival = {11: 9000, 12: 2500, 13: 9500, 14: 9700, 15: 5600}
    receiver = PacketStream(np.array(list(arrival), np.uint64), np.array(list(arrival.values())))
    assert out_of_order(sender, receiver) == 3  # 11, 13 and 14 arrive after a later packet
    assert out_of_order(sender, receiver.take(np.array([1, 4]))) == 0
    assert out_of_order(sender, PacketStream(np.array([], np.uint64), np.array([]))) == 0


def test_impairment_must_be_known() -> None:
    with pytest.raises(ConfigError, match="impairment"):
        NetnsParams(impairment="tc")
