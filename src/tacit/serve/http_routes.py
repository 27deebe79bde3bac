"""What ``tacit serve`` answers over HTTP, apart from how the bytes travel (:mod:`.http_server`):
the OTLP/HTTP receiver, the Jaeger query API, the web page, ``/metrics``, ``/healthz`` and
``/readyz``.

OTLP/HTTP (specification, "OTLP/HTTP"): ``POST /v1/traces`` with ``application/x-protobuf`` or
``application/json``, optionally gzip-encoded; success is 200 with an (empty)
``ExportTraceServiceResponse`` in the request's encoding; a malformed request is 400 with a
``google.rpc.Status`` saying why; too many spans waiting is 429 with ``Retry-After``, which the
SDK exporters honour by retrying later. With an ingest token (:mod:`.auth`), a POST without it
is 401; with a query token, so is a GET without it, but for ``/healthz`` and ``/readyz``.

A request is answered in two steps: :meth:`Routes.before_body` from its head alone (a POST
that is refused is refused before its body is read), then :meth:`Routes.answer` with its body.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from importlib import resources
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from tacit.errors import ConfigError, InputError
from tacit.serve import jaeger_api, jaeger_api_v3, jaeger_metrics_api
from tacit.serve.auth import authorized, may_read
from tacit.serve.content_encoding import ENCODINGS, UnsupportedEncoding, decode_body
from tacit.serve.ingest import MAX_BODY, Busy, Ingest
from tacit.serve.log_ingest import LogIngest
from tacit.serve.metrics import ServeMetrics
from tacit.serve.store import Store, cannot_write

log = logging.getLogger("tacit.serve")

PROTOBUF = "application/x-protobuf"
_STATIC = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/style.css": ("style.css", "text/css; charset=utf-8"),
}
LOG_EVERY_S = 10.0
"""A store that cannot write is logged at most this often, however many requests meet it."""
_OPEN = ("/healthz", "/readyz")
"""What a GET may ask without the query token: the health checks of orchestrators."""


@dataclass(frozen=True)
class Request:
    """One request: its method, target (path and query) and headers (names in lower case, in
    the order they came), and its body once read."""

    method: str
    target: str
    headers: list[tuple[str, str]]
    body: bytes = b""

    def header(self, name: str) -> str | None:
        """The first value of header ``name`` (lower case), or None."""
        return next((v for k, v in self.headers if k == name), None)

    @property
    def path(self) -> str:
        return urlsplit(self.target).path

    @property
    def params(self) -> dict[str, str]:
        return dict(parse_qsl(urlsplit(self.target).query))

    def values(self, name: str) -> list[str]:
        """Every value of query parameter ``name``, in order (it may repeat)."""
        return [v for k, v in parse_qsl(urlsplit(self.target).query) if k == name]


@dataclass(frozen=True)
class Response:
    """An answer; ``close`` ends the connection after it (a body that was never read)."""

    status: HTTPStatus
    body: bytes
    ctype: str
    headers: dict[str, str] = field(default_factory=dict)
    close: bool = False


def text(
    status: HTTPStatus, message: str, headers: dict[str, str] | None = None, close: bool = False
) -> Response:
    """A plain-text answer of one line."""
    return Response(status, f"{message}\n".encode(), "text/plain", headers or {}, close)


def _json(
    doc: Any, status: HTTPStatus = HTTPStatus.OK, headers: dict[str, str] | None = None
) -> Response:
    return Response(status, json.dumps(doc).encode(), "application/json", headers or {})


def _otlp_error(
    status: HTTPStatus, encoding: str, message: str, headers: dict[str, str] | None = None
) -> Response:
    from google.rpc.status_pb2 import Status

    code = 8 if status == HTTPStatus.TOO_MANY_REQUESTS else 3  # RESOURCE_EXHAUSTED, INVALID
    if encoding == "json":
        body = json.dumps({"code": code, "message": message}).encode()
        ctype = "application/json"
    else:
        body = Status(code=code, message=message).SerializeToString()
        ctype = PROTOBUF
    return Response(status, body, ctype, headers or {})


def _media_type(request: Request) -> str:
    """The request's ``Content-Type`` without its parameters."""
    return (request.header("content-type") or "").split(";")[0].strip()


def _encoding(request: Request) -> str:
    return "json" if _media_type(request) == "application/json" else "protobuf"


_ACCEPTED = {"Accept-Encoding": ", ".join((*ENCODINGS, "identity"))}
"""What a 415 names as taken (RFC 7694)."""


def inflated(request: Request) -> bytes:
    """The request's body, inflated as its ``Content-Encoding`` says within
    :data:`~.ingest.MAX_BODY` (:mod:`.content_encoding`)."""
    return decode_body(request.body, request.header("content-encoding"), MAX_BODY)


@dataclass
class Routes:
    """The service's parts that answer HTTP requests."""

    store: Store | None
    """None: an ingest replica's, which answers no queries."""
    ingest: Ingest | LogIngest | None
    """None: the reconstruct role's, which takes spans from the shared log only."""
    metrics: ServeMetrics
    ready: Callable[[], str | None]
    extra: Callable[[str, dict[str, str]], Any | None]
    receive: Callable[[str, dict[str, str], bytes], Any | None]
    token: str | None = None
    query_token: str | None = None
    _told_at: float = field(default=-math.inf, init=False, repr=False)  # store last logged

    def before_body(self, request: Request, length: int | None) -> Response | None:
        """The answer to a request that is refused from its head (its body, of ``length``
        bytes or chunked when None, is then never read, and the connection closes after the
        answer), or None to read the body."""
        if request.method not in ("GET", "POST"):
            return text(HTTPStatus.METHOD_NOT_ALLOWED, "GET or POST", {"Allow": "GET, POST"})
        encoding = _encoding(request)
        if request.method == "POST":
            if not authorized(request.header("authorization"), self.token):
                self.metrics.refused.labels("http", "unauthenticated").inc()
                return Response(
                    HTTPStatus.UNAUTHORIZED,
                    b"",
                    "text/plain",
                    {"WWW-Authenticate": 'Bearer realm="tacit"'},
                )
            ctype = _media_type(request)
            if request.path == "/v1/traces" and ctype not in (PROTOBUF, "application/json"):
                return _otlp_error(
                    HTTPStatus.UNSUPPORTED_MEDIA_TYPE, encoding, f"content type {ctype!r}"
                )
        if length is not None and length > MAX_BODY:
            self.metrics.refused.labels("http", "invalid").inc()
            return _otlp_error(
                HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                encoding,
                f"request body of {length} bytes exceeds {MAX_BODY}",
            )
        return None

    def too_large(self, request: Request) -> Response:
        """The answer to a body that grew beyond :data:`~.ingest.MAX_BODY` while read."""
        self.metrics.refused.labels("http", "invalid").inc()
        return _otlp_error(
            HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
            _encoding(request),
            f"request body exceeds {MAX_BODY} bytes",
        )

    def answer(self, request: Request) -> Response:
        """The answer to a whole request. A failure of the service itself (the store, say) is
        logged and answered 503 for a POST (OTLP senders retry it), 500 for a GET; its text
        stays in the log."""
        try:
            if request.method == "POST":
                return self._post(request)
            return self._get(request)
        except Exception as e:
            if cannot_write(e):  # a full disk: the senders retry, readiness says why
                if time.monotonic() - self._told_at >= LOG_EVERY_S:
                    log.error("%s %s: the store cannot write: %s", request.method, request.path, e)
                    self._told_at = time.monotonic()
                return text(
                    HTTPStatus.SERVICE_UNAVAILABLE,
                    "the store cannot write; try again later",
                    {"Retry-After": "5"},
                )
            log.exception("%s %s failed", request.method, request.path)
            status = (
                HTTPStatus.SERVICE_UNAVAILABLE
                if request.method == "POST"
                else HTTPStatus.INTERNAL_SERVER_ERROR
            )
            return text(status, "the service failed; its log says why")

    def _post(self, request: Request) -> Response:
        if request.path != "/v1/traces":
            try:
                answer = self.receive(request.path, request.params, inflated(request))
            except UnsupportedEncoding as e:
                return _json(
                    {"errors": [{"code": 415, "msg": str(e)}]},
                    HTTPStatus.UNSUPPORTED_MEDIA_TYPE,
                    _ACCEPTED,
                )
            except (InputError, ConfigError) as e:
                return _json({"errors": [{"code": 400, "msg": str(e)}]}, HTTPStatus.BAD_REQUEST)
            if answer is None:
                return text(HTTPStatus.NOT_FOUND, "not found")
            return _json(answer)
        encoding = _encoding(request)
        if self.ingest is None:
            return _otlp_error(
                HTTPStatus.NOT_FOUND, encoding, "this process reads the shared log: send spans "
                "to an ingest replica"
            )  # fmt: skip
        try:
            self.ingest.submit(inflated(request), encoding, "http")
        except Busy as e:
            return _otlp_error(
                HTTPStatus.TOO_MANY_REQUESTS,
                encoding,
                str(e),
                {"Retry-After": str(e.retry_after_s)},
            )
        except UnsupportedEncoding as e:
            return _otlp_error(HTTPStatus.UNSUPPORTED_MEDIA_TYPE, encoding, str(e), _ACCEPTED)
        except InputError as e:
            return _otlp_error(HTTPStatus.BAD_REQUEST, encoding, str(e))
        if encoding == "json":
            return Response(HTTPStatus.OK, b"{}", "application/json")
        return Response(HTTPStatus.OK, b"", PROTOBUF)

    def _v3(self, store: Store, path: str, params: dict[str, str]) -> Response:
        """Jaeger v2's ``/api/v3`` (:mod:`.jaeger_api_v3`), with its errors' shape."""
        try:
            if path == "/api/v3/services":
                return _json(jaeger_api_v3.services(store))
            if path == "/api/v3/operations":
                return _json(jaeger_api_v3.operations(store, params))
            if path == "/api/v3/traces":
                return _json(jaeger_api_v3.find_traces(store, params))
            if path.startswith("/api/v3/traces/"):
                wanted = unquote(path[len("/api/v3/traces/") :])
                return _json(jaeger_api_v3.trace(store, wanted))
            if path == "/api/v3/dependencies":
                return _json(jaeger_api_v3.dependencies(store, params))
            raise jaeger_api_v3.NotFound(f"no such endpoint: {path}")
        except jaeger_api_v3.NotFound as e:
            return _json(jaeger_api_v3.error(404, str(e)), HTTPStatus.NOT_FOUND)
        except InputError as e:
            return _json(jaeger_api_v3.error(400, str(e)), HTTPStatus.BAD_REQUEST)

    def _metrics(self, store: Store, path: str, request: Request) -> Response:
        """Jaeger's metrics API (:mod:`.jaeger_metrics_api`), with Jaeger's error answers."""
        api = jaeger_metrics_api
        if path == "/api/metrics/minstep":
            return _json(api.min_step())
        kind = path[len("/api/metrics/") :]
        if kind not in ("latencies", "calls", "errors"):
            return _json(jaeger_api.error(404, f"no such endpoint: {path}"), HTTPStatus.NOT_FOUND)
        params = request.params
        quantile = api.quantile_param(params) if kind == "latencies" else 0.0
        query = api.metrics_query(params, request.values)
        if kind == "latencies":
            return _json(api.latencies(store, query, quantile))
        return _json((api.calls if kind == "calls" else api.errors)(store, query))

    def _get(self, request: Request) -> Response:  # noqa: C901, PLR0912
        path, params = request.path, request.params
        store = self.store
        if path == "/v1/traces":  # the receiver takes POST only
            return text(HTTPStatus.METHOD_NOT_ALLOWED, "POST OTLP here", {"Allow": "POST"})
        if path not in _OPEN and not may_read(request.header("authorization"), self.query_token):
            return text(
                HTTPStatus.UNAUTHORIZED,
                "a query token is required",
                {"WWW-Authenticate": 'Basic realm="tacit", charset="UTF-8"'},
            )
        if path == "/metrics":
            body = generate_latest(self.metrics.registry)
            return Response(HTTPStatus.OK, body, CONTENT_TYPE_LATEST)
        if path == "/healthz":
            return text(HTTPStatus.OK, "ok")
        if path == "/readyz":
            problem = self.ready()
            status = HTTPStatus.OK if problem is None else HTTPStatus.SERVICE_UNAVAILABLE
            return text(status, problem or "ready")
        if store is None:
            return text(HTTPStatus.NOT_FOUND, "an ingest replica answers no queries")
        try:
            if path in _STATIC:
                name, ctype = _STATIC[path]
                page = resources.files("tacit.serve").joinpath("web", name).read_bytes()
                return Response(HTTPStatus.OK, page, ctype)
            if path == "/api/services":
                return _json(jaeger_api.services(store))
            if path.startswith("/api/services/") and path.endswith("/operations"):
                service = unquote(path[len("/api/services/") : -len("/operations")])
                return _json(jaeger_api.operations(store, service, with_kind=False))
            if path == "/api/operations":
                kind = jaeger_api.span_kind(params.get("spanKind"))
                return _json(jaeger_api.operations(store, params.get("service", ""), True, kind))
            if path == "/api/traces":
                if ids := request.values("traceID"):  # Jaeger UI's search by id, and compare
                    docs, errors = jaeger_api.traces_by_id(store, ids)
                else:
                    docs, errors = store.find_traces(jaeger_api.trace_query(params)), []
                body = jaeger_api.traces_json(docs, errors)
                return Response(HTTPStatus.OK, body, "application/json")
            if path.startswith("/api/traces/"):
                wanted = jaeger_api.trace_id(unquote(path[len("/api/traces/") :]))
                docs, errors = jaeger_api.traces_by_id(store, [wanted])
                if errors:
                    return _json(jaeger_api.error(404, "trace not found"), HTTPStatus.NOT_FOUND)
                return Response(HTTPStatus.OK, jaeger_api.traces_json(docs), "application/json")
            if path == "/api/dependencies":
                return _json(jaeger_api.dependencies(store, params))
            if path.startswith("/api/v3/"):
                return self._v3(store, path, params)
            if path.startswith("/api/metrics/"):
                return self._metrics(store, path, request)
            answer = self.extra(path, params)
            if answer is None:
                return text(HTTPStatus.NOT_FOUND, "not found")
            return _json(answer)
        except InputError as e:
            return _json(jaeger_api.error(400, str(e)), HTTPStatus.BAD_REQUEST)
