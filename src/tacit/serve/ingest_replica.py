"""``tacit serve`` with ``role: ingest``: a replica of the receivers alone, any number of them
behind a load balancer, as the Collector's gateways and Tempo's distributors run. Each takes
OTLP over HTTP and gRPC, checks a request and appends it to the shared log before it answers
(:mod:`.log_ingest`); it answers ``/metrics``, ``/healthz`` and ``/readyz`` (not ready while
the log is out of reach), and no queries.
It holds nothing of its own, so a replica killed loses nothing it acknowledged, and one started
anew takes up at once."""

from __future__ import annotations

import logging
import signal
import threading

from tacit.errors import ConfigError
from tacit.serve.auth import read_token
from tacit.serve.config import ServeConfig
from tacit.serve.grpc_receiver import start_grpc
from tacit.serve.http_routes import Routes
from tacit.serve.http_server import ServeHTTPServer
from tacit.serve.ingest import warm_up
from tacit.serve.log_ingest import LogIngest
from tacit.serve.metrics import ServeMetrics
from tacit.serve.service import socket_address
from tacit.serve.span_log import SpanLog
from tacit.serve.tls import load_tls

log = logging.getLogger("tacit.serve")


class IngestReplica:
    """A running ingest replica: :meth:`start`, then :meth:`stop` (or :meth:`run` until a
    signal)."""

    def __init__(self, config: ServeConfig) -> None:
        assert config.log is not None
        self.config = config
        self.metrics = ServeMetrics()
        self.token = read_token(config.ingest_token_file) if config.ingest_token_file else None
        self.tls = (
            load_tls(config.tls_cert_file, config.tls_key_file)
            if config.tls_cert_file and config.tls_key_file
            else None
        )
        self.log = SpanLog(config.log, config.log_stream, config.log_max_bytes)
        self.ingest = LogIngest(self.log, self.metrics)
        self.http: ServeHTTPServer | None = None
        self.grpc = None

    @property
    def http_port(self) -> int:
        assert self.http is not None
        return int(self.http.server_address[1])

    def start(self) -> IngestReplica:
        """Connect to the log, then listen."""
        warm_up()
        self.log.open()
        routes = Routes(
            None, self.ingest, self.metrics, self.log.problem, lambda *_: None, lambda *_: None,
            self.token,
        )  # fmt: skip
        try:
            self.http = ServeHTTPServer(socket_address(self.config.http), routes, self.tls)
        except OSError as e:
            self.log.close()
            raise ConfigError(f"http: cannot listen on {self.config.http}: {e.strerror}") from None
        threading.Thread(target=self.http.serve_forever, name="tacit-http", daemon=True).start()
        if self.config.grpc:
            self.grpc = start_grpc(self.config.grpc, self.ingest, self.token, tls=self.tls)
        log.info(
            "ingest replica: OTLP/HTTP on port %d, OTLP/gRPC %s, into %s stream %s",
            self.http_port,
            self.config.grpc or "off",
            self.config.log,
            self.config.log_stream,
        )
        return self

    def stop(self) -> None:
        """Stop taking requests (each one taken is in the log), then disconnect."""
        if self.grpc is not None:
            self.grpc.stop(grace=2).wait()
        if self.http is not None:
            self.http.shutdown()
            self.http.server_close()
        self.log.close()
        log.info("stopped")

    def run(self) -> None:
        """Serve until SIGTERM or SIGINT, then stop."""
        done = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: done.set())
        if self.http is None:
            self.start()
        done.wait()
        self.stop()
