"""Benchmark: spans from packets (``tacit capture``) — throughput, and trace accuracy end to end.

1. Throughput. The embedded shop app simulated at 400 requests/s, its RPCs written as the
   packets one capture point would hold (:mod:`tacit.simulate.app_packets`: HTTP/1.1 into the
   entry service, gRPC behind it, every data segment acknowledged), read back by
   :func:`~tacit.formats.capture_spans.read_capture_spans` (decode, reassemble, parse, spans).
   Printed: packets/s and spans/s on one core (best of three), and the ratio of that time to
   decoding the packets alone (:func:`~tacit.formats.pcap.read_packets` with payloads), the
   baseline every capture command pays; again with every service speaking HTTP/1.1. Beside it,
   the same capture read in batches (:class:`~tacit.formats.capture_stream.CaptureSpanStream`,
   what ``tacit serve --capture-*`` does) of 65,536 records (a file) and of 4,096 (about what
   a live source gathers in its half-second at this rate): the time against reading it whole,
   and whether the spans are the same.
2. Accuracy, simulated. The same app at several loads; the call graph learned from a capture of
   requests sent one at a time (TraceWeaver §5.2); TraceWeaver and FCFS scored against the
   simulator's truth, which the packets carry as request ids that only the scoring reads.
   Beside it, the same algorithms on the simulator's own spans (what a collector in every
   service would record, call graph from the same test run): the capture point's cost, since
   one point times a server span with its caller's times, network delays included.
3. Accuracy, live (when network namespaces, tcpdump and grpcio are available, as root): the
   traced example app (an HTTP/1.1 front calling two gRPC back ends, in namespaces) captured with
   tcpdump, scored against the app's own log of which request caused which.

``--quick`` runs smaller sizes (for a smoke run).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from tacit.evaluation.capture_accuracy import evaluate_capture
from tacit.evaluation.reconstruction import evaluate
from tacit.formats.capture_spans import ServiceMap, read_capture_spans, read_service_map
from tacit.formats.capture_stream import CaptureSpanStream
from tacit.formats.live import capture_file_batches
from tacit.formats.pcap import read_packets
from tacit.formats.pcap_write import write_pcap
from tacit.model.roles import infer_roles
from tacit.reconstruct.callgraph import learn_callgraph
from tacit.simulate import load_app, simulate
from tacit.simulate.app_packets import HTTP1, REQUEST_ID, AppPackets, app_packets

LOADS = (50, 100, 200, 400)


def _write(spans, path: Path, protocols: dict[str, str] | None = None) -> AppPackets:
    packets = app_packets(spans, protocols)
    write_pcap(path, packets.frames, packets.times)
    return packets


def _best(fn, runs: int = 3) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(runs):
        t0 = time.process_time()
        out = fn()
        best = min(best, time.process_time() - t0)
    return best, out


def throughput(work: Path, requests: int, http1_only: bool = False) -> dict:
    app = load_app(None)
    spans = simulate(app, 400, n_requests=requests, seed=3)
    protocols = {svc: HTTP1 for svc in app.services} if http1_only else None
    packets = _write(spans, work / "throughput.pcap", protocols)
    names = ServiceMap(addresses=packets.service_map())
    decode_s, _ = _best(lambda: read_packets(work / "throughput.pcap", payloads=True))
    capture_s, got = _best(lambda: read_capture_spans(work / "throughput.pcap", names))
    n = len(packets.frames)
    streamed = {}
    for batch in (65_536, 4_096):
        stream_s, parts = _best(lambda b=batch: _streamed(work / "throughput.pcap", names, b))
        streamed[f"batches_of_{batch}"] = {
            "time_vs_whole": round(stream_s / capture_s, 2),
            "same_spans": _span_rows(parts) == _span_rows([got.spans]),
        }
    return {
        "packets": n,
        "connections": packets.connections,
        "spans": len(got.spans),
        "exchanges": got.accounting.as_dict(),
        "packets_per_second": round(n / capture_s),
        "spans_per_second": round(len(got.spans) / capture_s),
        "decode_only_packets_per_second": round(n / decode_s),
        "capture_vs_decode_time": round(capture_s / decode_s, 2),
        "streamed": streamed,
    }


def _streamed(path: Path, names: ServiceMap, batch: int) -> list:
    stream = CaptureSpanStream(names)
    parts = [
        stream.feed(read).spans for read in capture_file_batches(path, "", batch, payloads=True)
    ]
    return [*parts, stream.flush().spans]


def _span_rows(tables: list) -> list[tuple]:
    return sorted(
        (t.strings[int(t.service[r])], t.strings[int(t.endpoint[r])], int(t.kind[r]),
         int(t.start[r]), int(t.end[r]))
        for t in tables
        for r in range(len(t))
    )  # fmt: skip


def simulated_accuracy(work: Path, requests: int) -> list[dict]:
    app = load_app(None)
    test_spans = simulate(app, 2, n_requests=100, seed=5, record_threads=False)
    test = _write(test_spans, work / "test.pcap")
    span_callgraph = learn_callgraph(infer_roles(test_spans).spans)
    rows = []
    for rate in LOADS:
        spans = simulate(app, rate, n_requests=requests, seed=7, record_threads=False)
        prod = _write(spans, work / f"load{rate}.pcap")
        names = ServiceMap(addresses={**test.service_map(), **prod.service_map()})
        doc = evaluate_capture(
            work / f"load{rate}.pcap", work / "test.pcap", REQUEST_ID, prod.parent_of(), names
        )
        own = evaluate(spans, ["traceweaver", "fcfs"], callgraph=span_callgraph)
        rows.append(
            {
                "load": rate,
                "accuracy_from_packets": doc.pop("accuracy"),
                "accuracy_from_spans": {r["algorithm"]: r["accuracy"] for r in own.results},
                **doc,
            }
        )
    return rows


def live_accuracy(work: Path, seconds: float) -> dict:
    from tacit.experiment.traced_app import (
        TracedAppParams,
        run_traced_app,
        traced_app_unavailable,
    )

    reason = traced_app_unavailable()
    if reason:
        return {"skipped": reason}
    params = TracedAppParams(duration_s=seconds)
    test = run_traced_app(params.test_environment(5.0), work / "live" / "test")
    run = run_traced_app(params, work / "live")
    doc = evaluate_capture(
        run.pcap, test.pcap, "x-request-id", run.parent_of(), read_service_map(run.services)
    )
    return {"app": run.as_dict()["requests"], **doc}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        doc = {
            "benchmark": "capture",
            "throughput": throughput(work, 2_000 if args.quick else 20_000),
            "throughput_http1": throughput(work, 2_000 if args.quick else 20_000, True),
            "simulated": simulated_accuracy(work, 300 if args.quick else 2_000),
            "live": live_accuracy(work, 5 if args.quick else 20),
        }
    print(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
