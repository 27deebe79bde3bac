"""Benchmark: ``tacit serve`` under the OpenTelemetry SDK's exporter — sustained ingest with
online reconstruction, a burst beyond what it can take, ``kill -9`` mid-stream, and a trace
search over a million stored spans.

The service runs as ``tacit serve`` in its own process pinned to one core (the senders to the
other), with the service's default TraceWeaver §5.3 windows; spans are the embedded shop app's,
exported in batches of 512 by the SDK's OTLP/HTTP protobuf exporter. For the sustained,
saturated and encoded runs the app has four times its instances and takes 1,200 requests/s
(``STREAM_SCALE``): about 19,000 spans a second of its own time, the target's rate, so that
the service holds the spans pending that a stream at the target rate leaves pending. At 300
requests/s a quarter as many are pending, and a cost that grows with them looked smaller: when
every push joined the pending spans, that took 2.5 µs a span at 300 requests/s and 6.1 at
1,200 (10-11.6 with the service's default lateness of 7 s). The other runs take the app as it
is at 300 requests/s.

* sustained: every span sent as fast as the exporter goes; spans/s from the first request to
  the last span in a finished trace (which includes waiting for the last windows to close);
  the steady rate of spans into finished traces while the exporter sends, from round to round, and
  whether the service was the bottleneck then; the service's CPU time per span (steadier than
  spans/s on a shared machine); and link accuracy (a call's stored parent is its true one)
  against the offline and the batch-online algorithms on the same spans; target 20,000 spans/s
  at offline accuracy. Every call is sent without its parent (its callee's server span still
  names it), so that the service infers every one: a parent the sender gives is kept.
* defaults: the sustained run against the service as configured by default (its bound on
  pending spans, and windows for requests of up to 10 s with a lateness of 7 s), not the
  windows fitted to the simulated app's short requests and sent-in-order spans that the other
  runs use.
* saturated: the same with two exporters taking the batches in turn. One exporter waits for
  each answer, and that wait can limit it below what the service takes; two keep the service
  busier, but they encode on the same core (see exporter_alone).
* exporter_alone: the SDK's exporter, one and two at once, against a receiver that answers at
  once and does nothing else: the most spans a second the sender's core can offer, which caps
  sustained and saturated (the exporter encodes every span in Python).
* encoded: the requests the exporter's encoder makes, made before the run and posted over two
  keep-alive connections (``encoded_requests``, ``post_requests``), so that the sender's core
  does not limit what the service is offered: the service's own capacity.
* burst: ten times the target rate for ten seconds, at the service's defaults (bound on
  pending spans, windows, database memory): a stream like the sustained run's, encoded once and
  continued by copies as new traces, 2.3 M spans posted over eight connections as fast as the
  service answers, each 429 retried after its Retry-After; the rate offered until the first
  429 and over the first ten seconds (refused requests included), the spans acknowledged
  against those stored, those too late for reconstruction, and the service's peak resident
  memory.
* kill -9: the service killed when half the batches are acknowledged, restarted on its
  database, the refused batches sent again; acknowledged spans missing from the store (target 0).
* capture: spans from a capture file instead of an exporter (``capture_pcap``): the shop app's
  RPCs at 300 requests/s as one capture point's packets; spans/s and CPU per span through to
  the last finished trace, and the accuracy of the stored links against the app's log, beside
  the offline and batch-online algorithms on the same spans.
* query: a million spans reconstructed into a database, then Jaeger searches for a service's
  20 most recent traces, median of 20 (target < 200 ms), and those with a call to db (a
  search by tags); then retention deletes the older half
  in the service's bounded passes (the total and the longest pass, which is how long
  reconstruction waits at most) and the searches are timed again.

Prints one JSON object; ``python bench/bench_serve.py [PART ...] --markdown
docs/serve-performance.md`` also writes the performance page.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import replace
from pathlib import Path

import numpy as np

from report_part import publish
from tacit.evaluation.capture_accuracy import call_accuracy, label_capture, stored_parents
from tacit.experiment.memcached import free_port
from tacit.experiment.otlp_load import (
    BATCH,
    encoded_requests,
    lost_context,
    post_requests,
    replicate_requests,
    sdk_spans,
    send_spans,
)
from tacit.experiment.process_cpu import tree_cpu_s
from tacit.formats.capture_spans import ServiceMap, read_capture_spans
from tacit.formats.exchanges import ExchangeParams
from tacit.formats.pcap_write import write_pcap
from tacit.model.roles import infer_roles
from tacit.model.spans import CLIENT
from tacit.reconstruct.callgraph import learn_callgraph
from tacit.reconstruct.isolated import callgraph_from_test_capture
from tacit.reconstruct.online import NS, reconstruct_streamed
from tacit.reconstruct.traceweaver import reconstruct_traceweaver
from tacit.serve import SERVE_ONLINE
from tacit.serve.config import ServeConfig
from tacit.simulate import load_app, scale_out, simulate
from tacit.simulate.app_packets import REQUEST_ID, app_packets

TACIT = Path(sys.executable).parent / "tacit"
RATE = 300
STREAM_SCALE = 4
"""The sustained runs' app has this many times the shop app's instances and takes this many
times ``RATE``."""
SAMPLE_S = 0.1
"""How often the sustained run reads the service's counts."""
BURST_SECONDS = 10
BURST_COPIES = 6
"""The burst's stream in copies of the sustained run's (386,871 spans, 20 s of the app's time):
2.3 M spans, what ten times the target rate offers in a little over ten seconds."""
SERVICE_PENDING = ServeConfig().max_pending_spans
ONLINE = replace(SERVE_ONLINE, max_request_ns=2 * NS, lateness_ns=NS)
"""The service's windows; the simulated spans are sent in order, and their requests are short."""
CONFIG = """\
http: 127.0.0.1:{port}
grpc: ""
database: tacit.duckdb
callgraph: callgraph.yaml
"""
TUNED = """\
max_pending_spans: {pending}
online: {{max_request_s: 2, lateness_s: {lateness_s}}}
"""
"""What the runs but ``defaults`` set: the simulated requests are short, and the sustained runs
hold every span pending that the stream leaves so."""


def proc_status(pid: int, field: str) -> int:
    """The number ``field`` of ``/proc/PID/status`` gives: kB for ``VmRSS`` and ``VmHWM``, a
    count for ``Threads``."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} for process {pid}")


class Server:
    """``tacit serve`` in a subprocess on core 0; ``defaults``: with the service's own bound
    on pending spans and windows, else with ``pending`` and ``lateness_s`` (:data:`TUNED`)."""

    def __init__(
        self,
        tmp: Path,
        callgraph,
        pending: int = 10**7,
        extra: str = "",
        lateness_s: float = ONLINE.lateness_ns / NS,
        defaults: bool = False,
    ) -> None:
        self.tmp = tmp
        self.port = free_port()
        callgraph.save(tmp / "callgraph.yaml")
        tuned = "" if defaults else TUNED.format(pending=pending, lateness_s=lateness_s)
        (tmp / "serve.yaml").write_text(CONFIG.format(port=self.port) + tuned + extra)

    def start(self) -> Server:
        self.proc = subprocess.Popen(
            [str(TACIT), "serve", "--config", str(self.tmp / "serve.yaml")],
            stderr=subprocess.DEVNULL,
            preexec_fn=lambda: os.sched_setaffinity(0, {0}),
        )
        while True:
            try:
                with urllib.request.urlopen(self.url("/readyz"), timeout=1):
                    return self
            except OSError:
                time.sleep(0.1)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def get(self, path: str) -> bytes:
        with urllib.request.urlopen(self.url(path), timeout=60) as r:
            return r.read()

    def metric(self, name: str) -> float:
        return sum(
            float(line.rsplit(" ", 1)[1])
            for line in self.get("/metrics").decode().splitlines()
            if line.startswith(name)
        )

    def status(self) -> dict:
        return json.loads(self.get("/api/tacit/status"))

    def wait_idle(self) -> None:
        while self.status()["pending"]:
            time.sleep(0.1)

    def peak_rss_mib(self) -> float:
        """The peak resident memory of the service's process and those it started (where it
        has a second core, the process that builds its rows)."""
        import psutil

        started = psutil.Process(self.proc.pid).children(recursive=True)
        pids = [self.proc.pid, *(c.pid for c in started)]
        return sum(proc_status(pid, "VmHWM") for pid in pids) / 1024

    def cpu_seconds(self) -> float:
        """User and system CPU the service and the processes it started have used so far: its
        work, whatever else the machine runs (throughput on a shared machine varies by a
        quarter from run to run)."""
        return sum(tree_cpu_s(self.proc.pid))

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=120)


def _stored(db: Path) -> tuple[int, set[str]]:
    import duckdb

    con = duckdb.connect(str(db), read_only=True)
    ids = {r[0] for r in con.execute("SELECT span_id FROM spans").fetchall()}
    n = con.execute("SELECT count(*) FROM spans").fetchone()[0]
    con.close()
    return int(n), ids


def _served_accuracy(db: Path, spans) -> float:
    """The share of the calls of ``spans`` whose stored parent is their true one (by span id)."""
    import duckdb

    con = duckdb.connect(str(db), read_only=True)
    rows = "SELECT span_id, parent_span_id FROM spans WHERE kind = 'client'"
    stored = dict(con.execute(rows).fetchall())
    con.close()
    s = spans.strings
    calls = np.flatnonzero(spans.kind == CLIENT).tolist()
    right = sum(
        stored.get(s[int(spans.span_id[r])]) == s[int(spans.span_id[spans.parent[r]])]
        for r in calls
    )
    return right / len(calls)


def sustained(
    spans, callgraph, tmp: Path, senders: int = 1, encoded: bool = False, defaults: bool = False
) -> dict:
    """The SDK's exporters send ``spans``, ``senders`` of them taking the batches in turn; or,
    ``encoded``, the requests the exporter's encoder made before the run are posted over
    ``senders`` connections, so that the sender's core does not limit what the service gets.
    ``defaults``: the service as configured by default (:class:`Server`)."""
    # Several exporters' batches arrive out of order, which a lateness of 3 s allows for (the
    # spans that came too late are counted); with 1 s, one run of three served 97.9% right.
    lateness_s = 1 if senders == 1 else 3
    server = Server(tmp, callgraph, lateness_s=lateness_s, defaults=defaults).start()
    sent = lost_context(spans)  # a given parent is kept: the run measures inference
    requests = encoded_requests(sent) if encoded else []
    start_cpu_s = server.cpu_seconds()
    samples: list[tuple[float, int, int]] = []  # (time, received, pending)
    sending = threading.Event()
    sending.set()

    def sample() -> None:
        while sending.is_set():
            st = server.status()
            samples.append((time.monotonic(), st["received"], st["pending"]))
            time.sleep(SAMPLE_S)

    sampler = threading.Thread(target=sample)
    sampler.start()
    if encoded:
        log = post_requests(requests, server.url("/v1/traces"), connections=senders)
    else:
        log = send_spans(sent, server.url("/v1/traces"), senders=senders)
    sending.clear()
    began = time.monotonic() - log.seconds  # the first request (the SDK's spans made before)
    sampler.join()
    server.wait_idle()
    total_s = time.monotonic() - began
    late = server.metric('tacit_spans_unmapped_total{reason="late"')
    rss = server.peak_rss_mib()
    cpu_s = server.cpu_seconds() - start_cpu_s
    server.stop()
    obs = infer_roles(spans)
    blind = obs.without_truth()
    client = obs.spans.kind == CLIENT
    truth = obs.spans.parent[client]
    offline = reconstruct_traceweaver(blind, callgraph).parent[client]
    online = reconstruct_streamed(blind, callgraph, online=ONLINE).parent[client]
    return {
        "spans": len(spans),
        "senders": senders,
        "encoded_before": encoded,
        "acknowledged": log.acknowledged,
        "sender_seconds": round(log.seconds, 2),
        "seconds_to_last_trace": round(total_s, 2),
        "spans_per_s": round(len(spans) / total_s),
        **_steady(samples),
        "target_spans_per_s": 20_000,
        "server_cpu_us_per_span": round(cpu_s / len(spans) * 1e6, 1),
        "peak_rss_mib": round(rss),
        "late_spans": int(late),
        "accuracy_served": round(_served_accuracy(tmp / "tacit.duckdb", spans), 4),
        "accuracy_offline": round(float((offline == truth).mean()), 4),
        "accuracy_online_batch": round(float((online == truth).mean()), 4),
    }


def exporter_alone(spans) -> dict:
    """The SDK's exporter against a receiver that answers every request at once and does
    nothing else (on the service's core): how many spans a second the sender's core can offer
    at all, the ceiling of ``sustained``."""
    port = free_port()
    sink = subprocess.Popen(
        [sys.executable, "-c", SINK, str(port)],
        preexec_fn=lambda: os.sched_setaffinity(0, {0}),
    )
    try:
        url = f"http://127.0.0.1:{port}/v1/traces"
        while True:
            try:
                urllib.request.urlopen(url, data=b"", timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        out = {}
        for senders in (1, 2):
            log = send_spans(spans, url, senders=senders)
            out[f"spans_per_s_{senders}_exporters"] = round(log.acknowledged / log.seconds)
        return {"spans": len(spans), **out}
    finally:
        sink.kill()
        sink.wait()


SINK = """
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

class Sink(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass

ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Sink).serve_forever()
"""


def _steady(samples: list[tuple[float, int, int]]) -> dict:
    """The rate spans went into finished traces while the exporter was sending, and whether
    the service was the bottleneck then (its pending spans grew: the exporter offered more
    than it finished).

    Traces finish a window at a time, so the rate is taken between the first and the last
    round seen finishing (a sample whose finished count rose), not over the whole sending
    time, which would count the first windows filling and a part-round at the end."""
    finished = [(t, received - pending, pending) for t, received, pending in samples]
    rounds = [now for before, now in itertools.pairwise(finished) if now[1] > before[1]]
    if len(rounds) < 2:
        return {}
    (t0, done0, pending0), (t1, done1, pending1) = rounds[0], rounds[-1]
    return {
        "steady_spans_per_s": round((done1 - done0) / (t1 - t0)),
        "steady_seconds": round(t1 - t0, 1),
        "steady_service_bound": pending1 > pending0,
    }


def burst(spans, callgraph, tmp: Path, connections: int = 8) -> dict:
    """Ten times the target rate for ten seconds at the service's default bound on pending
    spans: ``spans`` (a stream like the sustained run's) encoded by the SDK's encoder once and
    continued by :data:`BURST_COPIES` - 1 copies as new traces (``replicate_requests``),
    posted over ``connections`` connections as fast as the service answers, each refusal
    retried after its Retry-After as the exporter would. The SDK's exporters cannot offer that
    rate themselves (``exporter_alone``). Every acknowledged span must be stored, memory stay
    bounded, and the refusals be 429s."""
    period_ns = int(spans.end.max() - spans.start.min())
    requests = replicate_requests(encoded_requests(spans), BURST_COPIES, period_ns)
    total = sum(n for n, _ in requests)
    server = Server(tmp, callgraph, defaults=True).start()
    log = post_requests(requests, server.url("/v1/traces"), connections=connections)
    server.wait_idle()
    refused = server.metric('tacit_requests_refused_total{reason="busy"')
    late = server.metric('tacit_spans_unmapped_total{reason="late"')
    rss = server.peak_rss_mib()
    server.stop()
    stored, _ = _stored(tmp / "tacit.duckdb")
    answers = sorted(log.answers)
    first_refusal = next((t for t, _, status in answers if status == 429), log.seconds)
    before = sum(n for t, n, _ in answers if t <= first_refusal)
    window = sum(n for t, n, _ in answers if t <= BURST_SECONDS)
    return {
        "spans": total,
        "connections": connections,
        "max_pending_spans": SERVICE_PENDING,
        "offered_spans_per_s_until_first_429": round(before / first_refusal),
        "first_429_after_s": round(first_refusal, 2),
        f"offered_spans_per_s_first_{BURST_SECONDS}_s": round(window / BURST_SECONDS),
        "target_offered_spans_per_s": 10 * 20_000,
        "sender_seconds": round(log.seconds, 1),
        "acknowledged": log.acknowledged,
        "not_acknowledged": log.failed,
        "stored": stored,
        "acknowledged_lost": max(0, log.acknowledged - stored),
        "answered_429": sum(status == 429 for _, _, status in answers),
        "refused_429_counted_by_service": int(refused),
        "other_answers": sorted({status for _, _, status in answers} - {200, 429}),
        "late_spans": int(late),
        "peak_rss_mib": round(rss),
    }


def kill_9(spans, callgraph, tmp: Path) -> dict:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import SpanExportResult

    order = np.argsort(spans.end, kind="stable")
    readable = sdk_spans(spans, time.time_ns() - int(spans.start.min()))
    batches = [order[a : a + BATCH] for a in range(0, len(order), BATCH)]
    server = Server(tmp, callgraph).start()
    acked: list[int] = []
    refused: list[np.ndarray] = []
    exporter = OTLPSpanExporter(endpoint=server.url("/v1/traces"), timeout=2)
    for k, rows in enumerate(batches):
        if k == len(batches) // 2:
            server.proc.kill()
            server.proc.wait()
        if exporter.export([readable[r] for r in rows]) == SpanExportResult.SUCCESS:
            acked.extend(rows.tolist())
        else:
            refused.append(rows)
    acked_before = len(acked)
    server.start()
    exporter = OTLPSpanExporter(endpoint=server.url("/v1/traces"), timeout=30)
    for rows in refused:
        if exporter.export([readable[r] for r in rows]) == SpanExportResult.SUCCESS:
            acked.extend(rows.tolist())
    server.wait_idle()
    server.stop()
    stored, ids = _stored(tmp / "tacit.duckdb")
    s = spans.strings
    missing = sum(s[int(spans.span_id[r])] not in ids for r in acked)
    return {
        "spans": len(spans),
        "acknowledged_before_kill": acked_before,
        "acknowledged": len(acked),
        "stored": stored,
        "acknowledged_lost": missing,
    }


def capture(tmp: Path, requests: int) -> dict:
    """Spans from a capture file (the shop app's RPCs as one capture point's packets, HTTP/1.1
    into the front end and gRPC behind it), the call graph learned from a capture of test
    requests sent one at a time; scored against the app's log of which request caused which."""
    app = load_app(None)
    made = {}
    for name, spans in (
        ("test", simulate(app, 2, n_requests=100, seed=5, record_threads=False)),
        ("prod", simulate(app, RATE, n_requests=requests, seed=7, record_threads=False)),
    ):
        made[name] = app_packets(spans)
        write_pcap(tmp / f"{name}.pcap", made[name].frames, made[name].times)
    addresses = {**made["test"].service_map(), **made["prod"].service_map()}
    (tmp / "services.json").write_text(json.dumps(addresses))
    names = ServiceMap(addresses=addresses)
    callgraph, _ = callgraph_from_test_capture(tmp / "test.pcap", names)
    got = read_capture_spans(
        tmp / "prod.pcap", names, params=ExchangeParams(keep_headers=(REQUEST_ID,))
    )
    truth, _ = label_capture(got, REQUEST_ID, made["prod"].parent_of())
    extra = "capture_pcap: prod.pcap\ncapture_services: services.json\n"
    server = Server(tmp, callgraph, extra=extra).start()
    start_cpu_s = server.cpu_seconds()
    began = time.monotonic()
    while not (status := server.status())["capture"][0]["finished"] or status["pending"]:
        time.sleep(0.1)
    total_s = time.monotonic() - began
    cpu_s = server.cpu_seconds() - start_cpu_s
    server.stop()
    import duckdb

    con = duckdb.connect(str(tmp / "tacit.duckdb"), read_only=True)
    stored = con.execute(
        "SELECT service, kind, start_ns, duration_ns, span_id, parent_span_id FROM spans"
    ).fetchall()
    con.close()
    blind = truth.take(np.arange(len(truth)))
    blind.parent[:] = -1
    source = status["capture"][0]
    return {
        "packets": source["packets"],
        "spans": source["spans"],
        "exchanges": source["exchanges"],
        "unparsed_bytes": source["unparsed_bytes"],
        "stored": len(stored),
        "seconds_to_last_trace": round(total_s, 2),
        "spans_per_s": round(len(stored) / total_s),
        "server_cpu_us_per_span": round(cpu_s / len(stored) * 1e6, 1),
        "accuracy_served": round(call_accuracy(truth, stored_parents(truth, stored)), 4),
        "accuracy_offline": round(
            call_accuracy(truth, reconstruct_traceweaver(blind, callgraph).parent), 4
        ),
        "accuracy_online_batch": round(
            call_accuracy(truth, reconstruct_streamed(blind, callgraph, online=ONLINE).parent), 4
        ),
    }


def query(callgraph, tmp: Path, target_spans: int = 1_000_000) -> dict:
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    from tacit.formats.otlp import read_export_request
    from tacit.serve.online_feed import Fed, OnlineFeed
    from tacit.serve.reconstructor import EXPIRY_SPANS
    from tacit.serve.store import Store, TraceQuery

    store = Store(tmp / "tacit.duckdb")
    feed = OnlineFeed(callgraph, ONLINE)
    seq, shift, seed = 0, 0, 10
    began = time.monotonic()
    while seq < target_spans:
        spans = simulate(load_app(), RATE, duration_s=20, seed=seed)
        readable = sdk_spans(spans, shift)
        shift += int(spans.end.max() - spans.start.min()) + 20 * NS  # after the advance
        order = np.argsort(spans.end, kind="stable")
        for a in range(0, len(order), BATCH):
            body = encode_spans([readable[r] for r in order[a : a + BATCH]]).SerializeToString()
            table, parents = read_export_request(body, "protobuf", "bench")
            fed = feed.push(table, parents, np.arange(seq, seq + len(table)), np.inf)
            seq += len(table)
            _store(store, feed, fed, seq)
        _store(store, feed, Fed(feed.advance(feed.tw.latest_end + 10 * NS)), seq)
        seed += 1
    fill_s = time.monotonic() - began
    stored = store.counts()

    def search(tags: tuple[tuple[str, str], ...] = ()) -> tuple[int, list[float]]:
        times = []
        for _ in range(20):
            t = time.perf_counter()
            found = store.find_traces(TraceQuery(service="catalog", limit=20, tags=tags))
            times.append((time.perf_counter() - t) * 1000)
        return len(found), times

    found, times = search()
    found_tagged, tagged = search((("peer.service", "db"),))
    # Retention: every trace finished at 0 here, so the older half (by sequence number) goes,
    # in passes of at most EXPIRY_SPANS spans as the service runs them.
    expired: dict[str, int] = {}
    passes: list[float] = []
    while True:
        t = time.perf_counter()
        part = store.expire(before_ns=1, low_water=seq // 2, most_spans=EXPIRY_SPANS)
        passes.append(time.perf_counter() - t)
        for table, n in part.rows.items():
            expired[table] = expired.get(table, 0) + n
        if part.done:
            break
    _, after = search()
    store.close()
    return {
        "stored_spans": stored["spans"],
        "stored_traces": stored["traces"],
        "fill_seconds": round(fill_s, 1),
        "traces_found": found,
        "search_ms_median": round(statistics.median(times), 1),
        "search_ms_max": round(max(times), 1),
        "target_ms": 200,
        "tag_search_traces_found": found_tagged,
        "tag_search_ms_median": round(statistics.median(tagged), 1),
        "expired_spans": expired["spans"],
        "expired_traces": expired["traces"],
        "expire_seconds": round(sum(passes), 2),
        "expire_passes": len(passes),
        "expire_longest_pass_seconds": round(max(passes), 2),
        "search_ms_median_after_expiry": round(statistics.median(after), 1),
    }


def _store(store, feed, fed, next_seq: int) -> None:
    from tacit.serve.finished_rows import Rows, TakenIds, kept_ids

    rows = Rows()
    for f in fed.finished:
        seq, given = feed.release(f)
        rows.add_finished(f, seq, given, 1, 0, kept_ids(f, given, TakenIds()))
    for a in fed.alone:
        rows.add_alone(a)
    store.write_finished(rows.tables(0), {"low_water": feed.low_water(next_seq)})


def _load(seed: int, seconds: float, scale: int = 1):
    """The shop app's spans (with ``scale`` times its instances and rate) without thread ids,
    which OTLP spans from the SDK do not carry: the offline algorithm sees what the service
    sees."""
    app = scale_out(load_app(), scale)
    return simulate(app, RATE * scale, duration_s=seconds, seed=seed, record_threads=False)


def markdown(results: dict[str, dict], command: str) -> str:
    """The performance page: the date and the command, then one table per part of what it
    measured (nested figures named by their path)."""
    lines = [
        "# `tacit serve`: performance",
        "",
        f"Written by `{command}` on {time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores: "
        "`tacit serve` in its own process pinned to one core, the senders on the other "
        "(`bench/bench_serve.py` says what each part does). Absolute rates follow the "
        "machine's speed that hour; the service's CPU time per span is the steadier figure.",
    ]
    for part, figures in results.items():
        lines += ["", f"## {part}", "", "| measure | value |", "|---|---|"]
        lines += [f"| {name} | {value} |" for name, value in _flat(figures)]
    return "\n".join(lines) + "\n"


def _flat(doc: dict, prefix: str = "") -> list[tuple[str, object]]:
    out: list[tuple[str, object]] = []
    for key, value in doc.items():
        name = f"{prefix}{key}"
        out += _flat(value, f"{name}.") if isinstance(value, dict) else [(name, value)]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("parts", nargs="*", help="the parts to run (all by default)")
    parser.add_argument("--markdown", type=Path, help="also write the performance page here")
    args = parser.parse_args()
    only = args.parts
    os.sched_setaffinity(0, {1})
    callgraph = learn_callgraph(simulate(load_app(), 5, n_requests=200, seed=1))
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        runs = {
            "sustained": lambda d: sustained(_load(2, 20, STREAM_SCALE), callgraph, d),
            "defaults": lambda d: sustained(
                _load(2, 20, STREAM_SCALE), callgraph, d, defaults=True
            ),
            "saturated": lambda d: sustained(_load(2, 20, STREAM_SCALE), callgraph, d, senders=2),
            "encoded": lambda d: sustained(
                _load(2, 20, STREAM_SCALE), callgraph, d, senders=2, encoded=True
            ),
            "exporter_alone": lambda d: exporter_alone(_load(2, 20, STREAM_SCALE)),
            "burst": lambda d: burst(_load(3, 20, STREAM_SCALE), callgraph, d),
            "kill_9": lambda d: kill_9(_load(4, 10), callgraph, d),
            "query": lambda d: query(callgraph, d),
            "capture": lambda d: capture(d, 20_000),
        }
        for name, run in runs.items():
            if only and name not in only:
                continue
            d = Path(tmp) / name
            d.mkdir()
            results[name] = run(d)
            print(name, json.dumps(results[name]), file=sys.stderr)
    print(json.dumps({"serve": results}, indent=1))
    if args.markdown:
        command = " ".join(["python bench/bench_serve.py", *only, "--markdown", str(args.markdown)])
        publish(markdown(results, command), args.markdown, echo=False)


if __name__ == "__main__":
    main()
