"""``tacit serve``: the receivers, online reconstruction, the store and the query side, as one
process (see the package docstring for the parts)."""

from __future__ import annotations

import gc
import ipaddress
import logging
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from tacit.errors import ConfigError
from tacit.formats.capture_spans import read_service_map
from tacit.reconstruct.callgraph import CallGraph
from tacit.reconstruct.result import instrument_next
from tacit.reconstruct.scaleout import DaskRounds, connect
from tacit.serve.auth import read_token
from tacit.serve.callgraph_learner import CallGraphLearner
from tacit.serve.capture_feed import CaptureFeed
from tacit.serve.config import ServeConfig
from tacit.serve.envoy_feed import EnvoyFeed
from tacit.serve.forward import Forwarder
from tacit.serve.grpc_receiver import start_grpc
from tacit.serve.http_routes import Routes
from tacit.serve.http_server import ServeHTTPServer
from tacit.serve.ingest import Ingest, warm_up
from tacit.serve.latency_api import latency_series
from tacit.serve.log_feed import LogFeed
from tacit.serve.metrics import ServeMetrics
from tacit.serve.packet_feed import PacketFeed
from tacit.serve.pirate_feed import PirateFeed
from tacit.serve.rda_feed import RdaFollower, RdaIngest
from tacit.serve.reconstructor import Reconstructor
from tacit.serve.span_log import SpanLog
from tacit.serve.store import Store, cannot_write
from tacit.serve.store_blocks import BlockWriter
from tacit.serve.tls import ServerTLS, load_tls

log = logging.getLogger("tacit.serve")

GC_THRESHOLDS = (100_000, 50, 100)
"""The cyclic garbage collector's thresholds while serving (Python's default: 700, 10, 10).
Ingest makes and drops a few objects per span, almost none in cycles (reference counting
frees them), yet at the default every 700 allocations start a collection and every 70,000 a
full one over every object the service holds, which grows with the spans waiting for their
window. Fewer collections cost the service less CPU per span for the same memory and accuracy
(``bench/bench_serve.py`` measures it, ``sustained`` and ``capture``)."""


def socket_address(text: str) -> tuple[str, int]:
    """HOST:PORT (checked by :class:`ServeConfig`) as a socket address."""
    host, _, port = text.rpartition(":")
    return host.strip("[]") or "127.0.0.1", int(port)


def _loopback(text: str) -> bool:
    """Whether HOST:PORT listens on this host only."""
    host = socket_address(text)[0]
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: it may name any interface
        return False


def open_to_others(config: ServeConfig) -> list[str]:
    """What a configuration leaves open to whoever can reach its listeners: each listener
    beyond loopback without the token that would guard it."""
    listeners = [("http", config.http), *([("grpc", config.grpc)] if config.grpc else [])]
    wide = [f"{name} {address}" for name, address in listeners if not _loopback(address)]
    if not wide:
        return []
    out = []
    if config.ingest_token_file is None:
        out.append(f"{', '.join(wide)} take spans from anyone (no ingest_token_file)")
    if config.query_token_file is None and not _loopback(config.http):
        out.append(f"http {config.http} answers queries to anyone (no query_token_file)")
    return out


def guards(config: ServeConfig) -> tuple[str | None, str | None, ServerTLS | None]:
    """What guards the listeners ``config`` names: the ingest token, the query token and the
    TLS certificate with its key (each None when not given)."""
    token = read_token(config.ingest_token_file) if config.ingest_token_file else None
    query_token = (
        read_token(config.query_token_file, "query_token_file") if config.query_token_file else None
    )
    tls = (
        load_tls(config.tls_cert_file, config.tls_key_file)
        if config.tls_cert_file and config.tls_key_file
        else None
    )
    return token, query_token, tls


class Service:
    """A running ``tacit serve``: :meth:`start`, then :meth:`stop` (or :meth:`run` until a
    signal). ``http_port``/``grpc_port`` are the bound ports (useful with port 0)."""

    def __init__(self, config: ServeConfig, callgraph: CallGraph | None = None) -> None:
        """``callgraph`` None: learned from the spans stored (:mod:`.callgraph_learner`)."""
        self.config = config
        self.metrics = ServeMetrics()
        self.token, self.query_token, self.tls = guards(config)
        self.store = Store(config.database, config.database_memory_mib)
        self.ingest = Ingest(
            self.store, self.metrics, config.max_pending_spans, config.retry_after_s
        )
        self.forwarder = (
            Forwarder(
                config.forward,
                self.metrics,
                config.forward_protocol,
                config.forward_compression,
                dict(config.forward_headers),
            )
            if config.forward
            else None
        )
        names = read_service_map(config.capture_services) if config.capture_services else None
        self.learner = CallGraphLearner(self.store) if callgraph is None else None
        if self.learner is not None:
            callgraph = self.learner.callgraph
        assert callgraph is not None
        self.metrics.callgraph_endpoints.set(len(callgraph.endpoints))
        self.dask = connect(config.dask) if config.dask else None
        rounds = DaskRounds(self.dask) if self.dask is not None else None
        self.reconstructor = Reconstructor(
            self.store,
            self.ingest,
            self.metrics,
            callgraph,
            config.online,
            config.idle_s,
            config.max_future_s,
            self.forwarder,
            config.retention_s,
            names,
            self.learner,
            rounds,
            BlockWriter(config.blocks, self.store) if config.blocks else None,
        )
        if rounds is not None:  # the next requests are read while a round is solved
            rounds.meanwhile = self.reconstructor.read_ahead
        sources = [config.pirate_pcap, config.pirate_interface]
        self.pirate = [
            PirateFeed(
                self.store,
                self.metrics,
                config.pirate,
                source,
                config.pirate_filter,
                config.pirate_server,
            )
            for source in sources
            if source is not None
        ]
        self.rda = RdaIngest(self.store, self.metrics)
        self.rda_files = [RdaFollower(path, self.rda) for path in config.rda_results]
        self.captures = [
            CaptureFeed(self.ingest, source, config.capture_filter, names, config.capture_protocol)
            for source in (config.capture_pcap, config.capture_interface)
            if source is not None
        ]
        self.envoy = (
            [EnvoyFeed(self.ingest, config.envoy_logs, names, config.online.lateness_ns / 1e9)]
            if config.envoy_logs
            else []
        )
        self.span_log = (
            SpanLog(config.nats, config.nats_stream, config.nats_max_bytes)
            if config.role == "reconstruct" and config.nats
            else None
        )
        self.log_feed = LogFeed(self.ingest, self.span_log) if self.span_log else None
        self._feeds: list[PacketFeed | RdaFollower | EnvoyFeed | LogFeed] = [
            *self.pirate,
            *self.rda_files,
            *self.captures,
            *self.envoy,
            *([self.log_feed] if self.log_feed else []),
        ]
        self.restored = 0
        self._gc_thresholds = gc.get_threshold()
        self.http: ServeHTTPServer | None = None
        self.grpc: Any = None
        self._stopped = threading.Event()

    @property
    def callgraph(self) -> CallGraph:
        """The call graph in use."""
        return self.reconstructor.feed.tw.callgraph

    @property
    def http_port(self) -> int:
        assert self.http is not None
        return int(self.http.server_address[1])

    @property
    def grpc_port(self) -> int | None:
        return None if self.grpc is None else int(self.grpc.bound_port)

    def start(self) -> Service:
        """Resume what a previous run left, then listen."""
        self._gc_thresholds = gc.get_threshold()
        gc.freeze()  # what was made so far (imports, the call graph) is never collected
        gc.set_threshold(*GC_THRESHOLDS)
        for path, size in self.store.torn:
            log.warning(
                "%s: the last %d bytes are a request cut short, never acknowledged", path, size
            )
        warm_up()
        self.restored = self.ingest.restore(self.store.state("low_water", 0))
        if self.forwarder is not None:
            self.forwarder.start()
        self.reconstructor.start()
        if self.span_log is not None:
            self.span_log.open()
        try:
            routes = Routes(
                self.store,
                self.ingest if self.log_feed is None else None,
                self.metrics,
                self.problem,
                self.extra,
                self.receive,
                self.token,
                self.query_token,
            )
            self.http = ServeHTTPServer(socket_address(self.config.http), routes, self.tls)
        except OSError as e:
            raise ConfigError(f"http: cannot listen on {self.config.http}: {e.strerror}") from None
        threading.Thread(target=self.http.serve_forever, name="tacit-http", daemon=True).start()
        if self.config.grpc and self.log_feed is None:
            self.grpc = start_grpc(self.config.grpc, self.ingest, self.token, tls=self.tls)
        for feed in self._feeds:
            feed.start()
        for warning in open_to_others(self.config):
            log.warning("listening beyond loopback: %s", warning)
        host = self.config.http.rpartition(":")[0]
        grpc = f"on {self.config.grpc.rpartition(':')[0]}:{self.grpc_port}"
        log.info(
            "serving: OTLP/HTTP and the query API on %s:%d, OTLP/gRPC %s, store %s "
            "(%d spans resumed)",
            host,
            self.http_port,
            grpc if self.config.grpc else "off",
            self.config.database,
            self.restored,
        )
        return self

    def problem(self) -> str | None:
        """Why the service is not ready, or None."""
        if self.log_feed is not None and self.log_feed.failure is not None:
            return f"the log cannot be read: {self.log_feed.failure}"
        if self.span_log is not None and (problem := self.span_log.problem()):
            return f"the log cannot be read: {problem}"
        if self.reconstructor.failure is not None:
            return f"reconstruction failed: {self.reconstructor.failure}"
        if not self.reconstructor.is_alive():
            return "reconstruction is not running"
        if self.reconstructor.store_problem is not None:
            return self.reconstructor.store_problem
        stalled = self.reconstructor.stalled_s()
        if stalled is not None:
            return f"reconstruction has not moved on for {stalled:.0f} s"
        return None

    def extra(self, path: str, params: dict[str, str]) -> Any | None:
        """tacit's own API beside Jaeger's: status, per-service confidence and the latency
        series (:mod:`.latency_api`)."""
        series = latency_series(self.store, path, params)
        if series is not None:
            return series
        if path == "/api/tacit/confidence":
            conf = dict(sorted(self.reconstructor.confidence.items()))
            ratio = {s: p / n for s, (n, p) in conf.items()}
            return {
                "data": [
                    {"service": s, "links": int(n), "confidence": ratio[s]}
                    for s, (n, _) in conf.items()
                ],
                "advice": instrument_next(ratio),
            }
        if path == "/api/tacit/status":
            return {
                "received": self.ingest.next_seq,
                "pending": self.ingest.outstanding,
                "stored": self.store.counts(),
                "duplicates": self.reconstructor.duplicates,
                "lag_seconds": self.reconstructor.lag_s,
                "callgraph_endpoints": len(self.callgraph.endpoints),
                "callgraph": (
                    {
                        "source": "file",
                        "count": len(self.callgraph.endpoints),
                        "calls_not_in_callgraph": self.reconstructor.not_in_callgraph,
                    }
                    if self.learner is None
                    else self.learner.status()
                ),
                "pirate": [feed.status() for feed in self.pirate],
                "rda": [follower.status() for follower in self.rda_files],
                "capture": [feed.status() for feed in self.captures],
                "envoy": [feed.status() for feed in self.envoy],
                "log": self.log_feed.status() if self.log_feed else None,
            }
        return None

    def receive(self, path: str, params: dict[str, str], body: bytes) -> Any | None:
        """tacit's own POST endpoints: RDA interval records as JSON lines, under the name
        ``source`` (default ``http``)."""
        if path == "/api/tacit/latency/oneway":
            return self.rda.take_body(body, params.get("source") or "http")
        if path == "/api/tacit/callgraph/reload":
            return {"endpoints": self.reload_callgraph()}
        return None

    def reload_callgraph(self) -> int:
        """Read the configured call graph file again and map with it from the next round on
        (SIGHUP, or ``POST /api/tacit/callgraph/reload``); returns its endpoint count. A bad
        file is refused (:class:`ConfigError`) and the call graph in use stays."""
        if self.config.callgraph is None:
            raise ConfigError(
                "no call graph file to reload: this service learns its call graph from the "
                "spans it stores"
            )
        graph = CallGraph.load(self.config.callgraph)
        self.reconstructor.replace_callgraph(graph)
        log.info("call graph reloaded from %s: %d endpoints", self.config.callgraph,
                 len(graph.endpoints))  # fmt: skip
        return len(graph.endpoints)

    def stop(self) -> None:
        """Graceful: stop taking requests, reconstruct and store what was taken, send what is
        to be forwarded, close the store. Spans still waiting for their window stay in the
        store for the next run. Reconstruction that does not end in its time
        (:data:`~.reconstructor.STOP_S`) is left to end with the process."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        if self.grpc is not None:
            self.grpc.stop(grace=2).wait()
        if self.http is not None:
            self.http.shutdown()
            self.http.server_close()
        for feed in self._feeds:
            feed.stop()
        stopped = self.reconstructor.stop()
        gc.set_threshold(*self._gc_thresholds)  # as it was, for a process that goes on
        gc.unfreeze()
        if not stopped:  # the store stays open under the thread, which ends with the process
            log.error(
                "reconstruction did not stop within %.0f s; what it had not stored is read "
                "again from the journal at the next start",
                self.reconstructor.stop_s,
            )
            return
        self._close_clients()
        try:
            self.store.close()
        except Exception as e:
            if not cannot_write(e):
                raise
            log.error(
                "the store could not write at stop (%s); what it had not stored is read again "
                "from the journal at the next start",
                e,
            )
            return
        log.info("stopped")

    def _close_clients(self) -> None:
        """Send on what is to be forwarded, and leave the Dask cluster and the log."""
        if self.forwarder is not None:
            self.forwarder.stop()
        if self.dask is not None:
            self.dask.close()
        if self.span_log is not None:
            self.span_log.close()

    def run(
        self, seconds: float | None = None, before_stop: Callable[[], None] | None = None
    ) -> None:
        """Serve until SIGTERM or SIGINT (or ``seconds``), then call ``before_stop`` and stop
        gracefully; start first unless started."""
        done = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: done.set())
        signal.signal(signal.SIGHUP, lambda *_: self._reload_on_signal())
        if self.http is None:
            self.start()
        end = None if seconds is None else time.monotonic() + seconds
        while not done.wait(0.5):
            if self.reconstructor.failure is not None:
                break
            if end is not None and time.monotonic() >= end:
                break
        if before_stop is not None:
            before_stop()
        self.stop()
        if self.reconstructor.failure is not None:
            raise self.reconstructor.failure

    def _reload_on_signal(self) -> None:
        try:
            self.reload_callgraph()
        except ConfigError as e:  # logged; the service goes on with the call graph it has
            log.error("SIGHUP: %s", e)

    def wait_idle(self, timeout_s: float = 30.0) -> bool:
        """Whether everything received is in finished traces within ``timeout_s`` (tests and
        the demo)."""
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            if self.ingest.outstanding == 0:
                return True
            time.sleep(0.1)
        return False
