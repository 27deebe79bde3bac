"""The OTLP/gRPC receiver (``opentelemetry.proto.collector.trace.v1.TraceService/Export``).

Requests go through the same :class:`~.ingest.Ingest` as OTLP/HTTP, as the bytes that came:
gRPC does not decode them first (the method takes raw bytes), so that what decoding a
request would build is bounded before it is built (:func:`~tacit.formats.otlp.
check_export_request`), and bytes that are no request are ``INVALID_ARGUMENT``, as over HTTP,
not the ``INTERNAL`` of a failed deserializer. Too many spans waiting is
``RESOURCE_EXHAUSTED`` with a ``google.rpc.RetryInfo`` detail giving the delay, which the OTLP
exporters honour (OTLP specification, "OTLP/gRPC Throttling"); a malformed request is
``INVALID_ARGUMENT``; one without the ingest token, when there is one, ``UNAUTHENTICATED``.

As over HTTP (:mod:`.http_bounds`), one client address is answered by at most
1/:data:`~.http_bounds.PEER_SHARE` of the workers at once; a call beyond its share is
``RESOURCE_EXHAUSTED`` with ``RetryInfo``, so that no one sender keeps the others out. One
connection carries at most :data:`MAX_STREAMS` calls at once (HTTP/2 flow control bounds what
each holds until a worker reads it).
"""

from __future__ import annotations

import threading
from collections import Counter
from concurrent import futures
from typing import Any

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from tacit.errors import ConfigError, InputError
from tacit.serve.auth import authorized
from tacit.serve.http_bounds import PEER_SHARE
from tacit.serve.ingest import MAX_BODY, Busy, Ingest
from tacit.serve.log_ingest import LogIngest
from tacit.serve.tls import ServerTLS

SERVICE = "opentelemetry.proto.collector.trace.v1.TraceService"
MAX_STREAMS = 16
"""Calls one connection may carry at once (HTTP/2 ``SETTINGS_MAX_CONCURRENT_STREAMS``)."""


class _Peers:
    """Calls under way per client address, each address at most ``share`` at once."""

    def __init__(self, share: int) -> None:
        self.share = share
        self._lock = threading.Lock()
        self._busy: Counter[str] = Counter()

    def enter(self, address: str) -> bool:
        with self._lock:
            if self._busy[address] >= self.share:
                return False
            self._busy[address] += 1
            return True

    def leave(self, address: str) -> None:
        with self._lock:
            self._busy[address] -= 1
            if self._busy[address] == 0:
                del self._busy[address]


def _address(peer: str) -> str:
    """The host of gRPC's ``ipv4:HOST:PORT`` or ``ipv6:[HOST]:PORT`` (a Unix socket's path as
    it is)."""
    scheme, _, rest = peer.partition(":")
    return rest.rpartition(":")[0] if scheme in ("ipv4", "ipv6") else peer


class _TraceService:
    def __init__(self, ingest: Ingest | LogIngest, token: str | None, workers: int) -> None:
        self.ingest = ingest
        self.token = token
        self.peers = _Peers(max(1, workers // PEER_SHARE))

    def export(self, body: bytes, context: Any) -> Any:
        header = dict(context.invocation_metadata()).get("authorization")
        if not authorized(header, self.token):
            self.ingest.metrics.refused.labels("grpc", "unauthenticated").inc()
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "an ingest token is required")
        address = _address(context.peer())
        if not self.peers.enter(address):
            context.abort_with_status(
                _retry_status("too many requests at once from this address", 1)
            )
        try:
            self.ingest.submit(body, "protobuf", "grpc")
        except Busy as e:
            context.abort_with_status(_retry_status(str(e), e.retry_after_s))
        except InputError as e:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
        finally:
            self.peers.leave(address)
        return trace_service_pb2.ExportTraceServiceResponse()

    def handler(self) -> grpc.GenericRpcHandler:
        """``Export`` taking the request's bytes as they came (no deserializer)."""
        export = grpc.unary_unary_rpc_method_handler(
            self.export,
            response_serializer=trace_service_pb2.ExportTraceServiceResponse.SerializeToString,
        )
        return grpc.method_handlers_generic_handler(SERVICE, {"Export": export})


def _retry_status(message: str, retry_after_s: int) -> Any:
    from google.protobuf import any_pb2, duration_pb2
    from google.rpc import code_pb2, error_details_pb2, status_pb2
    from grpc_status import rpc_status

    detail = any_pb2.Any()
    detail.Pack(
        error_details_pb2.RetryInfo(retry_delay=duration_pb2.Duration(seconds=retry_after_s))
    )
    return rpc_status.to_status(
        status_pb2.Status(code=code_pb2.RESOURCE_EXHAUSTED, message=message, details=[detail])
    )


def start_grpc(
    address: str,
    ingest: Ingest | LogIngest,
    token: str | None = None,
    workers: int = 4,
    tls: ServerTLS | None = None,
) -> grpc.Server:
    """Serve OTLP/gRPC on ``address`` (HOST:PORT), requiring ``token`` when given (the
    ``authorization`` metadata, :mod:`.auth`), over TLS with ``tls``; returns the started
    server."""
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="tacit-grpc"),
        options=[
            ("grpc.max_receive_message_length", MAX_BODY),
            ("grpc.max_concurrent_streams", MAX_STREAMS),
        ],
    )
    server.add_generic_rpc_handlers((_TraceService(ingest, token, workers).handler(),))
    try:
        if tls is None:
            port = server.add_insecure_port(address)
        else:
            port = server.add_secure_port(address, tls.grpc_credentials())
    except RuntimeError as e:
        raise ConfigError(f"grpc: cannot listen on {address}: {e}") from None
    if port == 0:
        raise ConfigError(f"grpc: cannot listen on {address}")
    server.start()
    server.bound_port = port  # type: ignore[attr-defined]
    return server
