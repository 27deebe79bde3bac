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
ground truth; :mod:`~tacit.oneway_latency.simulate` makes packet streams to run them on,
:mod:`~tacit.oneway_latency.replay` replays a real capture as one, and
:mod:`~tacit.oneway_latency.sweep` runs the §VII error-versus-set-difference evaluation.
:mod:`~tacit.oneway_latency.agent` is the two-agent service (its connection in
:mod:`~tacit.oneway_latency.agent_transport`, wire format in
:mod:`~tacit.oneway_latency.protocol`).

The RDA paper's text is in ``/work/shared/papers/rda-every-timestamp-counts.txt``, and the
modules cite its sections and algorithms: §IV sRDA, §V-A the synopsis, §V-B decoding
(Algorithm 1), §V-C aggregation (Algorithms 2–3), §VI Theorem 2 and Lemma 1, §VII the
simulation, §VIII-A late binding and §VIII-B the parameters. Where tacit departs from it, or
chooses what it leaves open, the module says so where it is chosen. The texts of LDA's paper
(Kompella et al., SIGCOMM '09, the RDA paper's ref. [19]) and FineComb's (Lee et al.,
SIGMETRICS '11, ref. [22]) are not in ``/work/shared/papers``: those two follow the RDA paper's
descriptions of them (§II-C, §III-C, §VII) and what else is known of them, and say where a
detail is tacit's choice.
"""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
