"""Reconstruction jobs: run an algorithm by name, or reconstruct blind spans into traces.

:func:`run_algorithm` maps the calls of blind spans with one of :data:`ALGORITHMS` (or the
streamed TraceWeaver, :data:`ONLINE`); :func:`reconstruct_blind` also assembles the result into
traces with their evidence as span tags (:func:`.assemble.assemble`): the workflow of
``tacit reconstruct``, of the tail diagnosis and of the demo. Evaluating against ground truth is
:func:`tacit.evaluation.reconstruction.evaluate`.
"""

from __future__ import annotations

from collections.abc import Callable

from tacit.errors import ConfigError
from tacit.model.spans import SpanTable
from tacit.reconstruct.assemble import assemble
from tacit.reconstruct.baselines import ALGORITHMS as BASELINES
from tacit.reconstruct.callgraph import CallGraph
from tacit.reconstruct.online import reconstruct_streamed
from tacit.reconstruct.result import Reconstruction
from tacit.reconstruct.traceweaver import TraceWeaverParams, reconstruct_traceweaver

ALGORITHMS = ("traceweaver", *BASELINES)
"""What ``evaluate`` runs by default."""
ONLINE = "traceweaver-online"
"""TraceWeaver over the input streamed in order of span end (:mod:`.online`), on request."""
Progress = Callable[[int], None]


def run_algorithm(
    name: str,
    spans: SpanTable,
    callgraph: CallGraph,
    params: TraceWeaverParams | None = None,
    progress: Progress | None = None,
) -> Reconstruction:
    """Reconstruct blind ``spans`` with the algorithm called ``name``."""
    check_algorithm(name)
    if name == "traceweaver":
        return reconstruct_traceweaver(spans, callgraph, params, progress)
    if name == ONLINE:
        return reconstruct_streamed(spans, callgraph, params)
    return BASELINES[name](spans, callgraph)


def check_algorithm(name: str) -> None:
    """Raise :class:`ConfigError` unless ``name`` is one of :data:`ALGORITHMS` or :data:`ONLINE`."""
    if name not in (*ALGORITHMS, ONLINE):
        raise ConfigError(
            f"unknown algorithm {name!r}: expected one of {', '.join((*ALGORITHMS, ONLINE))}"
        )


def reconstruct_blind(
    blind: SpanTable,
    callgraph: CallGraph,
    algorithm: str = "traceweaver",
    params: TraceWeaverParams | None = None,
    progress: Progress | None = None,
) -> tuple[SpanTable, dict[int, dict], Reconstruction]:
    """Reconstruct ``blind`` spans with ``algorithm`` and assemble the traces: the spans with
    their reconstructed parents and a trace per root, their span tags, and the reconstruction."""
    rec = run_algorithm(algorithm, blind, callgraph, params, progress)
    traces, tags = assemble(blind, rec)
    return traces, tags, rec
