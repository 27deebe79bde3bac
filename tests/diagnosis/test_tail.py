"""The slowest requests' culprits: self latency, the rule, and the paper's scenario on real
HotelReservation traces, from ground truth and from blinded-then-reconstructed traces."""

from __future__ import annotations

import numpy as np
import pytest

from tacit.diagnosis.inject import delay_spans, pick_requests
from tacit.diagnosis.tail import (
    TailParams,
    blind_and_reconstruct,
    self_latency,
    span_tail_profile,
    tail_profile,
)
from tacit.errors import ConfigError
from tacit.model.spans import CLIENT, SERVER, SpanTableBuilder
from tacit.reconstruct.pipeline import observe

HOTEL = "traceweaver/hotel_reservation/load{}.jaeger.json.gz"


def requests(n: int, seed: int):
    """n requests: front calls a then b (serial), each with lognormal latencies (log-sd 0.5, a
    tail as heavy as the real HotelReservation services')."""
    rng = np.random.default_rng(seed)
    b = SpanTableBuilder()
    t = 0
    for i in range(n):
        fa, a, fb, bb, tail = (rng.lognormal(13, 0.5, 5)).astype(np.int64)
        t0 = t
        rows = [
            ("front", SERVER, t0, t0 + fa + fb + tail, "f", None),
            ("front", CLIENT, t0 + fa // 2, t0 + fa // 2 + a, "fa", "f"),
            ("a", SERVER, t0 + fa // 2 + 1, t0 + fa // 2 + a - 1, "a", "fa"),
            ("front", CLIENT, t0 + fa // 2 + a, t0 + fa // 2 + a + bb, "fb", "f"),
            ("b", SERVER, t0 + fa // 2 + a + 1, t0 + fa // 2 + a + bb - 1, "b", "fb"),
        ]
        rows[0] = ("front", SERVER, t0, rows[3][3] + tail, "f", None)
        for k, (svc, kind, s, e, sid, par) in enumerate(rows):
            b.add(
                service=svc,
                instance=None,
                endpoint="op",
                kind=kind,
                start=int(s),
                end=int(e),
                record=5 * i + k,
                trace=f"t{i}",
                span_id=sid,
                parent_id=par,
            )
        t += 10**7
    return b.build()


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
