"""YTrace's detection and localization on a fault injected in the Nezha OnlineBoutique data.

Nezha (2022-08-22) injected CPU contention into the frontend pod at 03:53:54 (its
``fault_list.json``); the minutes around it are in ../shared. The per-endpoint IQR baseline
is learned from the requests before the injection.
"""

from __future__ import annotations

import numpy as np
import pytest
from nezha_faults import nezha_fault

from tacit.diagnosis import critical_paths, detect, explain
from tacit.diagnosis.critical_path import NETWORK
from tacit.diagnosis.detect import SLOWER, confounder_keys


@pytest.fixture(scope="module")
def frontend_fault(shared_data):
    minutes = ["03_53", "03_54", "03_55"]
    fault, spans = nezha_fault(shared_data, "2022-08-22 03:53:54", minutes)
    assert fault["inject_pod"].startswith("frontend-")
    cp = critical_paths(spans)
    key, keys = confounder_keys(cp.graph.spans, cp.root, ["endpoint"])
    return cp, key, keys, int(fault["inject_timestamp"]) * 10**9


def _slow_share(cp, key, keys, history, judged) -> float:
    d = detect(cp.latency, key, history, judged, keys=keys)
    return float((d.verdict == SLOWER).sum() / judged.sum())


@pytest.mark.realdata
def test_requests_after_the_fault_are_flagged_and_those_before_are_not(frontend_fault):
    cp, key, keys, at = frontend_fault
    before = cp.start < at
    start = int(cp.start.min())
    cut = start + (at - start) * 2 // 3
    control = _slow_share(cp, key, keys, cp.start < cut, before & (cp.start >= cut))
    after = _slow_share(cp, key, keys, before, ~before)
    assert after > 0.5 and control < 0.05


@pytest.mark.realdata
def test_the_slow_requests_grew_in_the_transit_of_the_frontends_calls(frontend_fault):
    """A CPU-starved frontend is slow to send its calls and take their answers: the time grows
    between its client spans and the callees' server spans, on the edges out of the frontend,
    not in the callees."""
    cp, key, keys, at = frontend_fault
    before = cp.start < at
    d = detect(cp.latency, key, before, ~before, keys=keys)
    features = [p["features"] for p in explain(cp, d)]
    assert np.mean([f["grew_service"] == NETWORK for f in features]) > 0.9
    callers = [f["grew_edge"].split(" → ")[0] for f in features if f["grew_edge"]]
    assert np.mean([c == "frontend" for c in callers]) > 0.95
