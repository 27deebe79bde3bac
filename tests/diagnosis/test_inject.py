"""Delay and self-time scaling on a hand-built trace: every causally later event moves."""

from __future__ import annotations

import numpy as np
import pytest

from tacit.diagnosis.inject import delay_spans, pick_requests, resample_traces, scale_self_time
from tacit.errors import ConfigError
from tacit.model.spans import CLIENT, SERVER, SpanTableBuilder


def trace():
    """front (0-100) calls a (10-30, server 12-28), then b (40-60, server 42-58) after a returned,
    and c (20-50, server 22-48) concurrently with a; front ends 100."""
    b = SpanTableBuilder()
    spans = [
        ("front", SERVER, 0, 100, "f", None),
        ("front", CLIENT, 10, 30, "fa", "f"),
        ("a", SERVER, 12, 28, "a", "fa"),
        ("front", CLIENT, 40, 60, "fb", "f"),
        ("b", SERVER, 42, 58, "b", "fb"),
        ("front", CLIENT, 20, 50, "fc", "f"),
        ("c", SERVER, 22, 48, "c", "fc"),
    ]
    for i, (svc, kind, s, e, sid, par) in enumerate(spans):
        b.add(
            service=svc,
            instance=None,
            endpoint="op",
            kind=kind,
            start=s,
            end=e,
            record=i,
            trace="t",
            span_id=sid,
            parent_id=par,
        )
    return b.build()


def test_delay_moves_caller_later_siblings_and_root_not_concurrent_calls():
    t = delay_spans(trace(), np.array([2]), 5)
    assert t.end.tolist() == [105, 35, 33, 65, 63, 50, 48]
    assert t.start.tolist() == [0, 10, 12, 45, 47, 20, 22]


def test_delay_absorbed_by_a_concurrent_call_that_returns_later():
    # c (in flight when b started) now returns at 55, still before front's last return (b at
    # 60): b does not move, and neither does front's end.
    t = delay_spans(trace(), np.array([6]), 5)
    assert t.start.tolist() == [0, 10, 12, 40, 42, 20, 22]
    assert t.end.tolist() == [100, 30, 28, 60, 58, 55, 53]


def test_scale_self_time_keeps_children_durations():
    t = scale_self_time(trace(), np.array([0]), 0.5)
    # front's self time: 0-10, 60-100 = 50 → 25; its calls keep their durations.
    assert t.start.tolist() == [0, 5, 7, 35, 37, 15, 17]
    assert t.end.tolist() == [75, 25, 23, 55, 53, 45, 43]
    assert ((t.end - t.start)[1:] == (trace().end - trace().start)[1:]).all()


def test_pick_requests_is_seeded_and_checks_its_input():
    t = trace()
    assert pick_requests(t, "a", 1.0, 0).tolist() == [2]
    assert pick_requests(t, "a", 0.0, 0).tolist() == []
    with pytest.raises(ConfigError, match="no server spans"):
        pick_requests(t, "nope", 0.5, 0)
    with pytest.raises(ConfigError):
        pick_requests(t, "a", 1.5, 0)


def test_resample_copies_whole_traces_with_fresh_ids_and_own_times():
    t = trace()
    boot = resample_traces(t, 4, seed=0)
    assert len(boot) == 4 * len(t)
    for i in range(4):
        rows = np.flatnonzero(boot.trace == boot.strings.find(f"boot{i}"))
        copy = boot.take(rows)
        # the same tree and durations, shifted in time as a whole
        assert copy.parent.tolist() == t.parent.tolist()
        assert copy.link.tolist() == t.link.tolist()
        assert (copy.end - copy.start).tolist() == (t.end - t.start).tolist()
        assert len(np.unique(copy.start - t.start)) == 1
    starts = boot.start[boot.parent == -1]
    assert len(np.unique(starts)) == 4
    with pytest.raises(ConfigError):
        resample_traces(t, 0, seed=0)


def test_a_scale_beyond_int64_nanoseconds_is_refused():
    with pytest.raises(ConfigError, match="beyond int64 nanoseconds"):
        scale_self_time(trace(), np.array([0]), 1e308)
