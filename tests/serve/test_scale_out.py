"""``tacit serve`` as roles: ingest replicas appending to the shared log (NATS JetStream), the
reconstruct role reading it, its rounds on a Dask cluster; against one process given the same
requests in the log's order."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import duckdb
import pytest

from serve_app import config, running, shop_callgraph, shop_spans
from tacit.experiment.capture import stop_process
from tacit.experiment.memcached import free_port
from tacit.experiment.nats_server import nats_unavailable, start_nats
from tacit.experiment.otlp_load import encoded_requests, post_requests
from tacit.serve import Service
from tacit.serve.ingest_replica import IngestReplica

_COLUMNS = "span_id, parent_span_id, score, probability, alternatives, unmapped, link"


@pytest.fixture
def nats_url(tmp_path):
    reason = nats_unavailable()
    if reason:
        pytest.skip(reason)
    port = free_port()
    proc = start_nats(port, tmp_path / "jetstream")
    yield f"nats://127.0.0.1:{port}"
    stop_process(proc)


def _spans(svc: Service) -> list[tuple]:
    return svc.store._cursor().execute(f"SELECT {_COLUMNS} FROM spans ORDER BY span_id").fetchall()


def _send_split(requests, ports: list[int]) -> int:
    """Send ``requests`` in turn to each of ``ports`` at once, as a load balancer spreads
    them; the spans acknowledged."""
    acknowledged = []

    def send(share, port):
        log = post_requests(share, f"http://127.0.0.1:{port}/v1/traces", connections=1)
        acknowledged.append(log.acknowledged)

    threads = [
        threading.Thread(target=send, args=(requests[i :: len(ports)], port))
        for i, port in enumerate(ports)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(acknowledged)


def _wait_taken(svc: Service, spans: int, timeout_s: float = 60) -> None:
    end = time.monotonic() + timeout_s
    while svc.ingest.next_seq < spans and time.monotonic() < end:
        time.sleep(0.1)
    assert svc.ingest.next_seq == spans
    assert svc.wait_idle(timeout_s)


def test_two_ingest_replicas_and_rounds_on_dask_store_what_one_process_stores(tmp_path, nats_url):
    distributed = pytest.importorskip("distributed")
    requests = encoded_requests(shop_spans(3))
    total = sum(n for n, _ in requests)
    replicas = [
        IngestReplica(config(tmp_path / f"r{i}", role="ingest", log=nats_url)).start()
        for i in range(2)
    ]
    try:
        acknowledged = _send_split(requests, [r.http_port for r in replicas])
    finally:
        for r in replicas:
            r.stop()
    assert acknowledged == total
    (tmp_path / "driver").mkdir()
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    ) as cluster:
        changes = {"role": "reconstruct", "log": nats_url, "dask": cluster.scheduler_address}
        with running(tmp_path / "driver", **changes) as driver:
            _wait_taken(driver, total)
            there = _spans(driver)
            logged = (
                driver.store._cursor()
                .execute("SELECT encoding, body FROM ingest ORDER BY first_seq")
                .fetchall()
            )
            status = driver.extra("/api/tacit/status", {})
    assert status["log"]["taken"] == len(requests)
    (tmp_path / "one").mkdir()
    with running(tmp_path / "one") as one:
        assert [e for e, _ in logged] == ["protobuf"] * len(requests)
        in_log_order = [(0, bytes(body)) for _, body in logged]
        post_requests(in_log_order, f"http://127.0.0.1:{one.http_port}/v1/traces", connections=1)
        _wait_taken(one, total)
        here = _spans(one)
    assert len(there) == total
    assert there == here


def _start(args: list[str], log_to: Path) -> subprocess.Popen:
    with log_to.open("ab") as out:
        return subprocess.Popen(args, stdout=out, stderr=out, start_new_session=True)


def _wait_http(port: int, path: str = "/readyz", timeout_s: float = 60) -> None:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2):
                return
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"nothing ready on port {port}")


def _post(port: int, body: bytes) -> bool:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/traces",
        data=body,
        headers={"Content-Type": "application/x-protobuf"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            return r.status == 200
    except OSError:
        return False


def _status(port: int) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/tacit/status", timeout=10) as r:
        return json.loads(r.read())


@pytest.mark.live
def test_kill_9_of_a_replica_a_worker_and_the_driver_loses_nothing_and_stores_nothing_twice(
    tmp_path, nats_url
):
    """Each process killed mid-stream: an ingest replica (its senders go on to the other, as
    a load balancer sends them, and a request it had logged without answering is logged
    once), a Dask worker (its tasks run again elsewhere) and the reconstruct role (restarted,
    it reads on from its position and restores what it had not reconstructed)."""
    pytest.importorskip("distributed")
    tacit, dask = (
        str(Path(sys.executable).parent / "tacit"),
        str(Path(sys.executable).parent / "dask"),
    )
    logs = tmp_path / "processes.log"
    encoded = encoded_requests(shop_spans(8))
    requests = [body for _, body in encoded]
    shop_callgraph().save(tmp_path / "callgraph.yaml")
    (tmp_path / "serve.yaml").write_text(
        "online: {window_s: 1, lookahead_s: 1, max_request_s: 2, lateness_s: 0.1}\nidle_s: 2\n"
    )
    scheduler_port = free_port()
    scheduler = f"tcp://127.0.0.1:{scheduler_port}"
    procs = {"scheduler": _start([dask, "scheduler", "--port", str(scheduler_port),
                                  "--no-dashboard"], logs)}  # fmt: skip
    for w in range(2):
        procs[f"worker{w}"] = _start(
            [dask, "worker", scheduler, "--nthreads", "1", "--no-dashboard"], logs
        )
    ports = [free_port() for _ in range(3)]
    common = ["serve", "--config", str(tmp_path / "serve.yaml"), "--grpc", "", "--log", nats_url]
    for i in range(2):
        procs[f"replica{i}"] = _start(
            [tacit, *common, "--role", "ingest", "--http", f"127.0.0.1:{ports[i]}"], logs
        )
    driver = [tacit, *common, "--role", "reconstruct", "--http", f"127.0.0.1:{ports[2]}",
              "--dask", scheduler, "--callgraph", str(tmp_path / "callgraph.yaml"),
              "--database", str(tmp_path / "tacit.duckdb")]  # fmt: skip
    procs["driver"] = _start(driver, logs)
    try:
        for port in ports:
            _wait_http(port)
        alive = [ports[0], ports[1]]
        for k, body in enumerate(requests):
            if k == len(requests) // 4:
                procs["replica0"].kill()
                procs["replica0"].wait()
            if k == len(requests) // 3:
                procs["worker0"].kill()
            if k == len(requests) // 2:
                procs["driver"].kill()
                procs["driver"].wait()
                procs["driver"] = _start(driver, logs)
            while not _post(alive[k % len(alive)], body):  # the balancer tries the other
                alive = [p for p in alive if _post_alive(p)] or alive
            time.sleep(0.05)
        _wait_http(ports[2])
        total = sum(len(b) > 0 for b in requests)
        end = time.monotonic() + 120
        while time.monotonic() < end:
            status = _status(ports[2])
            if status["log"]["position"] > total and status["pending"] == 0:
                break
            time.sleep(0.5)
        stop_process(procs.pop("driver"))
    finally:
        for proc in procs.values():
            stop_process(proc, signal.SIGKILL)
    sent = sum(n for n, _ in encoded)
    with duckdb.connect(str(tmp_path / "tacit.duckdb"), read_only=True) as db:
        stored, distinct = db.execute(
            "SELECT count(*), count(DISTINCT span_id) FROM spans"
        ).fetchone()
        traces, distinct_traces = db.execute(
            "SELECT count(*), count(DISTINCT trace_id) FROM traces"
        ).fetchone()
        taken, distinct_bodies = db.execute(
            "SELECT count(*), count(DISTINCT body) FROM ingest"
        ).fetchone()
    assert (stored, distinct) == (sent, sent), logs.read_text()[-3000:]
    assert traces == distinct_traces > 0
    assert taken == distinct_bodies == len(requests)  # each request taken in once


def _post_alive(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2):
            return True
    except OSError:
        return False
