"""The slowest requests' culprits: self latency, the rule, and the paper's scenario on real
HotelReservation traces, from ground truth and from blinded-then-reconstructed traces."""

from __future__ import annotations

import numpy as np
import pytest
from serial_requests import requests

from tacit.diagnosis.inject import delay_spans, pick_requests
from tacit.diagnosis.tail import (
    TailParams,
    blind_and_reconstruct,
    self_latency,
    slow_probability,
    span_tail_profile,
    tail_profile,
)
from tacit.errors import ConfigError, InputError
from tacit.formats import observe
from tacit.reconstruct.result import Reconstruction

HOTEL = "traceweaver/hotel_reservation/load{}.jaeger.json.gz"


def test_self_latency_is_duration_minus_union_of_children():
    s = requests(3, 0)
    sl = self_latency(s)
    root = 0
    kids = [1, 3]
    union = sum(int(s.end[k] - s.start[k]) for k in kids)
    assert sl[root] == s.end[root] - s.start[root] - union
    assert sl[2] == s.end[2] - s.start[2]  # a leaf's self latency is its duration
    assert sl[1] == 2  # the client span waits on a server span 1 ns shorter at each side


def test_injected_service_is_the_only_culprit_while_spans_blame_all():
    s = requests(2000, 1)
    delayed = delay_spans(s, pick_requests(s, "b", 0.1, 0), 3_000_000)
    prof = tail_profile(delayed, TailParams(percent=2))
    assert prof.culprits == ["b"]
    assert prof.profile["b"]["share"] > 0.5  # most of the slow requests' excess
    assert sorted(span_tail_profile(delayed).culprits) == ["a", "b", "front"]


def test_params_are_checked():
    with pytest.raises(ConfigError):
        TailParams(percent=0)
    with pytest.raises(ConfigError):
        TailParams(metric="wall")


@pytest.fixture(scope="module")
def hotel_injected(shared_data):
    spans = observe([shared_data / HOTEL.format(100)])[0].spans
    spans = delay_spans(spans, pick_requests(spans, "reservation", 0.1, 0), 40_000_000)
    return delay_spans(spans, pick_requests(spans, "profile", 0.1, 1), 40_000_000)


@pytest.mark.realdata
def test_hotel_reservation_slowest_2pct_name_the_delayed_services(hotel_injected):
    truth = tail_profile(hotel_injected)
    traces, rec = blind_and_reconstruct(hotel_injected)
    blind = tail_profile(traces, rec=rec)
    assert sorted(truth.culprits) == ["profile", "reservation"]
    assert sorted(blind.culprits) == sorted(truth.culprits)
    assert blind.slow == truth.slow == 20
    per_span = span_tail_profile(hotel_injected)
    assert len(per_span.culprits) == len(per_span.profile) == 6  # blames every service


def test_uncertain_links_spread_the_slow_probability_by_softmax():
    s = requests(2, 0)  # rows 0-4: trace t0 (front server 0, client spans 1 and 3); 5-9: t1
    rec = Reconstruction("x", s.parent.copy(), np.full(len(s), np.nan))
    rec.alternatives = {1: [(0, -1.0), (5, -2.0)], 3: [(5, -0.5)]}  # 3's chosen 0 is unscored
    p = slow_probability(s, np.array([0]), rec)
    w = np.exp(-1.0) / (np.exp(-1.0) + np.exp(-2.0))
    assert p[[0, 1, 2, 3, 4]] == pytest.approx([1, w, w, 0.5, 0.5])
    assert p[5:].tolist() == [0.0] * 5
    certain = slow_probability(s, np.array([0]))
    assert certain.tolist() == [1.0] * 5 + [0.0] * 5


def test_fragments_of_a_missing_parent_are_counted_not_requests():
    s = requests(50, 2)
    s.parent[3] = -1  # t0's call to b lost its parent: b's subtree is a fragment of t0
    prof = tail_profile(s)
    assert prof.requests == 50
    assert prof.accounting["spans in fragments whose parent is missing (left out of their trace)"]
    assert prof.profile["b"]["spans"] == 49


def test_a_cycle_of_parents_names_the_trace():
    s = requests(5, 3)
    s.parent[5] = 9  # t1's root under its own b server span
    with pytest.raises(InputError, match="trace t1: parent links form a cycle"):
        tail_profile(s)
