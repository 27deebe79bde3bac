"""Test traces from requests replayed one at a time (TraceWeaver, SIGCOMM '24, §5.2.1).

TraceWeaver learns call graphs and dependency orders from *test traces*: production requests
replayed in a test environment one at a time, "so that the ensuing spans can be easily weaved
together ... due to the lack of competing candidates". With one request in flight, an outgoing
span of an instance belongs to the one incoming span of that instance that encloses it. The
woven traces feed :func:`tacit.reconstruct.callgraph.learn_callgraph` (§5.2.2) like traces
from a tracer would.

Where the requests were not isolated after all, an outgoing span has several enclosing
incoming spans; it is left unmapped with that reason rather than guessed, and the count says
the replay must be slower.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tacit.formats.capture_spans import ServiceMap, read_capture_spans
from tacit.model.spans import SpanTable
from tacit.reconstruct.assemble import assemble
from tacit.reconstruct.baselines import per_instance
from tacit.reconstruct.callgraph import CallGraph, learn_callgraph
from tacit.reconstruct.result import Reconstruction

NOT_ISOLATED = "several requests in flight enclose this call: requests were not one at a time"
NO_ENCLOSING = "no incoming request encloses this call"


def weave_isolated(spans: SpanTable) -> Reconstruction:
    """The parent of every outgoing span: the only incoming span of its instance that encloses
    it (see the module docstring); unmapped with a reason when there is none or more than one."""

    def assign(incoming: np.ndarray, outgoing: np.ndarray, result: Reconstruction) -> None:
        start, end = spans.start[incoming], spans.end[incoming]
        for o in outgoing:
            enclosing = np.flatnonzero((start <= spans.start[o]) & (spans.end[o] <= end))
            if len(enclosing) == 1:
                result.parent[o] = incoming[enclosing[0]]
            elif len(enclosing) > 1:
                result.unmapped[int(o)] = NOT_ISOLATED

    result = per_instance(spans, "isolated", assign)
    result.finish_unmapped(spans, NO_ENCLOSING)
    return result


def callgraph_from_isolated(spans: SpanTable) -> tuple[CallGraph, Reconstruction]:
    """The call graph and dependency orders (§5.2.2) learned from blind ``spans`` of requests
    replayed one at a time, and the weaving they were learned from."""
    rec = weave_isolated(spans)
    traces, _ = assemble(spans, rec)
    return learn_callgraph(traces), rec


def callgraph_from_test_capture(
    path: str | Path, services: ServiceMap | None = None, protocol: str = "auto"
) -> tuple[CallGraph, dict]:
    """The call graph learned from a packet capture of requests replayed one at a time
    (:func:`tacit.formats.capture_spans.read_capture_spans`, then
    :func:`callgraph_from_isolated`), and what the capture gave: its spans and, by reason,
    the calls that could not be woven."""
    spans = read_capture_spans(path, services, protocol).spans
    callgraph, woven = callgraph_from_isolated(spans)
    return callgraph, {"spans": len(spans), "unwoven": woven.unmapped_counts()}
