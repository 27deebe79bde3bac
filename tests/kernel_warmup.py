"""Compile tacit's numba kernels once before the tests fan out.

In a new checkout no kernel is cached yet (numba writes each one beside its module on its first
compilation), and the tests start many processes at once: two pytest workers, and command-line
tests that run a dozen commands side by side. Each would compile the same kernels again, tens of
seconds of CPU each. Run by ``make test`` before the tests, or in the controlling pytest process
before the workers start (``conftest.py``), this compiles them in two processes, one per core,
on small versions of the workloads that use them: reconstruction, diagnosis, WAP5, the load
balancer and the OTLP request reader in one; RDA, captures, Pirate and the demo in the other.
No kernel is compiled in both (each process would compile it in full), and the halves take
about as long as each other, so that both cores finish together. A kernel it misses is
compiled by the first test that needs it; nothing here is checked."""

from __future__ import annotations

import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path


def _spans() -> None:
    """Reconstruction, diagnosis, WAP5, the load balancer and the OTLP request reader: kernels
    no packet touches."""
    from tacit.causal_paths import analyze_paths
    from tacit.causal_paths.from_spans import messages_from_spans
    from tacit.diagnosis import critical_paths, tail_profile
    from tacit.evaluation import evaluate
    from tacit.experiment.loadbalancer import LoadBalancerParams, run_loadbalancer_experiment
    from tacit.model.roles import infer_roles
    from tacit.reconstruct import ALGORITHMS, learn_callgraph
    from tacit.simulate import load_app, simulate

    app = load_app(None)
    callgraph = learn_callgraph(infer_roles(simulate(app, 10, n_requests=100, seed=1)).spans)
    evaluate(
        simulate(app, 300, n_requests=60, seed=3, record_threads=False),
        ALGORITHMS,
        callgraph=callgraph,
    )
    traces = infer_roles(simulate(app, 100, n_requests=40, seed=1)).spans
    critical_paths(traces)
    tail_profile(traces)
    analyze_paths(messages_from_spans(traces).messages)
    run_loadbalancer_experiment(LoadBalancerParams(duration_ns=2 * 10**9))
    _otlp_request()


def _otlp_request() -> None:
    """The compiled pass over an OTLP request's bytes (``tacit.formats.otlp_wire``)."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    from tacit.formats.otlp import read_export_request

    request = ExportTraceServiceRequest()
    resource_spans = request.resource_spans.add()
    service = resource_spans.resource.attributes.add()
    service.key, service.value.string_value = "service.name", "warm-up"
    span = resource_spans.scope_spans.add().spans.add()
    span.trace_id, span.span_id, span.kind = b"\x01" * 16, b"\x02" * 8, 2
    read_export_request(request.SerializeToString(), "protobuf", "warm-up")


def _packets() -> None:
    """RDA, captures and Pirate first; then the demo, whose reconstruction the other process
    has compiled by then, and whose capture half needs the parsers compiled here."""
    from tacit.evaluation.demo import run_demo
    from tacit.formats.pcap import read_packets
    from tacit.formats.pcap_write import write_pcap
    from tacit.oneway_latency import StreamParams, compare_methods, simulate_stream
    from tacit.response_latency import ALGORITHMS, estimate_response_latency, request_truth
    from tacit.simulate import load_app, simulate
    from tacit.simulate.app_packets import app_packets

    stream = simulate_stream(StreamParams(duration_ns=20_000_000))
    compare_methods(stream.sender, stream.receiver, 100_000)
    packets = app_packets(simulate(load_app(None), 100, n_requests=40, seed=2))
    with tempfile.TemporaryDirectory() as tmp:
        write_pcap(Path(tmp) / "app.pcap", packets.frames, packets.times)
        read = read_packets(Path(tmp) / "app.pcap", payloads=True)
        for algorithm in ALGORITHMS:
            estimate_response_latency(read.packets, algorithm=algorithm)
        request_truth(read)
        _http2_tests_conversation()
        run_demo(Path(tmp), requests=60, rates=(300,))


def _http2_tests_conversation() -> None:
    """``formats/test_http2.py`` parses a conversation as it is imported, that is in every
    pytest worker at once as they collect the tests: its header blocks take the Python path
    (``_request``) whose interning of strings no capture above reaches, 3-5 s of compiling in
    each worker. Importing it here compiles that once (the HTTP/2 parser itself is compiled
    by then)."""
    import importlib
    import sys

    sys.path.insert(0, str(Path(__file__).parent / "formats"))
    importlib.import_module("test_http2")


def compile_kernels() -> None:
    """Run both workloads, one per process, and wait for them: unless some kernel is cached
    already (a checkout that has run anything)."""
    from tacit.kernel_cache import kernels_cached

    if kernels_cached():
        return
    with ProcessPoolExecutor(2) as pool:
        for done in [pool.submit(_spans), pool.submit(_packets)]:
            done.result()


if __name__ == "__main__":  # make test runs it before the tests
    compile_kernels()
