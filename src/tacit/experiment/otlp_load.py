"""Spans sent to an OTLP receiver by the OpenTelemetry SDK's own exporters: the load of
``tacit serve``'s tests, benchmarks and demo.

The spans (a simulation, or any traces with ground truth) become SDK ``ReadableSpan`` objects
with the context their tracer gave them, resource ``service.name`` and ``host.name`` (the
instance) and ``peer.service`` on calls, and are exported in batches of 512 in order of span
end, as the SDK's batch span processor would, shifted by ``shift_ns`` (default: so that the
earliest starts now). ``paced`` sends each batch when the latest end in it has passed in
real time, so the receiver sees a live stream. A batch refused for backpressure is retried by
the exporter itself (it honours ``Retry-After`` and RESOURCE_EXHAUSTED); one it gives up on is
counted.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tacit.model.span_details import STATUS_ERROR, STATUS_OK, status_codes
from tacit.model.spans import CLIENT, NONE, SERVER, SpanTable

BATCH = 512
"""The SDK batch span processor's default export batch size (OTEL_BSP_MAX_EXPORT_BATCH_SIZE)."""


@dataclass
class SendLog:
    """What the sender did: spans the receiver acknowledged and those it did not."""

    acknowledged: int = 0
    failed: int = 0
    batches: int = 0
    seconds: float = 0.0
    failed_batches: list[int] = field(default_factory=list)
    answers: list[tuple[float, int, int]] = field(default_factory=list)
    """Every answer :func:`post_requests` heard, refusals included: (seconds since the first
    request, spans in the request, HTTP status). The SDK's exporter retries out of sight."""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def record(self, batch: int, spans: int, acknowledged: bool) -> None:
        """Batch number ``batch`` of ``spans`` spans was answered (from any sender's thread)."""
        with self._lock:
            self.batches += 1
            if acknowledged:
                self.acknowledged += spans
            else:
                self.failed += spans
                self.failed_batches.append(batch)

    def answered(self, seconds: float, spans: int, status: int) -> None:
        """A request of ``spans`` spans was answered ``status`` at ``seconds``."""
        with self._lock:
            self.answers.append((seconds, spans, status))


def lost_context(spans: SpanTable) -> SpanTable:
    """``spans`` as services send them whose calls all lost their trace context (each call a
    trace of its own, as from a thread pool that does not carry it; its callee's server span
    still names it): a receiver that keeps the links a sender gives infers every call."""
    sent = spans.take(np.arange(len(spans)))
    sent.parent[sent.kind == CLIENT] = NONE
    return sent


def sdk_spans(spans: SpanTable, shift_ns: int = 0) -> list[Any]:
    """``spans`` as the SDK's ``ReadableSpan`` objects, in the table's row order, with the
    callee's service (``peer.service``), the thread (``thread.id``) and the status where
    known."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

    codes = {STATUS_OK: StatusCode.OK, STATUS_ERROR: StatusCode.ERROR}
    status = status_codes(spans.details, len(spans)).tolist()

    s = spans.strings
    kinds = {SERVER: SpanKind.SERVER, CLIENT: SpanKind.CLIENT}
    resources: dict[tuple[int, int], Any] = {}
    contexts = [
        SpanContext(
            int(s.values[t], 16),
            int(s.values[i], 16),
            is_remote=False,
            trace_flags=TraceFlags(TraceFlags.SAMPLED),
        )
        for t, i in zip(spans.trace.tolist(), spans.span_id.tolist(), strict=True)
    ]
    out = []
    for r in range(len(spans)):
        key = (int(spans.service[r]), int(spans.instance[r]))
        if key not in resources:
            resources[key] = Resource.create({"service.name": s[key[0]], "host.name": s[key[1]]})
        p, peer, thread = int(spans.parent[r]), int(spans.peer[r]), int(spans.thread[r])
        attributes: dict[str, Any] = {}
        if peer != NONE:
            attributes["peer.service"] = s[peer]
        if thread != NONE:
            attributes["thread.id"] = thread  # as the Java agent records it
        out.append(
            ReadableSpan(
                s.values[int(spans.endpoint[r])],
                context=contexts[r],
                parent=contexts[p] if p != NONE else None,
                resource=resources[key],
                kind=kinds.get(int(spans.kind[r]), SpanKind.INTERNAL),
                attributes=attributes or None,
                start_time=int(spans.start[r]) + shift_ns,
                end_time=int(spans.end[r]) + shift_ns,
                status=Status(codes.get(status[r], StatusCode.UNSET)),
            )
        )
    return out


def send_spans(
    spans: SpanTable,
    endpoint: str,
    *,
    paced: bool = False,
    shift_ns: int | None = None,
    timeout_s: float = 30.0,
    stop: threading.Event | None = None,
    senders: int = 1,
) -> SendLog:
    """Export ``spans`` to the OTLP/HTTP ``endpoint`` (``http://HOST:PORT/v1/traces``) with the
    SDK's protobuf exporter; returns what was acknowledged. Setting ``stop`` ends the sending
    before the next batch. With ``senders`` above one, that many exporters, each in a thread
    of its own, take the batches in turn, as the services of an application export at once:
    one exporter waits for each answer before it sends again."""
    shift = _shift(spans, shift_ns)
    readable = sdk_spans(spans, shift)
    batches = _batches(spans)
    began = time.monotonic()
    t0 = time.time_ns()

    def send(first: int) -> None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.trace.export import SpanExportResult

        exporter = OTLPSpanExporter(endpoint=endpoint, timeout=timeout_s)
        try:
            for k in range(first, len(batches), senders):
                rows = batches[k]
                if paced:
                    end = int(spans.end[rows].max()) + shift - t0
                    due = end / 1e9 - (time.monotonic() - began)
                    if due > 0 and stop is not None:
                        stop.wait(due)
                    elif due > 0:
                        time.sleep(due)
                if stop is not None and stop.is_set():
                    break
                result = exporter.export([readable[r] for r in rows])
                log.record(k, len(rows), result == SpanExportResult.SUCCESS)
        finally:
            exporter.shutdown()

    log = SendLog()
    return _in_turn(send, senders, log, began)


def encoded_requests(spans: SpanTable, shift_ns: int | None = None) -> list[tuple[int, bytes]]:
    """The span counts and bodies of the requests :func:`send_spans` would send for ``spans``,
    made ahead of sending by the SDK exporter's own encoder (``encode_spans``): the same bytes,
    so that a load test can measure a receiver beyond what the exporter, encoding in Python on
    the sender's core, can offer."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    readable = sdk_spans(spans, _shift(spans, shift_ns))
    return [
        (len(rows), encode_spans([readable[r] for r in rows]).SerializePartialToString())
        for rows in _batches(spans)
    ]


def replicate_requests(
    requests: list[tuple[int, bytes]], copies: int, period_ns: int
) -> list[tuple[int, bytes]]:
    """``requests`` (span count, OTLP/HTTP protobuf body) and ``copies - 1`` copies after them,
    copy ``c`` shifted ``c * period_ns`` later with the first byte of every trace id XORed with
    ``c``: new traces of the same shapes, continuing the stream, for a load longer than the
    spans encoded once (a copy costs a parse and a serialization, not the SDK's encoder)."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    if not 1 <= copies <= 256:
        raise ValueError(f"copies must be 1 to 256 (one byte of the trace id), got {copies}")
    out = list(requests)
    for c in range(1, copies):
        shift = c * period_ns
        for n, body in requests:
            message = ExportTraceServiceRequest.FromString(body)
            for resource in message.resource_spans:
                for scope in resource.scope_spans:
                    for span in scope.spans:
                        span.trace_id = bytes([span.trace_id[0] ^ c]) + span.trace_id[1:]
                        span.start_time_unix_nano += shift
                        span.end_time_unix_nano += shift
            out.append((n, message.SerializePartialToString()))
    return out


def post_requests(
    requests: list[tuple[int, bytes]],
    endpoint: str,
    *,
    connections: int = 2,
    timeout_s: float = 30.0,
) -> SendLog:
    """POST ``requests`` (span count, OTLP/HTTP protobuf body) to ``endpoint``, ``connections``
    keep-alive connections taking them in turn, each waiting for its answer as an exporter
    does; a 429 or 503 is retried after its ``Retry-After``, as the exporter's retry policy
    says. Returns what was acknowledged, and every answer (:attr:`SendLog.answers`)."""
    import http.client
    from urllib.parse import urlsplit

    url = urlsplit(endpoint)
    headers = {"Content-Type": "application/x-protobuf"}

    def post(first: int) -> None:
        conn = http.client.HTTPConnection(url.netloc, timeout=timeout_s)
        try:
            for k in range(first, len(requests), connections):
                n, body = requests[k]
                while True:
                    conn.request("POST", url.path, body, headers)
                    answer = conn.getresponse()
                    answer.read()
                    log.answered(time.monotonic() - began, n, answer.status)
                    if answer.status not in (429, 503):
                        break
                    time.sleep(float(answer.getheader("Retry-After") or 1))
                log.record(k, n, answer.status == 200)
        finally:
            conn.close()

    log = SendLog()
    began = time.monotonic()
    return _in_turn(post, connections, log, began)


def _in_turn(send: Callable[[int], None], senders: int, log: SendLog, began: float) -> SendLog:
    """Run ``send(first)`` for each of ``senders`` senders at once (the first in this thread),
    sender ``first`` taking batches first, first + senders, ...; ``log`` when all are done,
    timed from ``began``."""
    threads = [threading.Thread(target=send, args=(k,)) for k in range(1, senders)]
    for t in threads:
        t.start()
    send(0)
    for t in threads:
        t.join()
    log.failed_batches.sort()
    log.seconds = time.monotonic() - began
    return log


def _shift(spans: SpanTable, shift_ns: int | None) -> int:
    """``shift_ns``, by default what makes the earliest span start now."""
    return time.time_ns() - int(spans.start.min()) if shift_ns is None else shift_ns


def _batches(spans: SpanTable) -> list[np.ndarray]:
    """Rows in batches of :data:`BATCH` in order of span end, as the batch span processor
    exports them."""
    order = np.argsort(spans.end, kind="stable")
    return [order[a : a + BATCH] for a in range(0, len(order), BATCH)]
