"""Request trace reconstruction from spans without trace identifiers (TraceWeaver and baselines).

- :mod:`~.callgraph`: call graphs with dependency order, learned from test traces (§5.2.2).
- :mod:`~.isolated`: test traces woven from requests replayed one at a time (§5.2.1).
- :mod:`~.traceweaver`: the reconstruction (§4); :mod:`~.online` streams it (§5.3).
- :mod:`~.baselines`: FCFS, WAP5's nearest parent and vPath's threads (§6).
- :mod:`~.scaleout`: TraceWeaver cut into independent parts, per instance and time window, run
  on a Dask cluster (§6.5, §6.6).
- :mod:`~.trace_stream`: spans with trace context read as a stream, observed trace by trace.
- :mod:`~.pipeline`: an algorithm by name; blind spans, or a stream of them, into assembled
  traces.
"""

from tacit.reconstruct.assemble import assemble
from tacit.reconstruct.baselines import reconstruct_fcfs, reconstruct_vpath, reconstruct_wap5
from tacit.reconstruct.callgraph import CallGraph, EndpointGraph, learn_callgraph
from tacit.reconstruct.isolated import (
    callgraph_from_isolated,
    callgraph_from_test_capture,
    weave_isolated,
)
from tacit.reconstruct.online import OnlineTraceWeaver, reconstruct_online, stream_chunks
from tacit.reconstruct.pipeline import (
    ALGORITHMS,
    ONLINE,
    reconstruct_blind,
    reconstruct_stream,
    run_algorithm,
    stream_source,
)
from tacit.reconstruct.result import Reconstruction, instrument_next
from tacit.reconstruct.scaleout import merge, partition, reconstruct_dask
from tacit.reconstruct.trace_stream import NotInStreamOrder, SpanStream, observe_stream
from tacit.reconstruct.traceweaver import TraceWeaverParams, reconstruct_traceweaver

__all__ = [
    "ALGORITHMS",
    "ONLINE",
    "CallGraph",
    "EndpointGraph",
    "NotInStreamOrder",
    "OnlineTraceWeaver",
    "Reconstruction",
    "SpanStream",
    "TraceWeaverParams",
    "assemble",
    "callgraph_from_isolated",
    "callgraph_from_test_capture",
    "instrument_next",
    "learn_callgraph",
    "merge",
    "observe_stream",
    "partition",
    "reconstruct_blind",
    "reconstruct_dask",
    "reconstruct_fcfs",
    "reconstruct_online",
    "reconstruct_stream",
    "reconstruct_traceweaver",
    "reconstruct_vpath",
    "reconstruct_wap5",
    "run_algorithm",
    "stream_chunks",
    "stream_source",
    "weave_isolated",
]
