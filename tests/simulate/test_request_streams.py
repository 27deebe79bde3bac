"""The request-stream simulator (workload of Pirate's evaluation, arXiv 2505.14358 §5)."""

from __future__ import annotations

import numpy as np
import pytest

from tacit.errors import ConfigError
from tacit.model.packets import ACK, FIN, PSH, SYN, parse_endpoint
from tacit.simulate.request_streams import (
    RequestStreamParams,
    perturb_packets,
    simulate_requests,
)

MS = 1_000_000
PARAMS = RequestStreamParams(clients=5, duration_ns=4_000 * MS, seed=11)


@pytest.fixture(scope="module")
def stream():
    return simulate_requests(PARAMS)


def test_seeded(stream):
    again = simulate_requests(PARAMS)
    assert np.array_equal(again.packets.time, stream.packets.time)
    assert np.array_equal(again.truth.latency_ns, stream.truth.latency_ns)
    other = simulate_requests(RequestStreamParams(clients=5, duration_ns=4_000 * MS, seed=12))
    assert not np.array_equal(other.truth.latency_ns[:50], stream.truth.latency_ns[:50])


def test_packets_are_in_time_order_and_directions_match_addresses(stream):
    p = stream.packets
    assert np.all(np.diff(p.time) >= 0)
    assert np.array_equal(p.record, np.arange(len(p)))
    s_hi, s_lo, s_port = parse_endpoint(stream.server)
    assert np.all(((p.dst_hi == s_hi) & (p.dst_lo == s_lo))[stream.to_server])
    assert np.all((p.dport == s_port)[stream.to_server])
    assert np.all((p.sport == s_port)[~stream.to_server])


def test_handshake_fin_and_bursts(stream):
    p, up = stream.packets, stream.to_server
    flags = p.tcp_flags
    assert int(((flags & (SYN | ACK)) == SYN).sum()) == PARAMS.clients
    assert int((((flags & FIN) != 0) & up).sum()) == PARAMS.clients
    data_up = p.payload_len[up & (p.payload_len > 0)]
    data_down = p.payload_len[~up & (p.payload_len > 0)]
    assert (data_up == PARAMS.mss).any() and (data_up < PARAMS.mss).any()
    assert (data_down == PARAMS.mss).mean() > 0.3  # responses come in MSS-sized bursts
    assert data_up.max() <= PARAMS.mss and data_down.max() <= PARAMS.mss
    pure_acks = up & (p.payload_len == 0) & (flags == ACK)
    assert pure_acks.sum() > 0.2 * (up & (p.payload_len > 0)).sum()
    assert np.all(flags[up & (p.payload_len > 0)] == (ACK | PSH))


def test_sequence_numbers_advance_by_payload(stream):
    p = stream.packets
    for port in np.unique(p.sport[stream.to_server]):
        m = stream.to_server & (p.sport == port) & (p.payload_len > 0)
        seq = p.seq[m].astype(np.int64)
        step = (seq[1:] - seq[:-1]) % 2**32
        assert np.array_equal(step, p.payload_len[m][:-1])


def test_truth(stream):
    t = stream.truth
    assert len(t) > 100
    rtt = stream.rtt_ns[t.connection]
    assert np.all(t.latency_ns > rtt)  # a round trip at least, plus service time
    assert np.all(t.seen_ns - t.send_ns == rtt // 2)
    assert set(np.unique(t.depth)) <= {0, 1, 2} and (t.depth == 2).any()
    # At most max_outstanding requests in flight per connection at any time.
    for c in range(PARAMS.clients):
        m = t.connection == c
        start, end = t.send_ns[m], t.send_ns[m] + t.latency_ns[m]
        events = np.concatenate(
            [np.stack([start, np.ones_like(start)], 1), np.stack([end, -np.ones_like(end)], 1)]
        )
        events = events[np.lexsort((events[:, 1], events[:, 0]))]
        assert np.cumsum(events[:, 1]).max() <= PARAMS.max_outstanding
    # Every request's first segment is in the capture, at seen_ns, from its client.
    p = stream.packets
    first = np.searchsorted(p.time, t.seen_ns)
    assert np.all(p.time[first] == t.seen_ns)


def test_triggers_are_causal_pairs(stream):
    t = stream.truth
    by = t.trigger
    has = by >= 0
    # Every request but each connection's first page has a trigger, on its own connection,
    # whose response the client had in full before it sent the request.
    assert int((~has).sum()) == PARAMS.clients
    assert np.array_equal(t.connection[has], t.connection[by[has]])
    done = t.send_ns[by[has]] + t.latency_ns[by[has]]
    assert np.all(t.send_ns[has] >= done)
    # Some requests wait for a pipeline slot: their trigger freed it and is not their parent
    # object (its depth is not one less), and they go the moment its response is in.
    waited = has & (t.depth > 0)
    waited[has] &= t.depth[by[has]] != t.depth[has] - 1
    assert waited.any()
    assert np.any(t.send_ns[has] == done)


def test_service_time_follows_the_time_of_day():
    p = RequestStreamParams(
        clients=4,
        duration_ns=10_000 * MS,
        service_ns=40 * MS,
        service_swing=0.8,
        service_period_ns=10_000 * MS,
        seed=2,
    )
    s = simulate_requests(p)
    phase = ((s.truth.send_ns - s.truth.send_ns.min()) % p.service_period_ns) / p.service_period_ns
    # sin is high in the first half of the period (from the capture clock's origin) and low in
    # the second; the origin is within a second of the first request.
    high = s.truth.latency_ns[(phase > 0.15) & (phase < 0.35)].mean()
    low = s.truth.latency_ns[(phase > 0.65) & (phase < 0.85)].mean()
    assert high > 2 * low


def test_perturb(stream):
    p = stream.packets
    noisy = perturb_packets(p, loss=0.01, reorder=0.25, seed=4)
    lost = len(p) - len(noisy)
    assert 0.005 * len(p) < lost < 0.015 * len(p)
    assert np.all(np.diff(noisy.time) >= 0)
    assert len(np.unique(noisy.record)) == len(noisy)
    moved = noisy.time != p.time[noisy.record]
    assert 0.2 < moved.mean() < 0.3
    assert np.all((noisy.time - p.time[noisy.record])[moved] <= MS)
    assert np.any(np.diff(noisy.record) < 0)  # some packets changed places
    assert len(perturb_packets(p, 0.0, 0.0, 1)) == len(p)
    with pytest.raises(ConfigError):
        perturb_packets(p, loss=1.5, reorder=0, seed=0)


def test_bad_params():
    with pytest.raises(ConfigError):
        RequestStreamParams(clients=0)
    with pytest.raises(ConfigError):
        RequestStreamParams(rtt_ns=(10, 5))
