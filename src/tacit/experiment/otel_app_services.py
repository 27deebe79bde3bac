"""The services of the OpenTelemetry example app (:mod:`.otel_app`): small Flask services, each its
own process, instrumented with the real OpenTelemetry SDK and its Flask and requests
instrumentations, each logging what it knows of every span made for it as the truth of the
request traces::

    client ─▶ frontend GET /hotels ─┬─▶ search GET /nearby ─┬─▶ geo GET /near
                                    │                       └─▶ rate GET /rates
                                    └─▶ profile GET /profile   (PROFILES calls at once)

Each role runs as ``python -m tacit.experiment.otel_app_services ROLE --fd N --mode MODE --truth
PATH [--peer NAME=URL ...] [--otlp-endpoint URL] [--otlp-protocol http|grpc] [--seed N]``. It
serves on the listening socket it inherits as file descriptor ``N`` (the orchestrator binds every
service's port first, so that each knows its peers' ports however the processes start), prints
``listening on HOST:PORT`` on stderr, and stops on SIGTERM: it lets the requests in flight end,
then shuts its tracer provider down, so that the batch span processor exports its tail.

An instrumented service has a ``TracerProvider`` with resource ``service.name`` (the role) and
``service.instance.id`` (role and process id), a ``BatchSpanProcessor`` exporting over OTLP
(protobuf over HTTP, or gRPC), ``FlaskInstrumentor().instrument_app`` and
``RequestsInstrumentor().instrument``: the instrumentations make every HTTP span, none is made by
hand. The modes (:data:`MODES`) break the trace context as deployments do:

- ``full``: W3C trace context everywhere; the frontend's parallel profile calls run in a pool
  with the request's context copied into them (``contextvars.copy_context().run``).
- ``threadpool``: the frontend's profile calls run in the pool without the context, as stock
  Python code does, so each profile client span starts a new trace (its callee's server span its
  child: the requests instrumentation propagates the client span); the search call, made in the
  request's own thread, stays linked.
- ``detached``: every outgoing call of the frontend runs in the pool without the context: each
  client span starts its own trace, its callee's server span its child (a sidecar's shape).
- ``uninstrumented``: search runs without OpenTelemetry (no spans, no ``traceparent`` forwarded):
  the frontend's client span to it has no server span, and the geo and rate server spans it causes
  start new traces.
- ``nopropagation``: every service sets a propagator that neither injects nor extracts: links
  within a process stay, none crosses a service boundary.
- ``queue``: ``full``, and the frontend also publishes a message per request (a PRODUCER span,
  made with the tracer API) on an in-process queue, without context; a worker thread takes it
  (a CONSUMER span, a new trace) and tells profile (``GET /visit``), as a queue consumer would.

The truth comes from what the app knows, never from span attributes. Every request carries the
load generator's ``x-request-id``, passed on by every service (uninstrumented ones too). A
client span is known to the requests ``request_hook``, which gets it with the prepared request:
the hook notes its id for the calling code, which knows the server span of the request it serves
(read in the request's thread, handed to pool threads as data) and so the true parent, and adds
the header ``x-truth-parent: <client span id>`` for the callee, whose server span logs it as its
true parent. An uninstrumented service passes on the ``x-truth-parent`` it received, so the
true parent of a server span behind it is its nearest observed ancestor, the client span that
called the uninstrumented service. Each service appends one JSON line per span to its
``--truth``, when the span's work ends::

    {"span_id": "<16 hex digits, as the SDK formats it>" or null (an unobserved hop),
     "kind": "server" | "client" | "producer" | "consumer" | "unobserved",
     "service": "frontend" | "search" | "geo" | "rate" | "profile",
     "operation": "GET /hotels" | "GET search /nearby" | "publish hotel-views" | ...,
     "request_id": "<x-request-id>",
     "parent_span_id": "<16 hex digits>" or null (a root: called by the load generator),
     "start_ns": int, "end_ns": int}   # time.time_ns() as the work began and ended

An ``unobserved`` line is a request served by an uninstrumented service (the hop itself), its
parent the client span that called it: what a span drawn for the hop should hang from.
"""

from __future__ import annotations

import argparse
import contextlib
import contextvars
import json
import logging
import os
import queue
import random
import signal
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO
from urllib.parse import urlencode

if TYPE_CHECKING:
    import requests
    from flask import Flask
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Tracer

ROLES = ("frontend", "search", "geo", "rate", "profile")
CALLS = {"frontend": ("search", "profile"), "search": ("geo", "rate")}
"""The services each role calls."""
MODES = ("full", "threadpool", "detached", "uninstrumented", "nopropagation", "queue")
PROTOCOLS = ("http", "grpc")
HOST = "127.0.0.1"
REQUEST_ID = "x-request-id"
TRUTH_PARENT = "x-truth-parent"
PROFILES = 3
"""Profiles the frontend fetches per request, at once."""
PAUSE_MS = (1.0, 4.0)
"""Each handler's own work: a uniform pause, ms, so that requests overlap in time."""
CALL_TIMEOUT_S = 10.0
QUEUE = "hotel-views"
"""The destination the frontend publishes to in mode ``queue``."""


def instrumented(role: str, mode: str) -> bool:
    """Whether ``role`` runs with OpenTelemetry in ``mode``: all but search in
    ``uninstrumented``."""
    return not (mode == "uninstrumented" and role == "search")


class TruthLog:
    """The JSON lines of the spans one service knows (module docstring), each written and flushed
    as its work ends, so that a process stopped by a signal leaves complete lines; a context
    manager that closes the file."""

    def __init__(self, path: str | Path, service: str) -> None:
        self.service = service
        self._file: TextIO = Path(path).open("a", encoding="utf-8")  # noqa: SIM115  # closed by __exit__
        self._lock = threading.Lock()

    def record(
        self,
        kind: str,
        span_id: str | None,
        parent: str | None,
        operation: str,
        request_id: str,
        start_ns: int,
    ) -> None:
        line = json.dumps(
            {
                "span_id": span_id,
                "kind": kind,
                "service": self.service,
                "operation": operation,
                "request_id": request_id,
                "parent_span_id": parent,
                "start_ns": start_ns,
                "end_ns": time.time_ns(),
            }
        )
        with self._lock:
            self._file.write(line + "\n")
            self._file.flush()

    def __enter__(self) -> TruthLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self._file.close()


@dataclass
class Handling:
    """The work being done for one request: its id, the span that stands for it here (the server
    or consumer span's id; None in an uninstrumented service) and its true parent as the caller
    named it (``x-truth-parent``; None: a root)."""

    request_id: str
    span_id: str | None
    caller: str | None


class _Outgoing(threading.local):
    """This thread's session (its connections kept alive, as services keep theirs: a new
    connection per call would leave thousands in TIME_WAIT at a few hundred calls a second), and
    the client span of the call it is making, as the request hook found it."""

    session: requests.Session | None = None
    span_id: str | None = None


_OUTGOING = _Outgoing()


class Service:
    """One service's calls and pauses. ``provider`` is its tracer provider (None: it runs
    uninstrumented); its pool runs the calls made at once."""

    def __init__(
        self,
        role: str,
        mode: str,
        truth: TruthLog,
        peers: dict[str, str],
        seed: int,
        provider: TracerProvider | None,
    ) -> None:
        self.role = role
        self.mode = mode
        self.truth = truth
        self.peers = peers
        self.provider = provider
        self.pool = ThreadPoolExecutor(max_workers=16, thread_name_prefix=role)
        self.views: ViewQueue | None = None
        self._rng = random.Random(seed)
        self._lock = threading.Lock()

    def pause(self) -> None:
        """The handler's own work (:data:`PAUSE_MS`)."""
        with self._lock:
            seconds = self._rng.uniform(*PAUSE_MS) / 1e3
        time.sleep(seconds)

    def sample(self, population: range, k: int) -> list[int]:
        """``k`` of ``population``, drawn as :meth:`pause` draws (geo's hotels)."""
        with self._lock:
            return self._rng.sample(population, k)

    @contextlib.contextmanager
    def serving(self, operation: str) -> Iterator[Handling]:
        """The request of this Flask thread, logged when it is served: its server span (the
        current span, which the Flask instrumentation started) or, uninstrumented, the hop."""
        from flask import request

        span_id = _current_span_id() if self.provider is not None else None
        here = Handling(
            request.headers.get(REQUEST_ID, ""), span_id, request.headers.get(TRUTH_PARENT)
        )
        start = time.time_ns()
        try:
            yield here
        finally:
            kind = "server" if self.provider is not None else "unobserved"
            self.truth.record(kind, span_id, here.caller, operation, here.request_id, start)

    def call(self, here: Handling, peer: str, path: str, query: dict[str, Any]) -> Any:
        """``GET path`` of ``peer`` for the work ``here``, its JSON answer. The client span the
        instrumentation makes is logged with ``here``'s span as its parent; uninstrumented, the
        caller's ``x-truth-parent`` is passed on."""
        import requests

        headers = {REQUEST_ID: here.request_id}
        if self.provider is None and here.caller is not None:
            headers[TRUTH_PARENT] = here.caller
        if _OUTGOING.session is None:
            _OUTGOING.session = requests.Session()
        _OUTGOING.span_id = None
        start = time.time_ns()
        try:
            response = _OUTGOING.session.get(
                f"{self.peers[peer]}{path}?{urlencode(query)}",
                headers=headers,
                timeout=CALL_TIMEOUT_S,
            )
        finally:
            if _OUTGOING.span_id is not None:
                operation = f"GET {peer} {path}"
                self.truth.record(
                    "client", _OUTGOING.span_id, here.span_id, operation, here.request_id, start
                )
            _OUTGOING.span_id = None
        response.raise_for_status()
        return response.json()

    def submit(self, keep_context: bool, fn: Callable[..., Any], *args: Any) -> Future[Any]:
        """Run ``fn(*args)`` in the pool: in a copy of this thread's context, or in the pool
        thread's own, empty one (what ``pool.submit`` does unless told otherwise)."""
        if keep_context:
            return self.pool.submit(contextvars.copy_context().run, fn, *args)
        return self.pool.submit(fn, *args)

    def close(self) -> None:
        """Let queued and pooled work end."""
        if self.views is not None:
            self.views.close()
        self.pool.shutdown(wait=True)


def _current_span_id() -> str:
    from opentelemetry import trace

    return trace.format_span_id(trace.get_current_span().get_span_context().span_id)


def _request_hook(span: Any, prepared: requests.PreparedRequest) -> None:
    """The requests instrumentation's hook, called with each client span as it starts: note its
    id for :meth:`Service.call` and name it to the callee as its true parent."""
    from opentelemetry import trace

    span_id = trace.format_span_id(span.get_span_context().span_id)
    _OUTGOING.span_id = span_id
    prepared.headers[TRUTH_PARENT] = span_id


@dataclass(frozen=True)
class _Message:
    """A message on the frontend's queue: what the app itself sends, no trace context (the
    producer span's id rides along for the truth only, as the app's own data)."""

    message_id: str
    request_id: str
    producer: str
    hotels: list[int]


class ViewQueue:
    """Mode ``queue``: the frontend publishes each request's hotels on an in-process queue (a
    PRODUCER span, child of the request's server span), and a worker thread, which has no trace
    context, processes them (a CONSUMER span starting a new trace) by telling profile."""

    def __init__(self, service: Service, tracer: Tracer) -> None:
        self.service = service
        self.tracer = tracer
        self.queue: queue.SimpleQueue[_Message | None] = queue.SimpleQueue()
        self.worker = threading.Thread(target=self._consume, name="consumer")
        self.worker.start()

    def _attributes(self, operation: str, kind: str, message_id: str) -> dict[str, str]:
        """The messaging semantic conventions' attributes of a span of ``operation``."""
        return {
            "messaging.system": "python_queue",
            "messaging.destination.name": QUEUE,
            "messaging.operation.name": operation,
            "messaging.operation.type": kind,
            "messaging.message.id": message_id,
        }

    def publish(self, here: Handling, hotels: list[int]) -> None:
        from opentelemetry.trace import SpanKind

        message_id = uuid.uuid4().hex
        start = time.time_ns()
        attributes = self._attributes("publish", "send", message_id)
        name = f"publish {QUEUE}"
        with self.tracer.start_as_current_span(name, kind=SpanKind.PRODUCER, attributes=attributes):
            producer = _current_span_id()
            self.queue.put(_Message(message_id, here.request_id, producer, hotels))
        self.service.truth.record("producer", producer, here.span_id, name, here.request_id, start)

    def _consume(self) -> None:
        import requests
        from opentelemetry.trace import SpanKind

        while (message := self.queue.get()) is not None:
            start = time.time_ns()
            attributes = self._attributes("process", "process", message.message_id)
            name = f"process {QUEUE}"
            with self.tracer.start_as_current_span(
                name, kind=SpanKind.CONSUMER, attributes=attributes
            ):
                here = Handling(message.request_id, _current_span_id(), message.producer)
                with contextlib.suppress(requests.RequestException):  # the answer is sent
                    self.service.pause()
                    self.service.call(here, "profile", "/visit", {"ids": _ids(message.hotels)})
            self.service.truth.record(
                "consumer", here.span_id, here.caller, name, here.request_id, start
            )

    def close(self) -> None:
        """Process what is queued, then stop the worker."""
        self.queue.put(None)
        self.worker.join()


def _ids(ids: list[int]) -> str:
    return ",".join(map(str, ids))


def _int_list(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def make_app(service: Service) -> Flask:  # noqa: C901
    """The Flask app of ``service``'s role, its one route (profile: two)."""
    from flask import Flask, request

    app = Flask(service.role)
    role, mode = service.role, service.mode
    if role == "frontend":

        @app.get("/hotels")
        def hotels() -> Any:
            with service.serving("GET /hotels") as here:
                service.pause()
                query = {k: request.args.get(k, "0") for k in ("lat", "lon")}
                if mode == "detached":
                    found = service.submit(False, service.call, here, "search", "/nearby", query)
                    nearby = found.result()
                else:
                    nearby = service.call(here, "search", "/nearby", query)
                keep = mode not in ("threadpool", "detached")
                chosen = nearby["hotels"][:PROFILES]
                calls = [
                    service.submit(keep, service.call, here, "profile", "/profile", {"id": h})
                    for h in chosen
                ]
                profiles = [c.result() for c in calls]
                if service.views is not None:
                    service.views.publish(here, chosen)
                return {"hotels": profiles}

    elif role == "search":

        @app.get("/nearby")
        def nearby() -> Any:
            with service.serving("GET /nearby") as here:
                service.pause()
                query = {k: request.args.get(k, "0") for k in ("lat", "lon")}
                near = service.call(here, "geo", "/near", query)["hotels"]
                rates = service.call(here, "rate", "/rates", {"ids": _ids(near)})["rates"]
                return {"hotels": sorted(near, key=lambda h: rates[str(h)])}

    elif role == "geo":

        @app.get("/near")
        def near() -> Any:
            with service.serving("GET /near"):
                service.pause()
                return {"hotels": service.sample(range(1, 81), 5)}

    elif role == "rate":

        @app.get("/rates")
        def rates() -> Any:
            with service.serving("GET /rates"):
                service.pause()
                ids = _int_list(request.args.get("ids", ""))
                return {"rates": {str(h): 90 + (h * 37) % 200 for h in ids}}

    else:

        @app.get("/profile")
        def profile() -> Any:
            with service.serving("GET /profile"):
                service.pause()
                hotel = int(request.args.get("id", "0"))
                return {"id": hotel, "name": f"Hotel {hotel}"}

        @app.get("/visit")
        def visit() -> Any:
            with service.serving("GET /visit"):
                service.pause()
                return {"seen": len(_int_list(request.args.get("ids", "")))}

    return app


def _exporter(endpoint: str, protocol: str) -> Any:
    """The OTLP span exporter to ``endpoint``: gRPC, or protobuf over HTTP, where an endpoint
    without a path gets ``/v1/traces`` (as ``OTEL_EXPORTER_OTLP_ENDPOINT`` does)."""
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter(endpoint=endpoint, insecure=True)
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
        OTLPSpanExporter as HttpExporter,
    )

    if endpoint.split("://", 1)[-1].rstrip("/").count("/") == 0:
        endpoint = endpoint.rstrip("/") + "/v1/traces"
    return HttpExporter(endpoint=endpoint)


def instrument(
    role: str, mode: str, endpoint: str, protocol: str, export_delay_ms: int = 5000
) -> TracerProvider:
    """This process's tracer provider, exporting to ``endpoint`` every ``export_delay_ms`` (the
    batch span processor's schedule delay; the SDK's default 5000), with every requests call
    instrumented; in mode ``nopropagation`` a propagator that carries nothing."""
    from opentelemetry import trace
    from opentelemetry.instrumentation.requests import RequestsInstrumentor
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    resource = Resource({"service.name": role, "service.instance.id": f"{role}-{os.getpid()}"})
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(
        BatchSpanProcessor(_exporter(endpoint, protocol), schedule_delay_millis=export_delay_ms)
    )
    trace.set_tracer_provider(provider)
    if mode == "nopropagation":
        from opentelemetry.propagate import set_global_textmap

        set_global_textmap(_no_propagation())
    RequestsInstrumentor().instrument(tracer_provider=provider, request_hook=_request_hook)
    return provider


def _no_propagation() -> Any:
    """A propagator that carries nothing, what ``OTEL_PROPAGATORS=none`` means. Not the SDK's
    own form of it, ``CompositePropagator([])``: given no context, its ``extract`` returns None
    instead of an empty context (1.45.1), and the Flask instrumentation fails on every request.
    This one returns the context it was given, or an empty one, as the W3C propagator does when
    a request carries no ``traceparent``."""
    from opentelemetry.context import Context
    from opentelemetry.propagators.textmap import TextMapPropagator

    class NoPropagation(TextMapPropagator):
        def extract(self, carrier: Any, context: Any = None, getter: Any = None) -> Any:
            return Context() if context is None else context

        def inject(self, carrier: Any, context: Any = None, setter: Any = None) -> None:
            """Nothing to carry."""

        @property
        def fields(self) -> set[str]:
            return set()

    return NoPropagation()


def serve(args: argparse.Namespace) -> None:
    """Run one service until SIGTERM, then end the requests in flight, the queued work and the
    tracer provider (which exports the spans still batched), in that order."""
    peers = dict(p.split("=", 1) for p in args.peer)
    provider = None
    if instrumented(args.role, args.mode):
        if not args.otlp_endpoint:
            raise SystemExit("an instrumented service needs --otlp-endpoint")
        provider = instrument(
            args.role, args.mode, args.otlp_endpoint, args.otlp_protocol, args.export_delay_ms
        )
    with TruthLog(args.truth, args.role) as truth:
        service = Service(args.role, args.mode, truth, peers, args.seed, provider)
        app = make_app(service)
        if provider is not None:
            from opentelemetry.instrumentation.flask import FlaskInstrumentor

            FlaskInstrumentor().instrument_app(app, tracer_provider=provider)
            if args.mode == "queue" and args.role == "frontend":
                service.views = ViewQueue(service, provider.get_tracer(__name__))
        from werkzeug.serving import ThreadedWSGIServer

        server = ThreadedWSGIServer(HOST, 0, app, fd=args.fd)
        server.daemon_threads = False  # server_close joins the requests in flight
        print(f"listening on {HOST}:{server.port}", file=sys.stderr, flush=True)
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            server.server_close()
            service.close()
            if provider is not None:
                provider.shutdown()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("role", choices=ROLES)
    parser.add_argument("--fd", type=int, required=True, help="the listening socket inherited")
    parser.add_argument("--mode", choices=MODES, default="full")
    parser.add_argument("--truth", required=True, help="JSON lines of the spans known")
    parser.add_argument("--peer", action="append", default=[], help="NAME=URL of a callee")
    parser.add_argument("--otlp-endpoint", default=None)
    parser.add_argument("--otlp-protocol", choices=PROTOCOLS, default="http")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--export-delay-ms", type=int, default=5000)
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # the truth is the record
    serve(args)


if __name__ == "__main__":
    main(sys.argv[1:])
