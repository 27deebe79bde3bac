"""A small OTLP trace receiver that writes what it receives as OTLP JSON Lines: what the
experiments' instrumented services export to when no collector is named.

It listens on 127.0.0.1 (an ephemeral port) for OTLP/HTTP (``POST /v1/traces``, a binary
protobuf ``ExportTraceServiceRequest``, gzip or not) or OTLP/gRPC (``TraceService/Export``), and
appends each request as one line: the request in protobuf's JSON mapping
(``google.protobuf.json_format``: lowerCamelCase fields, enums by name, int64 as strings) with
the trace and span ids in hex, where OTLP/JSON departs from that mapping (which writes bytes as
base64), as the OpenTelemetry Collector's file exporter writes them. tacit reads the file as it
reads the Collector's (:mod:`tacit.formats.otlp`). The file is written atomically
(:func:`tacit.outputs.atomic_output`): it appears, complete, when the receiver stops.
"""

from __future__ import annotations

import base64
import gzip
import json
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, BinaryIO

from google.protobuf.json_format import MessageToDict
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from tacit.errors import ConfigError
from tacit.outputs import atomic_output

HOST = "127.0.0.1"
PROTOCOLS = ("http", "grpc")
_IDS = ("traceId", "spanId", "parentSpanId")


def json_line(request: ExportTraceServiceRequest) -> bytes:
    """One export request as a line of OTLP JSON Lines (module docstring)."""
    doc = MessageToDict(request)
    for resource_spans in doc.get("resourceSpans", ()):
        for scope_spans in resource_spans.get("scopeSpans", ()):
            for span in scope_spans.get("spans", ()):
                _hex_ids(span)
                for link in span.get("links", ()):
                    _hex_ids(link)
    return json.dumps(doc, separators=(",", ":")).encode() + b"\n"


def _hex_ids(doc: dict[str, Any]) -> None:
    for key in _IDS:
        if key in doc:
            doc[key] = base64.b64decode(doc[key]).hex()


class OtlpReceiver:
    """The receiver (module docstring), a context manager: entered, it listens and
    :attr:`endpoint` is its URL; left, it stops and ``path`` is complete. It counts what it
    accepted: ``requests``, ``spans``, of them those that name a parent (``with_parent``), and
    the distinct trace ids (``trace_ids``)."""

    def __init__(self, path: str | Path, protocol: str = "http") -> None:
        if protocol not in PROTOCOLS:
            raise ConfigError(f"the OTLP protocol must be one of {PROTOCOLS}, got {protocol!r}")
        self.path = Path(path)
        self.protocol = protocol
        self.endpoint = ""
        self.requests = 0
        self.spans = 0
        self.with_parent = 0
        self.trace_ids: set[bytes] = set()
        self._lock = threading.Lock()
        self._file: BinaryIO | None = None
        self._stack = ExitStack()

    def write(self, request: ExportTraceServiceRequest) -> None:
        """Append ``request`` (from any of the server's threads)."""
        line = json_line(request)
        spans = [
            span for rs in request.resource_spans for ss in rs.scope_spans for span in ss.spans
        ]
        with self._lock:
            assert self._file is not None  # written to while entered only
            self._file.write(line)
            self.requests += 1
            self.spans += len(spans)
            self.with_parent += sum(bool(span.parent_span_id) for span in spans)
            self.trace_ids.update(span.trace_id for span in spans)

    def counts(self) -> dict[str, int]:
        """What it accepted: ``spans``, ``with_parent``, ``traces`` and ``export_requests``."""
        with self._lock:
            return {
                "spans": self.spans,
                "with_parent": self.with_parent,
                "traces": len(self.trace_ids),
                "export_requests": self.requests,
            }

    def __enter__(self) -> OtlpReceiver:
        with ExitStack() as stack:
            self._file = stack.enter_context(atomic_output(self.path))
            if self.protocol == "grpc":
                self.endpoint = self._serve_grpc(stack)
            else:
                self.endpoint = self._serve_http(stack)
            self._stack = stack.pop_all()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stack.__exit__(*exc)

    def _serve_http(self, stack: ExitStack) -> str:
        server = _HttpServer((HOST, 0), _HttpHandler, self)
        thread = threading.Thread(target=server.serve_forever, name="otlp-http", daemon=True)
        thread.start()
        stack.callback(server.server_close)
        stack.callback(thread.join)
        stack.callback(server.shutdown)
        return f"http://{HOST}:{server.server_address[1]}"

    def _serve_grpc(self, stack: ExitStack) -> str:
        import grpc
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc

        receiver = self

        class TraceService(trace_service_pb2_grpc.TraceServiceServicer):
            def Export(self, request: Any, context: Any) -> ExportTraceServiceResponse:
                receiver.write(request)
                return ExportTraceServiceResponse()

        server = grpc.server(ThreadPoolExecutor(max_workers=4))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(TraceService(), server)
        port = server.add_insecure_port(f"{HOST}:0")
        server.start()
        stack.callback(lambda: server.stop(grace=1).wait())
        return f"http://{HOST}:{port}"


class _HttpServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], handler: type, receiver: OtlpReceiver) -> None:
        self.receiver = receiver
        super().__init__(address, handler)


class _HttpHandler(BaseHTTPRequestHandler):
    """``POST /v1/traces`` with a protobuf body; answered with an empty protobuf
    ``ExportTraceServiceResponse`` (OTLP/HTTP: full success)."""

    protocol_version = "HTTP/1.1"
    server: _HttpServer

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path.split("?", 1)[0] != "/v1/traces":
            self._reply(404, b"not found", "text/plain")
            return
        if self.headers.get("Content-Type", "").split(";")[0].strip() != "application/x-protobuf":
            self._reply(415, b"only application/x-protobuf", "text/plain")
            return
        try:
            if self.headers.get("Content-Encoding", "").lower() == "gzip":
                body = gzip.decompress(body)
            request = ExportTraceServiceRequest.FromString(body)
        except (OSError, EOFError, DecodeError) as e:
            self._reply(400, f"cannot decode the request: {e}".encode(), "text/plain")
            return
        self.server.receiver.write(request)
        self._reply(200, ExportTraceServiceResponse().SerializeToString(), "application/x-protobuf")

    def _reply(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the file is the record."""
