"""Finished traces sent on over OTLP/HTTP to a downstream collector or store (a Collector,
Tempo, Jaeger, a hosted backend).

As the OTLP exporters send by default: protobuf (``http/protobuf``; ``http/json`` on request),
gzip-compressed (or not), with the headers the configuration gives (a downstream's
authentication). A bounded queue between reconstruction and the network: a slow or absent
downstream never holds reconstruction up; what cannot be queued or sent is counted
(``tacit_spans_forwarded`` by result), and every trace stays in the store whatever happens
downstream.
"""

from __future__ import annotations

import gzip
import logging
import queue
import threading
import urllib.error
import urllib.request
from collections.abc import Mapping

import orjson

from tacit.formats.common import Traces
from tacit.formats.otlp import otlp_document
from tacit.formats.otlp_encode import encode_request
from tacit.serve.metrics import ServeMetrics

PROTOBUF = "application/x-protobuf"
PROTOCOLS = ("http/protobuf", "http/json")
COMPRESSIONS = ("gzip", "none")

log = logging.getLogger("tacit.serve")

QUEUE = 64
"""Batches of finished traces waiting to be sent."""


class Forwarder(threading.Thread):
    """Posts each batch given to :meth:`__call__` to ``url``."""

    def __init__(
        self,
        url: str,
        metrics: ServeMetrics,
        protocol: str = "http/protobuf",
        compression: str = "gzip",
        headers: Mapping[str, str] | None = None,
        timeout_s: float = 5.0,
    ) -> None:
        super().__init__(name="tacit-forward", daemon=True)
        self.url = url
        self.metrics = metrics
        self.protocol = protocol
        self.compression = compression
        self.headers = {
            "Content-Type": PROTOBUF if protocol == "http/protobuf" else "application/json",
            **({"Content-Encoding": "gzip"} if compression == "gzip" else {}),
            **(headers or {}),
        }
        self.timeout_s = timeout_s
        self._queue: queue.Queue[list[Traces] | None] = queue.Queue(QUEUE)

    def __call__(self, batches: list[Traces]) -> None:
        try:
            self._queue.put_nowait(batches)
        except queue.Full:
            self.metrics.forwarded.labels("dropped").inc(sum(len(s) for s, _ in batches))

    def stop(self) -> None:
        """Send what is queued, then end."""
        self._queue.put(None)
        self.join()

    def run(self) -> None:
        while (batches := self._queue.get()) is not None:
            for spans, tags in batches:
                self._send(otlp_document(spans, tags), len(spans))

    def _send(self, doc: dict, n: int) -> None:
        body = encode_request(doc) if self.protocol == "http/protobuf" else orjson.dumps(doc)
        if self.compression == "gzip":
            body = gzip.compress(body, compresslevel=6)
        request = urllib.request.Request(self.url, data=body, headers=self.headers)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as answer:
                answer.read()
            self.metrics.forwarded.labels("sent").inc(n)
        except (urllib.error.URLError, OSError) as e:
            self.metrics.forwarded.labels("failed").inc(n)
            log.warning("forwarding %d spans to %s failed: %s", n, self.url, e)
