"""The baselines' compiled parts against naive references written as the loops they replace."""

from __future__ import annotations

import numpy as np
import pytest

from tacit.model.roles import infer_roles, process_key
from tacit.model.spans import NONE
from tacit.reconstruct.baselines import WAP5_CUTOFF, owed_calls, owed_counts, wap5_parents
from tacit.reconstruct.callgraph import learn_callgraph
from tacit.reconstruct.candidates import call_keys
from tacit.reconstruct.result import open_problem
from tacit.simulate import load_app, simulate


def reference_wap5_parents(spans, incoming, outgoing, callgraph):
    """WAP5's nearest parent, one outgoing span at a time, with the owed calls as dicts."""
    parent = np.full(len(outgoing), NONE, dtype=np.int64)
    owed, _ = owed_calls(spans, incoming, callgraph)
    start_in = spans.start[incoming].tolist()
    before = [int(np.searchsorted(start_in, spans.start[o], "right")) for o in outgoing]
    gaps = [
        int(spans.start[o]) - start_in[h - 1] for o, h in zip(outgoing, before, strict=True) if h
    ]
    cutoff = WAP5_CUTOFF * (sum(gaps) / len(gaps) if gaps else 0.0)
    for n, (o, k, h) in enumerate(
        zip(outgoing, call_keys(spans, outgoing).tolist(), before, strict=True)
    ):
        for idx in range(h - 1, -1, -1):
            if int(spans.start[o]) - start_in[idx] > cutoff:
                break
            if owed[idx].get(k, 0) > 0:
                owed[idx][k] -= 1
                parent[n] = incoming[idx]
                break
    return parent


@pytest.fixture(scope="module", params=[(200, 1), (800, 2)])
def instances(request):
    """Each instance's open incoming and outgoing spans (by start) of a simulated shop app,
    with a call graph learned from a sample of it, so that some calls are owed by no one."""
    rate, seed = request.param
    app = load_app(None)
    callgraph = learn_callgraph(infer_roles(simulate(app, 20, n_requests=30, seed=9)).spans)
    blind = infer_roles(
        simulate(app, rate, n_requests=150, seed=seed, record_threads=False)
    ).without_truth()
    proc = process_key(blind)
    found = []
    for key in np.unique(proc):
        incoming, outgoing = open_problem(blind, np.flatnonzero(proc == key))
        incoming = incoming[np.argsort(blind.start[incoming], kind="stable")]
        outgoing = outgoing[np.argsort(blind.start[outgoing], kind="stable")]
        found.append((incoming, outgoing))
    return blind, callgraph, found


def test_wap5_parents_are_the_reference_loops(instances):
    spans, callgraph, found = instances
    mapped = 0
    for incoming, outgoing in found:
        got = wap5_parents(spans, incoming, outgoing, callgraph)
        assert got.tolist() == reference_wap5_parents(spans, incoming, outgoing, callgraph).tolist()
        mapped += int((got != NONE).sum())
    assert mapped > 100  # the comparison is not between two empty mappings


def test_owed_counts_are_owed_calls_as_a_matrix(instances):
    spans, callgraph, found = instances
    for incoming, _ in found:
        keys, counts = owed_counts(spans, incoming, callgraph)
        owed, _ = owed_calls(spans, incoming, callgraph)
        assert [
            {k: c for k, c in zip(keys.tolist(), row, strict=True) if c} for row in counts.tolist()
        ] == [{k: c for k, c in d.items() if c} for d in owed]


def test_calls_of_an_instance_without_requests_have_no_wap5_parent(instances):
    spans, callgraph, found = instances
    outgoing = next(o for _, o in found if len(o))
    none = np.zeros(0, dtype=np.int64)
    assert wap5_parents(spans, none, outgoing, callgraph).tolist() == [NONE] * len(outgoing)
