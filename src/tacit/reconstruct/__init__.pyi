"""The names :mod:`tacit.reconstruct` exports, each imported on first use (``__init__.py``)."""

from .alternatives import Alternatives
from .assemble import assemble
from .baselines import reconstruct_fcfs, reconstruct_vpath, reconstruct_wap5
from .blind_callgraph import Support, learn_blind
from .call_names import CallNames
from .callgraph import CallGraph, EndpointGraph, learn_callgraph
from .hops import Hops
from .isolated import callgraph_from_isolated, callgraph_from_test_capture, weave_isolated
from .link_probability import (
    alternative_probability,
    link_probability,
    service_confidence,
    trace_probability,
)
from .online import OnlineTraceWeaver, reconstruct_online, stream_chunks
from .pipeline import (
    ALGORITHMS,
    ONLINE,
    reconstruct_blind,
    reconstruct_stream,
    run_algorithm,
    stream_source,
)
from .result import Reconstruction, instrument_next
from .scaleout import merge, partition, reconstruct_dask
from .stream_context import StreamContext
from .trace_stream import NotInStreamOrder, SpanStream, observe_stream
from .traceweaver import TraceWeaverParams, reconstruct_traceweaver

__all__ = [
    "ALGORITHMS",
    "ONLINE",
    "Alternatives",
    "CallGraph",
    "CallNames",
    "EndpointGraph",
    "Hops",
    "NotInStreamOrder",
    "OnlineTraceWeaver",
    "Reconstruction",
    "SpanStream",
    "StreamContext",
    "Support",
    "TraceWeaverParams",
    "alternative_probability",
    "assemble",
    "callgraph_from_isolated",
    "callgraph_from_test_capture",
    "instrument_next",
    "learn_blind",
    "learn_callgraph",
    "link_probability",
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
    "service_confidence",
    "stream_chunks",
    "stream_source",
    "trace_probability",
    "weave_isolated",
]
