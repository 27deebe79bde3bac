"""``kill -9`` and SIGTERM of ``tacit serve``: nothing acknowledged is lost, and a restart
resumes online reconstruction where the previous run stopped."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

from clirun import TACIT
from serve_app import shop_callgraph, shop_spans, until
from tacit.experiment.memcached import free_port
from tacit.experiment.otlp_load import BATCH, sdk_spans
from tacit.serve.store import Store

CONFIG = """\
http: 127.0.0.1:{port}
grpc: ""
database: tacit.duckdb
callgraph: callgraph.yaml
online: {{window_s: 1, lookahead_s: 1, max_request_s: 2, lateness_s: 0.1}}
"""


class Server:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.port = free_port()
        shop_callgraph().save(tmp / "callgraph.yaml")
        (tmp / "serve.yaml").write_text(CONFIG.format(port=self.port))
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [str(TACIT), "serve", "--config", str(self.tmp / "serve.yaml")],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(self.url("/readyz"), timeout=1) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.1)
        raise AssertionError(f"tacit serve did not become ready: {self.proc.stderr}")

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def status(self) -> dict:
        with urllib.request.urlopen(self.url("/api/tacit/status"), timeout=10) as r:
            return json.loads(r.read())

    def wait_idle(self, timeout_s: float = 60) -> dict:
        deadline = time.monotonic() + timeout_s
        while (status := self.status())["pending"] and time.monotonic() < deadline:
            time.sleep(0.2)
        return status

    def stop(self, sig: int) -> subprocess.CompletedProcess:
        assert self.proc is not None
        self.proc.send_signal(sig)
        out, err = self.proc.communicate(timeout=60)
        return subprocess.CompletedProcess(self.proc.args, self.proc.returncode, out, err)


def _stored(tmp: Path) -> tuple[int, int, set[str]]:
    import duckdb

    con = duckdb.connect(str(tmp / "tacit.duckdb"), read_only=True)
    n, distinct = con.execute("SELECT count(*), count(DISTINCT seq) FROM spans").fetchone()
    ids = {r[0] for r in con.execute("SELECT span_id FROM spans").fetchall()}
    con.close()
    return n, distinct, ids


def _reap(server: Server) -> None:
    """Kill ``server``'s process if a test left it running (it failed midway)."""
    if server.proc is not None and server.proc.poll() is None:
        server.proc.kill()
        server.proc.wait()


@pytest.fixture
def server(tmp_path):
    """A ``tacit serve`` to start, with its files in ``tmp_path``."""
    made = Server(tmp_path)
    yield made
    _reap(made)


def test_kill_9_mid_stream_loses_nothing_acknowledged(tmp_path, server):
    """Nor stores twice a request that was journaled but not answered, and then resent."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import SpanExportResult

    spans = shop_spans(4)
    order = np.argsort(spans.end, kind="stable")
    readable = sdk_spans(spans, time.time_ns() - int(spans.start.min()))
    batches = [order[a : a + BATCH] for a in range(0, len(order), BATCH)]
    server.start()
    acked: list[int] = []
    refused: list[np.ndarray] = []
    exporter = OTLPSpanExporter(endpoint=server.url("/v1/traces"), timeout=1)
    for k, rows in enumerate(batches):
        if k == len(batches) // 2:
            server.proc.kill()  # SIGKILL: no flush, no goodbye
            server.proc.wait()
        ok = exporter.export([readable[r] for r in rows]) == SpanExportResult.SUCCESS
        (acked.extend(rows.tolist()) if ok else refused.append(rows))
    assert refused, "the sender must have seen the server die"
    # the first refused request as a kill between its journaling and its answer leaves it
    store = Store(tmp_path / "tacit.duckdb")
    body = encode_spans([readable[r] for r in refused[0]]).SerializeToString()
    store.append_request(store.next_seq(), len(refused[0]), time.time_ns(), "protobuf", body)
    store.close()
    server.start()  # same database: resumes what was acknowledged and not yet finished
    exporter = OTLPSpanExporter(endpoint=server.url("/v1/traces"), timeout=10)
    for rows in refused:  # the sender retries what was not acknowledged
        assert exporter.export([readable[r] for r in rows]) == SpanExportResult.SUCCESS
        acked.extend(rows.tolist())
    status = server.wait_idle()
    server.stop(signal.SIGTERM)
    n, distinct, ids = _stored(tmp_path)
    s = spans.strings
    sent_ids = {s[int(spans.span_id[r])] for r in acked}
    assert status["pending"] == 0
    assert status["duplicates"] == len(refused[0])  # journaled, then resent: stored once
    assert n == distinct == len(spans)
    assert sent_ids <= ids


def test_sigterm_flushes_and_the_restart_resumes_pending_spans(tmp_path, server):
    spans = shop_spans(3)
    server.start()
    from tacit.experiment.otlp_load import send_spans

    log = send_spans(spans, server.url("/v1/traces"))
    assert log.acknowledged == len(spans)
    done = server.stop(signal.SIGTERM)
    assert done.returncode == 0, done.stderr
    n, _, _ = _stored(tmp_path)
    assert n < len(spans), "some spans must still be waiting for their window at shutdown"
    server.start()
    assert "spans resumed" in _first_line_with(server, "serving")
    status = server.wait_idle()
    server.stop(signal.SIGTERM)
    assert status["pending"] == 0
    assert _stored(tmp_path)[0] == len(spans)


def _first_line_with(server: Server, word: str) -> str:
    assert server.proc is not None and server.proc.stderr is not None
    for line in server.proc.stderr:
        if word in line:
            return line
    pytest.fail(f"no line with {word!r} on stderr")


@pytest.fixture
def small_disk(tmp_path):
    """A filesystem of 64 MiB of its own, to fill."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(disk)], capture_output=True
    )
    if mounted.returncode:
        pytest.skip(f"a small filesystem cannot be mounted here: {mounted.stderr.decode()}")
    yield disk
    subprocess.run(["umount", "-l", str(disk)], check=True)


@pytest.fixture
def disk_server(small_disk):
    """``tacit serve`` with its store on :func:`small_disk`, killed if a test leaves it."""
    made = Server(small_disk)
    made.start()
    yield made
    _reap(made)


def _readiness(server: Server) -> int:
    try:
        with urllib.request.urlopen(server.url("/readyz"), timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def _post(server: Server, spans: list) -> int:
    """The status of one export request of ``spans``, as the SDK's exporter encodes them."""
    request = urllib.request.Request(
        server.url("/v1/traces"),
        data=encode_spans(spans).SerializeToString(),
        headers={"Content-Type": "application/x-protobuf"},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as r:
            return r.status
    except urllib.error.HTTPError as e:
        assert e.code != 503 or e.headers["Retry-After"]
        return e.code


def test_a_full_disk_is_answered_503_and_the_service_goes_on_once_there_is_room(disk_server):
    """With its store on a full filesystem the service stays up: exports are answered 503
    (the exporter retries), readiness says why; once space is freed, it takes and stores again,
    and every span it acknowledged is stored."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import SpanExportResult

    spans = shop_spans(4)
    order = np.argsort(spans.end, kind="stable")
    readable = sdk_spans(spans, time.time_ns() - int(spans.start.min()))
    batches = [order[a : a + BATCH] for a in range(0, len(order), BATCH)]
    server = disk_server
    small_disk = server.tmp
    room = os.statvfs(small_disk)
    (small_disk / "filler").write_bytes(bytes(room.f_bavail * room.f_frsize - 256 * 1024))
    acked: list[int] = []
    waiting = list(batches)
    answers = []
    while waiting and 503 not in answers:
        answers.append(_post(server, [readable[r] for r in waiting[0]]))
        if answers[-1] == 200:
            acked.extend(waiting.pop(0).tolist())
    assert answers[-1] == 503, "the disk must have filled before the spans were all sent"
    assert until(lambda: _readiness(server) == 503, 120, 0.2)
    (small_disk / "filler").unlink()
    assert until(lambda: _readiness(server) == 200, 120, 0.2)
    exporter = OTLPSpanExporter(endpoint=server.url("/v1/traces"), timeout=30)
    for rows in waiting:
        assert exporter.export([readable[r] for r in rows]) == SpanExportResult.SUCCESS
        acked.extend(rows.tolist())
    status = server.wait_idle()
    done = server.stop(signal.SIGTERM)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    n, distinct, _ = _stored(small_disk)
    assert status["pending"] == 0
    assert n == distinct == len(acked) == len(spans)
