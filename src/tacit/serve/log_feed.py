"""The reconstruct role's source (``role: reconstruct``): the shared log (:mod:`.span_log`)
read in its one order into the service's own ingest, as if its receivers had taken each
request.

Each request goes into the journal with the log position after it, in the same record
(:meth:`~.ingest.Ingest.submit`'s state), so a restart reads on from the first request not
yet taken in and restores the ones taken and not yet reconstructed from the journal: every
request is taken once, whatever moment the process was killed at. What the store holds, the
log need not: every :data:`PURGE_EVERY` requests, the messages below the position the store
has committed (the journal is moved into it with each write of finished traces) are purged.
So the journal is not synced request by request, as it is for a sender waiting for its
answer: a record the machine's loss tears is read again from the log.
A full service holds the reading back (the log keeps the requests meanwhile, and its bound
then holds the senders back at the ingest replicas); a log out of reach is read again from the
position once it answers, and readiness says why meanwhile.
"""

from __future__ import annotations

import logging
import math
import threading
from typing import Any

from tacit.errors import InputError
from tacit.serve.ingest import Busy, Ingest
from tacit.serve.span_log import RETRY_S, LogUnavailable, SpanLog

log = logging.getLogger("tacit.serve")

TRANSPORT = "log"
PURGE_EVERY = 100
"""Requests taken between two purges of the log below the position."""
SCRAPE_S = 1.0
"""How long a scrape of ``/metrics`` waits for the log to say how much it holds."""


class LogFeed(threading.Thread):
    """Reads ``span_log`` into ``ingest`` until :meth:`stop`."""

    def __init__(self, ingest: Ingest, span_log: SpanLog) -> None:
        super().__init__(name="tacit-log-feed", daemon=True)
        self.ingest = ingest
        self.log = span_log
        self.key = f"log:{span_log.stream}"
        self.position = ingest.store.state(self.key, 0) or 1
        """The sequence number of the next request to take."""
        self.taken = 0
        self.refused = 0
        self._stop_event = threading.Event()
        self.failure: BaseException | None = None
        metrics = ingest.metrics
        metrics.log_position.labels(span_log.stream).set_function(lambda: self.position)
        metrics.log_backlog.labels(span_log.stream).set_function(self.backlog)

    def run(self) -> None:
        while not self._stop_event.is_set():
            try:
                for logged in self.log.read(self.position, self._stop_event):
                    self.failure = None
                    self._take(logged.seq, logged.body, logged.encoding, logged.received_ns)
                    if self.taken % PURGE_EVERY == 0:
                        self.log.purge_below(self.ingest.store.state(self.key, 1))
            except LogUnavailable as e:  # read on from the position once it answers
                if self.failure is None:
                    log.error("the log could not be read; trying again: %s", e)
                self.failure = e
                self._stop_event.wait(RETRY_S)

    def _take(self, seq: int, body: bytes, encoding: str, received_ns: int) -> None:
        state = {self.key: seq + 1}
        while not self._stop_event.is_set():
            try:
                self.ingest.submit(
                    body, encoding, TRANSPORT, state, received_ns or None, sync=False
                )
            except Busy as e:
                self._stop_event.wait(e.retry_after_s)
                continue
            except InputError as e:  # checked by the replica that took it: not expected
                self.refused += 1
                log.warning("log request %d refused: %s", seq, e)
                self.ingest.store.set_state(self.key, seq + 1)
            self.position = seq + 1
            self.taken += 1
            return

    def backlog(self) -> float:
        """The requests in the log not taken yet; NaN when the log does not answer within
        :data:`SCRAPE_S` (a scrape is not held up by a log out of reach)."""
        from nats.errors import Error as NatsError

        try:
            return float(max(0, self.log.last_seq(SCRAPE_S) + 1 - self.position))
        except (LogUnavailable, NatsError, TimeoutError):
            return math.nan

    def stop(self) -> None:
        self._stop_event.set()
        self.join()

    def status(self) -> dict[str, Any]:
        return {
            "log": self.log.url,
            "stream": self.log.stream,
            "position": self.position,
            "taken": self.taken,
            "refused": self.refused,
        }
