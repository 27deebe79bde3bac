"""An ingest replica's intake (``role: ingest``): a request is checked as the service checks it
(a malformed one is refused whole, with the reason), then appended to the shared log
(:mod:`.span_log`) before its sender hears it was accepted. Nothing is reconstructed or stored
here: the reconstruct role reads the log (:mod:`.log_feed`). A full log, or one out of reach,
holds the senders back with a retry delay, as a full service does."""

from __future__ import annotations

import time

from tacit.serve.ingest import Busy, checked
from tacit.serve.metrics import ServeMetrics
from tacit.serve.span_log import RETRY_S, LogUnavailable, SpanLog


class LogIngest:
    """Takes request bodies from the receivers into ``log``."""

    def __init__(self, log: SpanLog, metrics: ServeMetrics) -> None:
        self.log = log
        self.metrics = metrics
        self.received = 0
        """Spans acknowledged."""

    def submit(
        self, body: bytes, encoding: str, transport: str, state: dict[str, int] | None = None
    ) -> int:
        """Check and append one request; returns its span count. Raises
        :class:`~tacit.errors.InputError` for a malformed request, :class:`~.ingest.Busy`
        when the log is full or cannot be reached. ``state`` is a source's progress, which a
        replica has no store to keep: its receivers give none."""
        assert state is None
        n, _ = checked(body, encoding, transport, self.metrics)
        if n == 0:
            return 0
        try:
            self.log.publish(body, encoding, time.time_ns())
        except Busy:
            self.metrics.refused.labels(transport, "busy").inc()
            raise
        except LogUnavailable as e:
            self.metrics.refused.labels(transport, "busy").inc()
            raise Busy(RETRY_S, str(e)) from None
        self.received += n
        self.metrics.received.labels(transport).inc(n)
        return n
