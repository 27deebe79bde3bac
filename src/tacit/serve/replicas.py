"""``tacit serve`` as replicas that hold nothing of their own, any number of each behind a load
balancer, as the Collector's gateways and Tempo's distributors and queriers run:

- ``role: ingest`` (:class:`IngestReplica`): the receivers alone. Each takes OTLP over HTTP
  and gRPC, checks a request and appends it to the shared log before it answers
  (:mod:`.log_ingest`). A replica killed loses nothing it acknowledged.
- ``role: query`` (:class:`QueryReplica`): the query side alone (the Jaeger APIs, the page,
  the latency series), over the blocks of finished traces and the copies of the latency series
  the reconstruct role writes (:mod:`.store_blocks`).

Each answers ``/metrics``, ``/healthz`` and ``/readyz``; a replica started anew takes up at
once."""

from __future__ import annotations

import logging
import signal
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

from tacit.errors import ConfigError
from tacit.serve.config import ServeConfig
from tacit.serve.grpc_receiver import start_grpc
from tacit.serve.http_routes import Routes
from tacit.serve.http_server import ServeHTTPServer
from tacit.serve.ingest import warm_up
from tacit.serve.latency_api import latency_series
from tacit.serve.log_ingest import LogIngest
from tacit.serve.metrics import ServeMetrics
from tacit.serve.service import guards, socket_address
from tacit.serve.span_log import SpanLog
from tacit.serve.store_blocks import BlockStore

log = logging.getLogger("tacit.serve")


class Replica(ABC):
    """What a replica shares: the metrics, the tokens, TLS and the HTTP listener, started with
    :meth:`listen`, stopped with :meth:`stop` (or :meth:`run` until a signal)."""

    def __init__(self, config: ServeConfig) -> None:
        self.config = config
        self.metrics = ServeMetrics()
        self.token, self.query_token, self.tls = guards(config)
        self.http: ServeHTTPServer | None = None

    @property
    def http_port(self) -> int:
        assert self.http is not None
        return int(self.http.server_address[1])

    def listen(self, routes: Routes) -> None:
        try:
            self.http = ServeHTTPServer(socket_address(self.config.http), routes, self.tls)
        except OSError as e:
            raise ConfigError(f"http: cannot listen on {self.config.http}: {e.strerror}") from None
        threading.Thread(target=self.http.serve_forever, name="tacit-http", daemon=True).start()

    @abstractmethod
    def start(self) -> Replica:
        """Take up the role, then listen (:meth:`listen`)."""

    def stop(self) -> None:
        if self.http is not None:
            self.http.shutdown()
            self.http.server_close()

    def run(self) -> None:
        """Serve until SIGTERM or SIGINT, then stop."""
        done = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: done.set())
        if self.http is None:
            self.start()
        done.wait()
        self.stop()
        log.info("stopped")


def _none(*_: Any) -> None:
    return None


class IngestReplica(Replica):
    """``role: ingest``: takes spans into the shared log."""

    def __init__(self, config: ServeConfig) -> None:
        assert config.nats is not None
        super().__init__(config)
        self.log = SpanLog(config.nats, config.nats_stream, config.nats_max_bytes)
        self.ingest = LogIngest(self.log, self.metrics)
        self.grpc: Any = None

    def start(self) -> IngestReplica:
        """Connect to the log (not ready while it is out of reach), then listen."""
        warm_up()
        self.log.open()
        routes = Routes(None, self.ingest, self.metrics, self.log.problem, _none, _none,
                        self.token)  # fmt: skip
        try:
            self.listen(routes)
        except ConfigError:
            self.log.close()
            raise
        if self.config.grpc:
            self.grpc = start_grpc(self.config.grpc, self.ingest, self.token, tls=self.tls)
        log.info("ingest replica: OTLP/HTTP on port %d, OTLP/gRPC %s, into %s stream %s",
                 self.http_port, self.config.grpc or "off", self.config.nats,
                 self.config.nats_stream)  # fmt: skip
        return self

    def stop(self) -> None:
        """Stop taking requests (each one taken is in the log), then disconnect."""
        if self.grpc is not None:
            self.grpc.stop(grace=2).wait()
        super().stop()
        self.log.close()


class QueryReplica(Replica):
    """``role: query``: answers queries from the blocks."""

    def __init__(self, config: ServeConfig) -> None:
        assert config.blocks is not None
        super().__init__(config)
        self.store = BlockStore(config.blocks)

    def start(self) -> QueryReplica:
        routes = Routes(self.store, None, self.metrics, _none, self.extra, _none, self.token,
                        self.query_token)  # fmt: skip
        self.listen(routes)
        log.info("query replica: the query API on port %d, from the blocks in %s",
                 self.http_port, ", ".join(map(str, self.store.roots)))  # fmt: skip
        return self

    def extra(self, path: str, params: dict[str, str]) -> Any | None:
        """tacit's own status (what the blocks hold) and the latency series
        (:mod:`.latency_api`)."""
        series = latency_series(self.store, path, params)
        if series is not None:
            return series
        if path == "/api/tacit/status":
            return {"stored": self.store.counts(), "blocks": [str(r) for r in self.store.roots]}
        return None

    def stop(self) -> None:
        super().stop()
        self.store.close()


REPLICAS: dict[str, Callable[[ServeConfig], Replica]] = {
    "ingest": IngestReplica,
    "query": QueryReplica,
}
"""The roles served by a replica, rather than by :class:`.service.Service`."""
