"""One-way network latency between two capture points, without timestamps in the packets.

The sender and the receiver each summarize the packets they saw per measurement interval in a
small synopsis; comparing the two synopses gives the mean and standard deviation of one-way
latency. Four synopses, as compared in "Every Timestamp Counts: Accurate Tracking of Network
Latencies using Reconcilable Difference Aggregator" (RDA):

* :mod:`~tacit.oneway_latency.rda` — RDA: reconcile, then measure on every packet seen at both.
* :mod:`~tacit.oneway_latency.srda` — sRDA: the same on an IBLT with a purity field.
* :mod:`~tacit.oneway_latency.lda` — LDA (SIGCOMM '09): buckets usable when counts match.
* :mod:`~tacit.oneway_latency.finecomb` — FineComb: digests and stash repair of reordering.

:func:`~tacit.oneway_latency.comparison.compare_methods` runs them at equal memory against the
ground truth; :mod:`~tacit.oneway_latency.simulate` makes packet streams to run them on.

The full texts of the three papers were not available when this was written: the algorithms
follow their published descriptions as we know them, section numbers are cited only where known
(RDA §VII, the evaluation; LDA Fig. 2), and every detail we had to choose or reconstruct says
so where it is chosen, with the reason.
"""

from tacit.oneway_latency.comparison import METHODS, MethodScore, compare_methods
from tacit.oneway_latency.estimate import LatencyEstimate
from tacit.oneway_latency.finecomb import FineCombParams, finecomb_interval
from tacit.oneway_latency.intervals import IntervalParams, IntervalSplit, IntervalWork, pipeline
from tacit.oneway_latency.lda import LDAParams, lda_interval
from tacit.oneway_latency.rda import RDAParams, ReconcileResult, rda_interval
from tacit.oneway_latency.simulate import (
    SimulatedStream,
    StreamParams,
    replay_stream,
    simulate_stream,
)
from tacit.oneway_latency.srda import SRDAParams, srda_interval
from tacit.oneway_latency.stream import PacketStream
from tacit.oneway_latency.truth import IntervalTruth, latency_truth

__all__ = [
    "METHODS",
    "FineCombParams",
    "IntervalParams",
    "IntervalSplit",
    "IntervalTruth",
    "IntervalWork",
    "LDAParams",
    "LatencyEstimate",
    "MethodScore",
    "PacketStream",
    "RDAParams",
    "ReconcileResult",
    "SRDAParams",
    "SimulatedStream",
    "StreamParams",
    "compare_methods",
    "finecomb_interval",
    "latency_truth",
    "lda_interval",
    "pipeline",
    "rda_interval",
    "replay_stream",
    "simulate_stream",
    "srda_interval",
]
