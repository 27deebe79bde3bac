"""The OTLP/gRPC receiver (``opentelemetry.proto.collector.trace.v1.TraceService/Export``).

Requests go through the same :class:`~.ingest.Ingest` as OTLP/HTTP, as the bytes that came:
gRPC does not decode them first (the method takes raw bytes), so that what decoding a
request would build is bounded before it is built (:func:`~tacit.formats.otlp.
check_export_request`), and bytes that are no request are ``INVALID_ARGUMENT``, as over HTTP,
not the ``INTERNAL`` of a failed deserializer. Too many spans waiting is
``RESOURCE_EXHAUSTED`` with a ``google.rpc.RetryInfo`` detail giving the delay, which the OTLP
exporters honour (OTLP specification, "OTLP/gRPC Throttling"); a malformed request is
``INVALID_ARGUMENT``; one without the ingest token, when there is one, ``UNAUTHENTICATED``.
"""

from __future__ import annotations

from concurrent import futures
from typing import Any

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from tacit.errors import ConfigError, InputError
from tacit.serve.auth import authorized
from tacit.serve.ingest import MAX_BODY, Busy, Ingest
from tacit.serve.tls import ServerTLS

SERVICE = "opentelemetry.proto.collector.trace.v1.TraceService"


class _TraceService:
    def __init__(self, ingest: Ingest, token: str | None) -> None:
        self.ingest = ingest
        self.token = token

    def export(self, body: bytes, context: Any) -> Any:
        header = dict(context.invocation_metadata()).get("authorization")
        if not authorized(header, self.token):
            self.ingest.metrics.refused.labels("grpc", "unauthenticated").inc()
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "an ingest token is required")
        try:
            self.ingest.submit(body, "protobuf", "grpc")
        except Busy as e:
            context.abort_with_status(_retry_status(str(e), e.retry_after_s))
        except InputError as e:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
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
    ingest: Ingest,
    token: str | None = None,
    workers: int = 4,
    tls: ServerTLS | None = None,
) -> grpc.Server:
    """Serve OTLP/gRPC on ``address`` (HOST:PORT), requiring ``token`` when given (the
    ``authorization`` metadata, :mod:`.auth`), over TLS with ``tls``; returns the started
    server."""
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="tacit-grpc"),
        options=[("grpc.max_receive_message_length", MAX_BODY)],
    )
    server.add_generic_rpc_handlers((_TraceService(ingest, token).handler(),))
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
