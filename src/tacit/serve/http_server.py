"""The HTTP side of ``tacit serve``: the OTLP/HTTP receiver, the Jaeger query API, the web page,
``/metrics``, ``/healthz`` and ``/readyz``, on one address.

OTLP/HTTP (specification, "OTLP/HTTP"): ``POST /v1/traces`` with ``application/x-protobuf`` or
``application/json``, optionally gzip-encoded; success is 200 with an (empty)
``ExportTraceServiceResponse`` in the request's encoding; a malformed request is 400 with a
``google.rpc.Status`` saying why; too many spans waiting is 429 with ``Retry-After``, which the
SDK exporters honour by retrying later. With an ingest token (:mod:`.auth`), a POST without it
is 401; with a query token, so is a GET without it, but for ``/healthz`` and ``/readyz``. With
a certificate (:mod:`.tls`), all of it is served over HTTPS.
"""

from __future__ import annotations

import json
import logging
import ssl
import sys
import zlib
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from tacit.errors import ConfigError, InputError
from tacit.serve import jaeger_api
from tacit.serve.auth import authorized, may_read
from tacit.serve.ingest import MAX_BODY, Busy, Ingest
from tacit.serve.metrics import ServeMetrics
from tacit.serve.store import Store
from tacit.serve.tls import ServerTLS

log = logging.getLogger("tacit.serve")

PROTOBUF = "application/x-protobuf"
_STATIC = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/style.css": ("style.css", "text/css; charset=utf-8"),
}
_OPEN = ("/healthz", "/readyz")
"""What a GET may ask without the query token: the health checks of orchestrators."""


HANDSHAKE_TIMEOUT_S = 10
"""How long a connection may take over its TLS handshake (in its own thread)."""
IDLE_TIMEOUT_S = 30
"""How long a connection may wait between two reads (headers a byte at a time, a keep-alive
connection left idle) before it is closed, with the thread that serves it. The OTLP exporters
keep a connection between batches sent every 5 s; Go's servers close idle ones after a few
minutes at most."""
BACKLOG = 1024
"""Connections the kernel queues until the server accepts them. The standard library's default
is 5: beyond it, a burst of clients waits for SYN retries or, on a busy server, is reset."""


class ServeHTTPServer(ThreadingHTTPServer):
    """A threading server that knows the service's parts; HTTPS with ``tls``, each connection's
    handshake in its own thread, so that a slow client holds up no other."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = BACKLOG

    def __init__(
        self,
        address: tuple[str, int],
        store: Store,
        ingest: Ingest,
        metrics: ServeMetrics,
        ready: Callable[[], str | None],
        extra: Callable[[str, dict[str, str]], Any | None],
        receive: Callable[[str, dict[str, str], bytes], Any | None],
        token: str | None = None,
        tls: ServerTLS | None = None,
        query_token: str | None = None,
    ) -> None:
        super().__init__(address, _Handler)
        if tls is not None:
            self.socket = tls.context.wrap_socket(
                self.socket, server_side=True, do_handshake_on_connect=False
            )
        self.token = token
        self.query_token = query_token
        self.store = store
        self.ingest = ingest
        self.metrics = metrics
        self.ready = ready
        self.extra = extra
        self.receive = receive

    def finish_request(self, request: Any, client_address: Any) -> None:
        if isinstance(request, ssl.SSLSocket):
            try:
                request.settimeout(HANDSHAKE_TIMEOUT_S)
                request.do_handshake()
                request.settimeout(None)
            except (ssl.SSLError, OSError) as e:
                log.debug("TLS handshake with %s failed: %s", client_address, e)
                return
        super().finish_request(request, client_address)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A connection that broke or timed out is the client's doing, logged at debug level;
        anything else is a fault, logged with its traceback (the standard library printed a
        traceback for every reset connection)."""
        if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            log.debug("connection from %s ended: %s", client_address, sys.exc_info()[1])
        else:
            log.exception("serving %s failed", client_address)


class _Handler(BaseHTTPRequestHandler):
    server: ServeHTTPServer
    protocol_version = "HTTP/1.1"
    server_version = "tacit"
    timeout = IDLE_TIMEOUT_S

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.address_string(), format % args)

    def do_POST(self) -> None:
        self._guarded(self._post, HTTPStatus.SERVICE_UNAVAILABLE)

    def do_GET(self) -> None:
        self._guarded(self._get, HTTPStatus.INTERNAL_SERVER_ERROR)

    def _guarded(self, handle: Callable[[], None], status: HTTPStatus) -> None:
        """Run ``handle``; a failure of the service itself (the store, say) is logged and
        answered ``status`` (503 for exports: OTLP senders retry it), never a dropped
        connection."""
        try:
            handle()
        except Exception:
            log.exception("%s %s failed", self.command, self.path)
            self._send(status, b"the service failed; its log says why\n", "text/plain")

    # -- OTLP --------------------------------------------------------------------------------
    def _post(self) -> None:
        url = urlsplit(self.path)
        path = url.path
        if not authorized(self.headers.get("Authorization"), self.server.token):
            self.server.metrics.refused.labels("http", "unauthenticated").inc()
            self.send_response(HTTPStatus.UNAUTHORIZED)
            self.send_header("WWW-Authenticate", 'Bearer realm="tacit"')
            self.send_header("Content-Length", "0")
            self.send_header("Connection", "close")  # its body, if any, is not read
            self.end_headers()
            self.close_connection = True
            return
        if path != "/v1/traces":
            self._post_extra(path, dict(parse_qsl(url.query)))
            return
        ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip()
        encoding = "json" if ctype == "application/json" else "protobuf"
        if ctype not in (PROTOBUF, "application/json"):
            self._otlp_error(HTTPStatus.UNSUPPORTED_MEDIA_TYPE, encoding, f"content type {ctype!r}")
            return
        try:
            body = self._body()
            self.server.ingest.submit(body, encoding, "http")
        except Busy as e:
            self._otlp_error(
                HTTPStatus.TOO_MANY_REQUESTS,
                encoding,
                str(e),
                {"Retry-After": str(e.retry_after_s)},
            )
            return
        except InputError as e:
            self._otlp_error(HTTPStatus.BAD_REQUEST, encoding, str(e))
            return
        if encoding == "json":
            self._send(HTTPStatus.OK, b"{}", "application/json")
        else:
            self._send(HTTPStatus.OK, b"", PROTOBUF)

    def _post_extra(self, path: str, params: dict[str, str]) -> None:
        """tacit's own POST endpoints (``server.receive``); 404 for any other path."""
        try:
            answer = self.server.receive(path, params, self._body())
        except (InputError, ConfigError) as e:
            self._json({"errors": [{"code": 400, "msg": str(e)}]}, HTTPStatus.BAD_REQUEST)
            return
        if answer is None:
            self._send(HTTPStatus.NOT_FOUND, b"not found\n", "text/plain")
        else:
            self._json(answer)

    def _body(self) -> bytes:
        lengths = self.headers.get_all("Content-Length") or []
        if len(lengths) > 1:  # which one frames the body? (RFC 9112 §6.3)
            raise InputError(f"{len(lengths)} Content-Length headers; one is taken")
        try:
            length = int(lengths[0] if lengths else "")
        except ValueError:
            raise InputError("a Content-Length is required") from None
        if length < 0 or length > MAX_BODY:
            raise InputError(f"request body of {length} bytes is not accepted")
        body = self.rfile.read(length)
        if (self.headers.get("Content-Encoding") or "").lower() == "gzip":
            inflate = zlib.decompressobj(wbits=31)  # gzip framing
            try:
                body = inflate.decompress(body, MAX_BODY + 1)
            except zlib.error as e:
                raise InputError(f"gzip body does not decompress: {e}") from None
            if len(body) > MAX_BODY:  # a small body that inflates without end is refused
                raise InputError(f"gzip body inflates beyond {MAX_BODY} bytes")
            if not inflate.eof:
                raise InputError("gzip body is truncated")
            if inflate.unused_data:
                raise InputError(
                    f"gzip body has {len(inflate.unused_data)} bytes after its end; one gzip "
                    "member is taken"
                )
        return body

    def _otlp_error(
        self, status: HTTPStatus, encoding: str, message: str, headers: dict[str, str] | None = None
    ) -> None:
        from google.rpc.status_pb2 import Status

        code = 8 if status == HTTPStatus.TOO_MANY_REQUESTS else 3  # RESOURCE_EXHAUSTED, INVALID
        if encoding == "json":
            body = json.dumps({"code": code, "message": message}).encode()
            ctype = "application/json"
        else:
            body = Status(code=code, message=message).SerializeToString()
            ctype = PROTOBUF
        self._send(status, body, ctype, headers)

    # -- queries, page, metrics --------------------------------------------------------------
    def _get(self) -> None:
        url = urlsplit(self.path)
        path = url.path
        params = dict(parse_qsl(url.query))
        store = self.server.store
        if path not in _OPEN and not may_read(
            self.headers.get("Authorization"), self.server.query_token
        ):
            headers = {"WWW-Authenticate": 'Basic realm="tacit", charset="UTF-8"'}
            self._send(
                HTTPStatus.UNAUTHORIZED, b"a query token is required\n", "text/plain", headers
            )
            return
        try:
            if path in _STATIC:
                name, ctype = _STATIC[path]
                page = resources.files("tacit.serve").joinpath("web", name).read_bytes()
                self._send(HTTPStatus.OK, page, ctype)
            elif path == "/metrics":
                self._send(
                    HTTPStatus.OK,
                    generate_latest(self.server.metrics.registry),
                    CONTENT_TYPE_LATEST,
                )
            elif path == "/healthz":
                self._send(HTTPStatus.OK, b"ok\n", "text/plain")
            elif path == "/readyz":
                problem = self.server.ready()
                status = HTTPStatus.OK if problem is None else HTTPStatus.SERVICE_UNAVAILABLE
                self._send(status, f"{problem or 'ready'}\n".encode(), "text/plain")
            elif path == "/api/services":
                self._json(jaeger_api.services(store))
            elif path.startswith("/api/services/") and path.endswith("/operations"):
                service = unquote(path[len("/api/services/") : -len("/operations")])
                self._json(jaeger_api.operations(store, service, with_kind=False))
            elif path == "/api/operations":
                self._json(jaeger_api.operations(store, params.get("service", ""), True))
            elif path == "/api/traces":
                docs = store.find_traces(jaeger_api.trace_query(params))
                self._send(HTTPStatus.OK, jaeger_api.traces_json(docs), "application/json")
            elif path.startswith("/api/traces/"):
                doc = store.trace(unquote(path[len("/api/traces/") :]))
                if doc is None:
                    self._json(
                        {"data": None, "errors": [{"code": 404, "msg": "trace not found"}]},
                        HTTPStatus.NOT_FOUND,
                    )
                else:
                    self._send(HTTPStatus.OK, jaeger_api.traces_json([doc]), "application/json")
            elif path == "/api/dependencies":
                self._json(jaeger_api.dependencies(store, params))
            else:
                answer = self.server.extra(path, params)
                if answer is None:
                    self._send(HTTPStatus.NOT_FOUND, b"not found\n", "text/plain")
                else:
                    self._json(answer)
        except InputError as e:
            self._json(
                {"data": None, "errors": [{"code": 400, "msg": str(e)}]}, HTTPStatus.BAD_REQUEST
            )

    def _json(self, doc: Any, status: HTTPStatus = HTTPStatus.OK) -> None:
        self._send(status, json.dumps(doc).encode(), "application/json")

    def _send(
        self, status: HTTPStatus, body: bytes, ctype: str, headers: dict[str, str] | None = None
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)
