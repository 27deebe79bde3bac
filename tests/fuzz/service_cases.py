"""Malformed and hostile requests to ``tacit serve``, for its fuzz test and bench: OTLP/HTTP
bodies (damaged, gzip-wrapped, of the wrong type), the same bytes over OTLP/gRPC, and query
parameters of the Jaeger and latency APIs. Every answer must be one the specification allows
for a bad request (400, 413, 415; 429 or 503 only with ``Retry-After``; gRPC
``INVALID_ARGUMENT`` or ``RESOURCE_EXHAUSTED``; 404 for a query of what is not there), within
:data:`CASE_TIMEOUT_S`, and the service must stay ready.

:data:`KNOWN` holds the cases found to fail once (each named): every run replays them before
drawing new ones, and a case a run finds is added there.
"""

from __future__ import annotations

import gzip
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import grpc
import numpy as np
import orjson
from hypothesis import strategies as st

from content_codings import COMPRESS
from protobuf_wire import delimited
from serve_app import shop_spans
from tacit.experiment.otlp_load import sdk_spans
from tacit.formats.otlp import otlp_document

CASE_TIMEOUT_S = 30.0
EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
PROTOBUF = "application/x-protobuf"
HTTP_ALLOWED = {200, 400, 404, 413, 415}
RETRY_ALLOWED = {429, 503}
GRPC_ALLOWED = {grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT}
GRPC_RETRY = {grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.UNAVAILABLE}
QUERY_PATHS = [
    "/api/traces",
    "/api/services",
    "/api/services/frontend/operations",
    "/api/operations",
    "/api/dependencies",
    "/api/traces/0af7651916cd43dd8448eb211c80319c",
    "/api/tacit/latency/response",
    "/api/tacit/latency/oneway",
    "/api/tacit/status",
]
PARAMS = [
    "service", "operation", "tags", "start", "end", "limit", "minDuration", "maxDuration",
    "minProbability", "lookback", "endTs", "source", "server",
]  # fmt: skip
EXTREME = [
    "", "0", "-1", "9" * 30, "-" + "9" * 30, "1e400", "nan", "inf", "-inf", "0x10", "1.5",
    "9223372036854775807", "-9223372036854775808", "1h", "-5ms", "99999999999h", "{}", "[",
    '{"a":"b"}', "%00", "\u00e9\u2028",
]  # fmt: skip


@dataclass(frozen=True)
class Case:
    """One request: over ``http`` (method, path, headers, body) or ``grpc`` (body only)."""

    transport: str
    body: bytes = b""
    path: str = "/v1/traces"
    method: str = "POST"
    headers: dict[str, str] = field(default_factory=dict)
    name: str = ""

    def show(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "transport": self.transport,
            "method": self.method,
            "path": self.path[:200],
            "headers": self.headers,
            "body": f"{len(self.body)} bytes: {self.body[:48]!r}",
        }


def valid_bodies() -> tuple[bytes, bytes]:
    """A request of 64 shop spans now, as the SDK's encoder writes it, and as OTLP/JSON (hex
    ids, which the protobuf JSON mapping would write as base64)."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    spans = shop_spans(1)
    spans = spans.take(np.arange(64))
    shift = time.time_ns() - int(spans.start.min())
    request = encode_spans(sdk_spans(spans, shift))
    spans.start[:] += shift
    spans.end[:] += shift
    return request.SerializeToString(), orjson.dumps(otlp_document(spans))


def _span(trace: bytes, span: bytes, start: int, end: int) -> bytes:
    times = bytes([7 << 3 | 1]) + start.to_bytes(8, "little", signed=start < 0)
    times += bytes([8 << 3 | 1]) + end.to_bytes(8, "little", signed=end < 0)
    return (
        delimited(1, trace) + delimited(2, span) + delimited(5, b"op") + bytes([6 << 3, 2]) + times
    )


def _request(*spans: bytes) -> bytes:
    service = delimited(1, delimited(1, b"service.name") + delimited(2, delimited(1, b"web")))
    return delimited(
        1, delimited(1, service) + delimited(2, b"".join(delimited(2, s) for s in spans))
    )


def known() -> list[Case]:
    """The cases found so far, named (the issue on bounded inputs, and fuzzing since)."""
    gz = {"Content-Type": PROTOBUF, "Content-Encoding": "gzip"}
    pb = {"Content-Type": PROTOBUF}
    now = time.time_ns()
    t, s = b"\x01" * 16, b"\x02" * 8
    year_2200 = 7_258_118_400 * 10**9
    return [
        Case("http", gzip.compress(b"\x0a\x00" * 4_000_000, 9), headers=gz, name="empty bomb"),
        Case("http", gzip.compress(bytes(64 << 20), 9), headers=gz, name="zeros inflating"),
        Case("http", bytes(1 << 20), headers=pb, name="a MiB of zero bytes"),
        Case("grpc", b"\x0a\x00" * 1_000_000, name="empty resource spans over gRPC"),
        Case("http", _request(_span(t, s[:3], now, now + 1)), headers=pb, name="3-byte span id"),
        Case("http", _request(_span(t[:8], s, now, now + 1)), headers=pb, name="8-byte trace"),
        Case("http", _request(_span(t, bytes(8), now, now + 1)), headers=pb, name="zero span id"),
        Case("http", _request(_span(t, s, now, year_2200)), headers=pb, name="ends in 2200"),
        Case("http", _request(_span(t, s, 1, 2)), headers=pb, name="starts in 1970"),
        Case("http", _request(_span(t, s, -(2**63), 2**63 - 1)), headers=pb, name="int64 range"),
        Case("http", _request(_span(t, s, now + 10, now)), headers=pb, name="ends before start"),
        Case("http", method="GET", path="/api/traces?minDuration=" + "9" * 40, name="huge min"),
        Case("http", method="GET", path="/api/tacit/latency/response?limit=" + "9" * 40),
        Case(
            "http",
            method="GET",
            path="/api/traces?"
            + urlencode({"tags": "{" + ",".join(f'"k{i}":"v"' for i in range(2000)) + "}"}),
            name="2,000 tag keys",
        ),
        Case(
            "http",
            gzip.compress(_request(_span(t, s, now, now + 1))) + b"junk",
            headers=gz,
            name="gzip with trailing bytes",
        ),
        Case("http", COMPRESS["zstd"](bytes(256 << 20)), headers=_as("zstd"), name="zstd bomb"),
        Case(
            "http",
            b"\xff\xff\xff\xff\x0f" + b"\x00" * 64,
            headers=_as("snappy"),
            name="snappy block claiming 4 GiB",
        ),
        Case(
            "http",
            COMPRESS["x-snappy-framed"](bytes(64 << 20)),
            headers=_as("x-snappy-framed"),
            name="framed snappy inflating",
        ),
        Case("http", _request(_span(t, s, now, now + 1)), headers=_as("br"), name="brotli"),
    ]


def _as(encoding: str) -> dict[str, str]:
    return {"Content-Type": PROTOBUF, "Content-Encoding": encoding}


@st.composite
def damaged(draw: st.DrawFn, data: bytes) -> bytes:
    """``data`` with bytes set, cut or added at 1-3 places."""
    body = bytearray(data)
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, max(len(body) - 1, 0)))
        what = draw(st.sampled_from(["set", "cut", "add"]))
        if what == "set" and body:
            body[at] = draw(st.integers(0, 255))
        elif what == "cut":
            del body[at : at + draw(st.integers(1, 64))]
        else:
            body[at:at] = draw(st.binary(min_size=1, max_size=16))
    return bytes(body)


@st.composite
def cases(draw: st.DrawFn, protobuf: bytes, json_body: bytes) -> Case:
    """One random case: an export over HTTP or gRPC, or a query."""
    kind = draw(st.sampled_from(["http", "http", "grpc", "query"]))
    if kind == "query":
        keys = draw(st.lists(st.sampled_from(PARAMS), max_size=4))
        values = st.one_of(st.sampled_from(EXTREME), st.text(max_size=20))
        query = urlencode({k: draw(values) for k in keys})
        return Case("http", method="GET", path=f"{draw(st.sampled_from(QUERY_PATHS))}?{query}")
    body = draw(
        st.one_of(
            damaged(protobuf),
            damaged(json_body),
            st.binary(max_size=4096),
            st.just(protobuf),
            st.just(json_body),
        )
    )
    if kind == "grpc":
        return Case("grpc", body)
    headers = {"Content-Type": draw(st.sampled_from([PROTOBUF, "application/json", "text/plain"]))}
    if draw(st.booleans()):
        encoding = draw(st.sampled_from([*COMPRESS, "br"]))
        headers["Content-Encoding"] = encoding
        packed = COMPRESS.get(encoding, bytes)(body)
        body = draw(st.one_of(st.just(packed), damaged(packed)))
    return Case("http", body, headers=headers)


def run_case(case: Case, http_port: int, grpc_port: int) -> str | None:
    """What is wrong with the service's answer to ``case``, or None."""
    began = time.monotonic()
    if case.transport == "grpc":
        with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
            try:
                channel.unary_unary(EXPORT)(case.body, timeout=CASE_TIMEOUT_S)
                code = grpc.StatusCode.OK
            except grpc.RpcError as e:
                code = e.code()
        wrong = None if code in GRPC_ALLOWED | GRPC_RETRY else f"gRPC {code.name}"
    else:
        request = urllib.request.Request(
            f"http://127.0.0.1:{http_port}{case.path}",
            data=case.body if case.method == "POST" else None,
            headers=case.headers,
            method=case.method,
        )
        try:
            with urllib.request.urlopen(request, timeout=CASE_TIMEOUT_S) as r:
                status, retry = r.status, r.headers.get("Retry-After")
        except urllib.error.HTTPError as e:
            status, retry = e.code, e.headers.get("Retry-After")
        except OSError as e:
            return f"no answer: {type(e).__name__}: {e}"
        allowed = status in HTTP_ALLOWED or (status in RETRY_ALLOWED and retry)
        wrong = None if allowed else f"HTTP {status}"
    if time.monotonic() - began > CASE_TIMEOUT_S:
        return f"answered after {time.monotonic() - began:.1f} s"
    return wrong


def ready(http_port: int) -> str | None:
    """Why the service is not ready, or None."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/readyz", timeout=30):
            return None
    except urllib.error.HTTPError as e:
        return f"/readyz {e.code}: {e.read().decode(errors='replace').strip()}"
    except OSError as e:
        return f"/readyz: {e}"
