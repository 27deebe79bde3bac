"""The receivers: OTLP/HTTP protobuf and JSON, OTLP/gRPC, backpressure as the OTLP
specification asks, malformed requests refused whole, and what /metrics counts."""

from __future__ import annotations

import base64
import errno
import gzip
import http.client
import json
import socket
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import grpc
import numpy as np
import pytest
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc

from otel_sdk import collector_json_line
from serve_app import (
    config,
    get,
    get_json,
    post,
    running,
    shop_callgraph,
    shop_spans,
    url,
)
from tacit.errors import ConfigError
from tacit.experiment.otlp_load import sdk_spans
from tacit.reconstruct.online import NS, OnlineParams
from tacit.serve import Service

SLOW = OnlineParams(window_ns=60 * NS, lookahead_ns=60 * NS, max_request_ns=60 * NS)
"""Windows so long that nothing finishes during a test: spans stay pending."""


@pytest.fixture(scope="module")
def request_pb():
    """An export request of the SDK's encoder: 512 spans of the shop app."""
    spans = shop_spans(2)
    return encode_spans(sdk_spans(spans.take(np.arange(512)), 0))


class _HeldIngest:
    """An ingest whose every call waits until released, so that calls stay under way."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.entered = threading.Semaphore(0)

    def submit(self, body: bytes, encoding: str, transport: str) -> None:
        self.entered.release()
        self.release.wait(30)


def test_grpc_one_address_is_answered_by_at_most_its_share_of_the_workers(request_pb):
    """With 4 workers, one address has 2 calls answered at once; a third is RESOURCE_EXHAUSTED
    with RetryInfo while the two wait, and taken once they are done."""
    from tacit.serve.grpc_receiver import start_grpc

    ingest = _HeldIngest()
    server = start_grpc("127.0.0.1:0", ingest, workers=4)  # type: ignore[arg-type]
    try:
        with grpc.insecure_channel(f"127.0.0.1:{server.bound_port}") as channel:
            stub = trace_service_pb2_grpc.TraceServiceStub(channel)
            held = [stub.Export.future(request_pb, timeout=30) for _ in range(2)]
            assert all(ingest.entered.acquire(timeout=30) for _ in held)
            with pytest.raises(grpc.RpcError) as refused:
                stub.Export(request_pb, timeout=30)
            ingest.release.set()
            for call in held:
                call.result()
            stub.Export(request_pb, timeout=30)
    finally:
        server.stop(None)
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "from this address" in refused.value.details()
    info = error_details_pb2.RetryInfo()
    assert rpc_status.from_call(refused.value).details[0].Unpack(info)


def test_http_protobuf_json_and_gzip_are_acknowledged_and_counted(tmp_path, request_pb):
    body = request_pb.SerializeToString()
    as_json = collector_json_line(request_pb)  # a request's OTLP/JSON form
    with running(tmp_path, online=SLOW) as svc:
        assert post(svc, body, "application/x-protobuf")[:2] == (200, b"")
        assert post(svc, as_json, "application/json")[:2] == (200, b"{}")
        gz = post(
            svc, gzip.compress(body), "application/x-protobuf", **{"Content-Encoding": "gzip"}
        )
        assert gz[0] == 200
        svc.store.settle()  # the journal into the ingest table
        stored = svc.store._cursor().execute("SELECT sum(spans) FROM ingest").fetchone()[0]
        metrics = get(svc, "/metrics")[1].decode()
    assert stored == 3 * 512
    assert 'tacit_spans_received_total{transport="http"} 1536.0' in metrics


def test_malformed_requests_are_refused_whole_with_the_reason(tmp_path, request_pb):
    with running(tmp_path, online=SLOW) as svc:
        status, body, _ = post(svc, b"\x0a\xff\xff", "application/x-protobuf")
        assert status == 400
        assert "not a protobuf OTLP" in status_pb2.Status.FromString(body).message
        status, body, _ = post(svc, b'{"resourceSpans": [{"scopeSpans": 3}]}', "application/json")
        assert status == 400 and "resourceSpans 0" in json.loads(body)["message"]
        assert post(svc, b"x", "text/plain")[0] == 415
        # Well-formed protobuf whose spans reading refuses: refused before it is acknowledged,
        # not found out by reconstruction afterwards (which could not refuse it any more).
        twice = type(request_pb)()
        twice.CopyFrom(request_pb)
        spans = twice.resource_spans[0].scope_spans[0].spans
        spans[1].trace_id, spans[1].span_id = spans[0].trace_id, spans[0].span_id
        status, body, _ = post(svc, twice.SerializeToString(), "application/x-protobuf")
        assert status == 400
        assert "duplicate span id" in status_pb2.Status.FromString(body).message
        svc.store.settle()  # the journal into the ingest table
        stored = svc.store._cursor().execute("SELECT count(*) FROM ingest").fetchone()[0]
        metrics = get(svc, "/metrics")[1].decode()
        assert get(svc, "/readyz")[0] == 200
    assert stored == 0
    assert 'tacit_requests_refused_total{reason="invalid",transport="http"} 3.0' in metrics


def test_http_backpressure_is_429_with_retry_after(tmp_path, request_pb):
    body = request_pb.SerializeToString()
    with running(tmp_path, online=SLOW, max_pending_spans=600, retry_after_s=3) as svc:
        assert post(svc, body, "application/x-protobuf")[0] == 200
        status, answer, headers = post(svc, body, "application/x-protobuf")
        svc.store.settle()  # the journal into the ingest table
        stored = svc.store._cursor().execute("SELECT sum(spans) FROM ingest").fetchone()[0]
    assert status == 429 and headers["Retry-After"] == "3"
    assert "retry" in status_pb2.Status.FromString(answer).message
    assert stored == 512  # the refused request left nothing behind


def test_grpc_export_and_resource_exhausted_with_retry_info(tmp_path, request_pb):
    with running(tmp_path, online=SLOW, max_pending_spans=600, retry_after_s=2) as svc:
        with grpc.insecure_channel(f"127.0.0.1:{svc.grpc_port}") as channel:
            stub = trace_service_pb2_grpc.TraceServiceStub(channel)
            stub.Export(request_pb, timeout=10)
            with pytest.raises(grpc.RpcError) as refused:
                stub.Export(request_pb, timeout=10)
        status = get_json(svc, "/api/tacit/status")
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    detail = rpc_status.from_call(refused.value).details[0]
    info = error_details_pb2.RetryInfo()
    assert detail.Unpack(info) and info.retry_delay.seconds == 2
    assert status["received"] == 512 and status["pending"] == 512


def test_health_and_readiness(tmp_path, request_pb):
    """Ready while reconstruction turns; not ready, saying so, while one of its turns takes
    longer than it may (a hang), and ready again once it ends."""
    with running(tmp_path) as svc:
        assert get(svc, "/healthz")[0] == 200
        assert get(svc, "/readyz")[:2] == (200, b"ready\n")
        release, pushed = threading.Event(), threading.Event()
        push = svc.reconstructor.feed.push

        def stuck(*args):
            pushed.set()
            release.wait(60)
            return push(*args)

        svc.reconstructor.stall_s = 0.5
        svc.reconstructor.feed.push = stuck
        assert post(svc, request_pb.SerializeToString(), "application/x-protobuf")[0] == 200
        assert pushed.wait(30)
        time.sleep(1.0)
        status, body, _ = get(svc, "/readyz")
        release.set()
        assert svc.wait_idle(30)
        assert get(svc, "/readyz")[0] == 200
    assert status == 503 and body.startswith(b"reconstruction has not moved on for "), body


def test_a_stop_does_not_wait_for_ever_on_a_turn_that_does_not_end(tmp_path, request_pb, caplog):
    release = threading.Event()
    svc = Service(config(tmp_path), shop_callgraph()).start()
    try:
        push = svc.reconstructor.feed.push
        svc.reconstructor.feed.push = lambda *args: release.wait(120) and push(*args)
        svc.reconstructor.stop_s = 1.0
        assert post(svc, request_pb.SerializeToString(), "application/x-protobuf")[0] == 200
        began = time.monotonic()
        svc.stop()
        waited = time.monotonic() - began
    finally:
        release.set()
    assert waited < 60
    assert "reconstruction did not stop within 1 s" in caplog.text


def test_a_failing_store_is_answered_not_dropped(tmp_path, request_pb):
    """503 for an export (the sender retries it), 500 for a query; never a closed connection."""

    def disk_full(request):
        raise OSError(errno.ENOSPC, "No space left on device")

    with running(tmp_path, online=SLOW) as svc:
        for cur in svc.store._cursors:
            cur.close()
        svc.store._con.close()
        svc.store._journal.append = disk_full
        assert post(svc, request_pb.SerializeToString(), "application/x-protobuf")[0] == 503
        assert get(svc, "/api/services")[0] == 500
        svc.store = type(svc.store)(tmp_path / "again.duckdb")  # for the service's own stop


def test_a_gzip_body_that_inflates_without_end_is_refused(tmp_path, request_pb):
    """As are one cut short, one with bytes after its end, and a request with two
    Content-Length headers (which frames the body?)."""
    from tacit.serve.ingest import MAX_BODY

    bomb = gzip.compress(b"\0" * (MAX_BODY + 1024), compresslevel=9)
    valid = request_pb.SerializeToString()
    gz = {"Content-Encoding": "gzip"}
    with running(tmp_path, online=SLOW) as svc:
        status, body, _ = post(svc, bomb, "application/x-protobuf", **gz)
        truncated = post(svc, bomb[:100], "application/x-protobuf", **gz)
        trailing = post(svc, gzip.compress(valid) + b"junk", "application/x-protobuf", **gz)
        connection = http.client.HTTPConnection("127.0.0.1", svc.http_port, timeout=30)
        connection.putrequest("POST", "/v1/traces")
        for header, value in (
            ("Content-Type", "application/x-protobuf"),
            ("Content-Length", str(len(valid))),
            ("Content-Length", str(len(valid) - 10)),
        ):
            connection.putheader(header, value)
        connection.endheaders(valid)
        twice = connection.getresponse()
        twice_body = twice.read()
        connection.close()
        stored = get_json(svc, "/api/tacit/status")["received"]
    assert status == 400 and "inflates beyond" in status_pb2.Status.FromString(body).message
    assert truncated[0] == 400
    assert trailing[0] == 400
    assert "4 bytes after its end" in status_pb2.Status.FromString(trailing[1]).message
    assert twice.status == 400
    assert twice_body == b"bad request: Duplicate Content-Length"  # the parser's reason
    assert stored == 0


EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


def test_a_small_body_that_decodes_to_millions_of_objects_is_refused(tmp_path):
    """8 KB of gzip that inflate to 8 MB of empty ResourceSpans (4 million objects to decode)
    are refused for their shape, by HTTP and by gRPC (whose requests are checked as the bytes
    that came, not decoded by gRPC first); bytes that are no request are INVALID_ARGUMENT over
    gRPC too. The service goes on."""
    inflated = b"\x0a\x00" * 4_000_000
    bomb = gzip.compress(inflated, compresslevel=9)
    assert len(bomb) < 10_000
    with running(tmp_path, online=SLOW) as svc:
        status, body, _ = post(svc, bomb, "application/x-protobuf", **{"Content-Encoding": "gzip"})
        with grpc.insecure_channel(f"127.0.0.1:{svc.grpc_port}") as channel:
            export = channel.unary_unary(EXPORT)
            with pytest.raises(grpc.RpcError) as refused:
                export(inflated, timeout=30)
            with pytest.raises(grpc.RpcError) as garbage:
                export(b"\xff\xff\xff", timeout=30)
        assert get(svc, "/readyz")[0] == 200
    message = status_pb2.Status.FromString(body).message
    assert status == 400 and "4,000,000 ResourceSpans and 0 ScopeSpans hold 0 spans" in message
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "4,000,000 ResourceSpans" in refused.value.details()
    assert garbage.value.code() == grpc.StatusCode.INVALID_ARGUMENT  # as over HTTP: 400
    assert "not a protobuf OTLP ExportTraceServiceRequest" in garbage.value.details()


def test_an_ingest_token_is_asked_of_senders_only(tmp_path, request_pb):
    """With ``ingest_token_file``, exports without its token are 401 / UNAUTHENTICATED and
    leave nothing behind; the SDK's exporter given the header gets through; queries stay
    open."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import SpanExportResult

    (tmp_path / "token").write_text("s3cret-token\n")
    body, pb = request_pb.SerializeToString(), "application/x-protobuf"
    bearer = "Bearer s3cret-token"
    with running(tmp_path, online=SLOW, ingest_token_file=tmp_path / "token") as svc:
        assert post(svc, body, pb)[0] == 401
        assert post(svc, body, pb, Authorization="Bearer wrong")[0] == 401
        assert post(svc, body, pb, Authorization=bearer)[0] == 200
        with grpc.insecure_channel(f"127.0.0.1:{svc.grpc_port}") as channel:
            stub = trace_service_pb2_grpc.TraceServiceStub(channel)
            with pytest.raises(grpc.RpcError) as refused:
                stub.Export(request_pb, timeout=10)
            stub.Export(request_pb, timeout=10, metadata=(("authorization", bearer),))
        exporter = OTLPSpanExporter(
            endpoint=f"http://127.0.0.1:{svc.http_port}/v1/traces",
            headers={"Authorization": bearer},
        )
        spans = sdk_spans(shop_spans(2).take(np.arange(100)), 0)
        assert exporter.export(spans) == SpanExportResult.SUCCESS
        assert get(svc, "/api/services")[0] == 200
        svc.store.settle()  # the journal into the ingest table
        stored = svc.store._cursor().execute("SELECT sum(spans) FROM ingest").fetchone()[0]
        metrics = get(svc, "/metrics")[1].decode()
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert stored == 2 * 512 + 100
    assert 'tacit_requests_refused_total{reason="unauthenticated",transport="http"} 2.0' in metrics
    assert 'tacit_requests_refused_total{reason="unauthenticated",transport="grpc"} 1.0' in metrics


def _read(svc: Service, path: str, authorization: str | None) -> int:
    """The status of a GET of ``path`` with that ``Authorization`` header (none: without)."""
    headers = {} if authorization is None else {"Authorization": authorization}
    request = urllib.request.Request(url(svc, path), headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as r:
            return r.status
    except urllib.error.HTTPError as e:
        assert e.code != 401 or e.headers["WWW-Authenticate"].startswith("Basic realm=")
        return e.code


def test_a_query_token_is_asked_of_readers_but_not_of_health_checks(tmp_path, request_pb):
    """With ``query_token_file``, every GET but /healthz and /readyz needs its token, as a
    bearer token or as the password of Basic authentication (a browser's prompt, Grafana's and
    Prometheus's settings) under any user name; senders need none of it."""
    (tmp_path / "reader").write_text("r3ad-only\n")
    basic = "Basic " + base64.b64encode(b"grafana:r3ad-only").decode()
    wrong = "Basic " + base64.b64encode(b"grafana:r3ad-onlx").decode()
    with running(tmp_path, online=SLOW, query_token_file=tmp_path / "reader") as svc:
        assert post(svc, request_pb.SerializeToString(), "application/x-protobuf")[0] == 200
        for path in ("/", "/app.js", "/api/services", "/api/traces?service=frontend", "/metrics"):
            assert _read(svc, path, None) == 401, path
            assert _read(svc, path, wrong) == 401, path
            assert _read(svc, path, "Bearer r3ad-onlx") == 401, path
            assert _read(svc, path, basic) == 200, path
            assert _read(svc, path, "Bearer r3ad-only") == 200, path
        assert _read(svc, "/api/services", "Basic !!!") == 401  # not base64
        assert _read(svc, "/healthz", None) == _read(svc, "/readyz", None) == 200


@pytest.mark.parametrize("field", ["ingest_token_file", "query_token_file"])
@pytest.mark.parametrize("text", ["", "\n  \n", "two words\n"])
def test_a_token_file_without_one_token_is_a_configuration_error(tmp_path, field, text):
    (tmp_path / "token").write_text(text)
    with pytest.raises(ConfigError, match=f"{field}: .* must hold one token"):
        Service(config(tmp_path, **{field: tmp_path / "token"}), shop_callgraph())
    with pytest.raises(ConfigError, match=f"{field}: cannot read"):
        Service(config(tmp_path, **{field: tmp_path / "absent"}), shop_callgraph())


def test_many_clients_at_once_are_all_served_and_idle_ones_let_go(tmp_path, monkeypatch):
    """300 clients connecting at once are each answered; 300 connections held open, idle or
    sending a request's head a byte at a time, hold no thread, and each is closed once its
    head has not come whole within the idle timeout."""
    from tacit.serve import http_bounds

    monkeypatch.setattr(http_bounds, "IDLE_TIMEOUT_S", 1)
    head = b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    with running(tmp_path, online=SLOW) as svc:
        threads = threading.active_count()
        idle = [socket.create_connection(("127.0.0.1", svc.http_port), timeout=30)]
        idle += [socket.create_connection(("127.0.0.1", svc.http_port)) for _ in range(149)]
        slow = [socket.create_connection(("127.0.0.1", svc.http_port)) for _ in range(150)]
        with ThreadPoolExecutor(300) as pool:
            answers = list(pool.map(lambda _: get(svc, "/healthz")[0], range(300)))
        held = threading.active_count() - threads
        ended = set()
        for i in range(len(head)):  # a byte every 0.2 s: the head would take 13 s
            for n, s in enumerate(slow):
                try:
                    s.send(head[i : i + 1])
                except OSError:
                    ended.add(n)
            if len(ended) == len(slow):
                break
            time.sleep(0.2)
        assert answers == [200] * 300
        assert idle[0].recv(1) == b""  # closed by the service, not by this side's timeout
        for s in idle + slow:
            s.close()
    assert held < 20  # the test's own pool has ended; the service's workers are bounded
    assert len(ended) == len(slow)


def test_one_address_holds_at_most_its_share_of_the_connections(tmp_path, monkeypatch):
    """One client address may hold 1/PEER_SHARE of the connections: beyond it, that address is
    told to retry, while another is still served, and once it lets some go it is served
    again."""
    from tacit.serve import http_bounds

    monkeypatch.setattr(http_bounds, "MAX_CONNECTIONS", 4 * http_bounds.PEER_SHARE)
    head = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
    with running(tmp_path, online=SLOW) as svc:
        server = ("127.0.0.1", svc.http_port)
        held = [socket.create_connection(server, timeout=30) for _ in range(4)]
        one_more = _exchange(svc.http_port, head)
        other = socket.create_connection(server, timeout=30, source_address=("127.0.0.2", 0))
        other.sendall(head)
        from_another = other.recv(65536)
        other.close()
        held.pop().close()
        for _ in range(100):  # until the service has noticed the close
            after = _exchange(svc.http_port, head)
            if not after.startswith(b"HTTP/1.1 503"):
                break
            time.sleep(0.1)
        for s in held:
            s.close()
    assert one_more.startswith(b"HTTP/1.1 503") and b"retry-after: 1" in one_more.lower()
    assert b"from this address" in one_more
    assert from_another.startswith(b"HTTP/1.1 200")
    assert after.startswith(b"HTTP/1.1 200")


def _exchange(port: int, head: bytes, body: bytes = b"") -> bytes:
    """What the service answers to ``head``, then ``body`` once it has said ``100 Continue``."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(head)
        answer = s.recv(65536)
        if answer.startswith(b"HTTP/1.1 100"):
            s.sendall(body)
            answer += s.recv(65536)
        return answer


def test_bodies_chunked_too_large_or_awaiting_100_continue(tmp_path, request_pb):
    """A chunked body is taken; a Content-Length beyond the largest body is 413 before the body
    is sent; a client that waits for ``100 Continue`` (curl does, for large bodies) gets it; a
    method other than GET and POST is 405, and so is a GET of the OTLP receiver."""
    from tacit.serve.ingest import MAX_BODY

    valid = request_pb.SerializeToString()
    post_head = b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
    with running(tmp_path, online=SLOW) as svc:
        connection = http.client.HTTPConnection("127.0.0.1", svc.http_port, timeout=30)
        connection.request(
            "POST",
            "/v1/traces",
            body=iter([valid[:10], valid[10:]]),
            headers={"Content-Type": "application/x-protobuf"},
            encode_chunked=True,
        )
        chunked = connection.getresponse().status
        connection.close()
        too_large = _exchange(
            svc.http_port, post_head + b"Content-Length: %d\r\n\r\n" % (MAX_BODY + 1)
        )
        expect = b"Expect: 100-continue\r\nContent-Length: %d\r\n\r\n" % len(valid)
        continued = _exchange(svc.http_port, post_head + expect, valid)
        put = _exchange(svc.http_port, b"PUT /v1/traces HTTP/1.1\r\nHost: x\r\n\r\n")
        got = get(svc, "/v1/traces")
        received = get_json(svc, "/api/tacit/status")["received"]
    assert chunked == 200
    assert too_large.startswith(b"HTTP/1.1 413")
    assert continued.startswith(b"HTTP/1.1 100") and b"HTTP/1.1 200" in continued
    assert put.startswith(b"HTTP/1.1 405") and b"allow: get, post" in put.lower()
    assert got[0] == 405 and got[2]["Allow"] == "POST"
    assert received == 2 * 512


def test_a_long_head_a_long_chunked_body_and_a_stalled_body_end_their_requests(
    tmp_path, monkeypatch
):
    """A head beyond the largest is 431; a chunked body (no length to refuse it by) is 413 once
    it grows beyond the largest body; a body that pauses beyond the idle timeout has its
    connection closed without an answer; a valid request is answered meanwhile."""
    from tacit.serve import http_bounds

    monkeypatch.setattr(http_bounds, "MAX_HEAD", 1024)
    monkeypatch.setattr(http_bounds, "MAX_BODY", 4096)
    monkeypatch.setattr(http_bounds, "IDLE_TIMEOUT_S", 1)
    post_head = b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
    with running(tmp_path, online=SLOW) as svc:
        long_head = _exchange(svc.http_port, b"GET /healthz HTTP/1.1\r\nX: %s\r\n" % (b"a" * 2000))
        chunk = b"1000\r\n" + b"\0" * 4096 + b"\r\n"
        long_body = _exchange(
            svc.http_port, post_head + b"Transfer-Encoding: chunked\r\n\r\n" + chunk * 2
        )
        with socket.create_connection(("127.0.0.1", svc.http_port), timeout=30) as s:
            s.sendall(post_head + b"Content-Length: 100\r\n\r\n" + b"\0" * 10)
            began = time.monotonic()
            stalled = s.recv(65536)
            stalled_s = time.monotonic() - began
        healthy = get(svc, "/healthz")[0]
    assert long_head.startswith(b"HTTP/1.1 431")
    assert long_body.startswith(b"HTTP/1.1 413")
    assert stalled == b"" and stalled_s < 20  # closed by the service, not by this side's timeout
    assert healthy == 200
