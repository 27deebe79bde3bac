"""Acknowledging OTLP export requests: check, admit, make durable, hand on.

A request is decoded and checked first (a malformed one is refused whole, with the reason, and
nothing of it is kept), then admitted only while the spans received and not yet in a finished
trace stay under ``max_pending_spans``: beyond, the sender is told to retry later (OTLP
specification, "Failures": HTTP 429 or gRPC RESOURCE_EXHAUSTED with a retry delay), which
bounds memory instead of queueing without end. An admitted request is made durable in the
store's journal (:meth:`.store.Store.append_request`) before the sender hears it was accepted,
so that an acknowledged span survives a crash. Its spans are read into a table later, on the
thread that reconstructs them (:func:`~tacit.formats.otlp.check_export_request`), so that the
sender hears back sooner.
"""

from __future__ import annotations

import math
import queue
import threading
import time
from dataclasses import dataclass

import numpy as np

from tacit.errors import InputError, TacitError
from tacit.formats.otlp import (
    RequestReader,
    check_export_request,
    read_already,
    read_export_request,
)
from tacit.runs import contained, split_at
from tacit.serve.metrics import ServeMetrics
from tacit.serve.store import Store

MAX_BODY = 32 * 1024 * 1024
"""The largest request body taken (bytes); the OTLP SDKs send batches of 512 spans."""
MAX_DECODING = 2
"""Requests checked at once, however many senders: what checking one builds is bounded
(:func:`~tacit.formats.otlp.check_export_request`), and so, with this, is what all of them
build. Checking is mostly Python under the GIL: more at once would not go faster."""


class Busy(TacitError):
    """No room for the request now (``why``: by default, too many spans are waiting for
    reconstruction): retry after ``retry_after_s``."""

    def __init__(
        self, retry_after_s: int, why: str = "too many spans waiting for reconstruction"
    ) -> None:
        self.retry_after_s = retry_after_s
        super().__init__(f"{why}; retry in {retry_after_s} s")


@dataclass
class Batch:
    """The ``count`` spans of one acknowledged request, numbered from ``first_seq``, and what
    reads them (their table and the parent span id each named), which cannot fail."""

    first_seq: int
    count: int
    read: RequestReader
    received_ns: int
    """When the request was acknowledged (the receiver's clock)."""

    @property
    def seq(self) -> np.ndarray:
        return np.arange(self.first_seq, self.first_seq + self.count, dtype=np.int64)


class Ingest:
    """Takes request bodies from the receivers and queues their spans for reconstruction."""

    def __init__(
        self, store: Store, metrics: ServeMetrics, max_pending: int, retry_after_s: int
    ) -> None:
        self.store = store
        self.metrics = metrics
        self.max_pending = max_pending
        self.retry_after_s = retry_after_s
        self.queue: queue.Queue[Batch] = queue.Queue()
        self.next_seq = store.next_seq()
        self._outstanding = 0
        self._lock = threading.Lock()
        self.last_arrival = time.monotonic()
        self.last_refusal = -math.inf
        self._refused = 0  # spans in the latest request refused for being over the limit

    @property
    def outstanding(self) -> int:
        """Spans acknowledged and not yet in a finished trace."""
        return self._outstanding

    @property
    def last_request(self) -> float:
        """When a request last came (``time.monotonic``), a refused sender counted as coming
        again when it was told to retry: the time it waits is not the stream's quiet."""
        return max(self.last_arrival, self.last_refusal + self.retry_after_s)

    @property
    def holding_back(self) -> bool:
        """Whether senders wait for room: the latest request was refused for being over the
        limit, and one of its size would still be."""
        return (
            self.last_refusal > self.last_arrival
            and self._outstanding + self._refused > self.max_pending
        )

    def finished(self, n: int) -> None:
        """``n`` spans are now in finished traces (stored)."""
        with self._lock:
            self._outstanding -= n
        self.metrics.pending.set(self._outstanding)

    def submit(
        self,
        body: bytes,
        encoding: str,
        transport: str,
        state: dict[str, int] | None = None,
        received_ns: int | None = None,
        sync: bool = True,
    ) -> int:
        """Check, admit and commit one request (with the store's ``state`` values that go with
        it: a source's progress; ``received_ns``: when it was received, if not now; ``sync``:
        :meth:`.store.Store.append_request`'s); returns its span count. Raises
        :class:`InputError` for a malformed request, :class:`Busy` when over the limit."""
        n, read = checked(body, encoding, transport, self.metrics)
        if n == 0:
            return 0
        with self._lock:
            if self._outstanding + n > self.max_pending and self._outstanding > 0:
                self.metrics.refused.labels(transport, "busy").inc()
                self.last_refusal, self._refused = time.monotonic(), n
                raise Busy(self.retry_after_s)
            first, now = self.next_seq, received_ns or time.time_ns()
            self.store.append_request(first, n, now, encoding, body, state, sync)
            self.next_seq += n
            self._outstanding += n
            self.queue.put(Batch(first, n, read, now))
            self.last_arrival = time.monotonic()
        self.metrics.received.labels(transport).inc(n)
        self.metrics.pending.set(self._outstanding)
        return n

    def restore(self, low_water: int) -> int:
        """Queue again what was acknowledged before a restart and not yet in a finished trace;
        returns how many spans that is."""
        done = self.store.finished_from(low_water)
        restored = 0
        for first, encoding, body, received_ns in self.store.requests_from(low_water):
            spans, parent_ids = read_export_request(
                body, encoding, f"stored request {first}", from_sender=False
            )
            seq = np.arange(first, first + len(spans))
            keep = (seq >= low_water) & ~contained(seq, list(done))
            if not keep.any():
                continue
            rows = np.flatnonzero(keep)
            for a, b in _runs(rows):
                part = read_already(spans.take(np.arange(a, b)), parent_ids[a:b])
                self.queue.put(Batch(first + a, b - a, part, received_ns))
            restored += len(rows)
        self._outstanding += restored
        self.metrics.pending.set(self._outstanding)
        return restored


_DECODING = threading.BoundedSemaphore(MAX_DECODING)


def checked(
    body: bytes, encoding: str, transport: str, metrics: ServeMetrics
) -> tuple[int, RequestReader]:
    """A request's span count and what reads them, once checked (at most
    :data:`MAX_DECODING` at once); a refusal is counted and raised as :class:`InputError`."""
    if len(body) > MAX_BODY:
        metrics.refused.labels(transport, "invalid").inc()
        raise InputError(f"request body of {len(body)} bytes exceeds {MAX_BODY}")
    try:
        with _DECODING:
            return check_export_request(body, encoding, f"{transport} request")
    except InputError:
        metrics.refused.labels(transport, "invalid").inc()
        raise


def warm_up() -> None:
    """Read one small protobuf request as a sender's would be read, so that the compiled
    parser (:mod:`tacit.formats.otlp_wire`) is compiled or loaded from its cache before the
    service says it is ready: on a first start after an install that takes seconds, in which
    the first senders' spans would wait and come late behind later requests."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
    from opentelemetry.proto.trace.v1.trace_pb2 import Span

    request = ExportTraceServiceRequest()
    spans = request.resource_spans.add()
    spans.resource.attributes.append(
        KeyValue(key="service.name", value=AnyValue(string_value="warm-up"))
    )
    spans.scope_spans.add().spans.append(
        Span(
            trace_id=b"\x01" * 16,
            span_id=b"\x02" * 8,
            name="warm-up",
            kind=Span.SPAN_KIND_SERVER,
            start_time_unix_nano=1,
            end_time_unix_nano=2,
        )
    )
    check_export_request(request.SerializeToString(), "protobuf", "warm-up")[1]()


def _runs(rows: np.ndarray) -> list[tuple[int, int]]:
    """[start, stop) of each run of consecutive values in sorted ``rows``."""
    cuts = np.flatnonzero(np.diff(rows) != 1) + 1
    return [(int(r[0]), int(r[-1]) + 1) for r in split_at(rows, cuts)]
