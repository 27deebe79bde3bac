"""Spans from packets as a source of ``tacit serve``: every exchange of a capture file taken
in, reconstructed as accurately as offline on the same spans, against the app's own log;
read once across restarts."""

from __future__ import annotations

import http.client
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from app_captures import pong_server
from capture_probe import needs_capture
from serve_app import QUICK, config, get_json, running, until
from tacit.evaluation.capture_accuracy import call_accuracy, label_capture, stored_parents
from tacit.formats.capture_spans import NO_RESPONSE, ServiceMap, read_capture_spans
from tacit.formats.exchanges import ExchangeParams
from tacit.formats.pcap_write import write_pcap
from tacit.model.spans import NONE
from tacit.reconstruct.isolated import callgraph_from_test_capture
from tacit.reconstruct.online import reconstruct_streamed
from tacit.serve import Service
from tacit.simulate import load_app, simulate
from tacit.simulate.app_packets import REQUEST_ID, app_packets


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    """A test capture (requests one at a time), a production capture, the service names, and
    the production capture's truth: its spans with their parents from the app's log."""
    tmp = tmp_path_factory.mktemp("capture-source")
    app = load_app(None)
    made = {}
    for name, spans in (
        ("test", simulate(app, 2, n_requests=60, seed=5)),
        ("prod", simulate(app, 100, n_requests=250, seed=7)),
    ):
        made[name] = app_packets(spans)
        write_pcap(tmp / f"{name}.pcap", made[name].frames, made[name].times)
    addresses = made["prod"].service_map()
    (tmp / "services.yaml").write_text(yaml.safe_dump(dict(addresses)))
    names = ServiceMap(addresses=addresses)
    callgraph, _ = callgraph_from_test_capture(tmp / "test.pcap", names)
    got = read_capture_spans(
        tmp / "prod.pcap", names, params=ExchangeParams(keep_headers=(REQUEST_ID,))
    )
    truth, labels = label_capture(got, REQUEST_ID, made["prod"].parent_of())
    assert labels.parents_missing == 0 and labels.labelled == len(got.spans) // 2
    return tmp, callgraph, truth


def _stored(svc: Service) -> list:
    return (
        svc.store._cursor()
        .execute("SELECT service, kind, start_ns, duration_ns, span_id, parent_span_id FROM spans")
        .fetchall()
    )


def _wait(svc: Service) -> dict:
    until(svc.captures[0].finished.is_set, 60, 0.05)
    assert svc.wait_idle(60)
    return get_json(svc, "/api/tacit/status")


def test_a_capture_file_is_reconstructed_as_accurately_as_offline(app) -> None:
    tmp, callgraph, truth = app
    cfg = config(
        tmp / "one",
        capture_pcap=tmp / "prod.pcap",
        capture_services=tmp / "services.yaml",
        idle_s=10.0,  # a reader held back by a busy machine must not move the clock on
    )
    (tmp / "one").mkdir()
    svc = Service(cfg, callgraph).start()
    try:
        status = _wait(svc)
        stored = _stored(svc)
    finally:
        svc.stop()
    source = status["capture"][0]
    n = len(truth)
    assert source["error"] is None and source["spans"] == n
    assert source["exchanges"] == {"exchanges": n // 2, "paired": n // 2, "spans": n,
                                   "left_out": {}}  # fmt: skip
    assert status["received"] == n and status["stored"]["spans"] == n
    served = call_accuracy(truth, stored_parents(truth, stored))  # every span stored
    blind = truth.take(np.arange(n))
    blind.parent[:] = NONE
    offline = call_accuracy(truth, reconstruct_streamed(blind, callgraph, online=QUICK).parent)
    assert served >= 0.95, served
    assert abs(served - offline) <= 0.01, (served, offline)


def test_a_restart_does_not_take_a_capture_file_twice(app) -> None:
    tmp, callgraph, truth = app
    cfg = config(
        tmp / "twice", capture_pcap=tmp / "prod.pcap", capture_services=tmp / "services.yaml"
    )
    (tmp / "twice").mkdir()
    for run in range(2):
        svc = Service(cfg, callgraph).start()
        try:
            status = _wait(svc)
        finally:
            svc.stop()
        assert status["capture"][0]["spans"] == (len(truth) if run == 0 else 0)
        assert status["stored"]["spans"] == len(truth)


@pytest.mark.live
@needs_capture(tool=False)
def test_a_live_capture_on_loopback_is_taken_in(tmp_path: Path) -> None:
    """HTTP/1.1 requests on one keep-alive connection to a server on loopback, captured live:
    every exchange becomes a span pair in the store, across the live batches."""
    requests = 40
    with pong_server() as port:
        (tmp_path / "services.yaml").write_text(f'":{port}": pong\n')
        live = {"capture_interface": "lo", "capture_filter": f"tcp port {port}"}
        names = tmp_path / "services.yaml"
        with running(tmp_path, capture_services=names, **live) as svc:
            client = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            for _ in range(requests):
                client.request("GET", "/ping")
                assert client.getresponse().read() == b"pong"
                time.sleep(0.02)  # across several of the feed's reads
            assert until(
                lambda: get_json(svc, "/api/tacit/status")["capture"][0]["spans"] >= 2 * requests,
                30,
            )
            client.close()
            assert svc.wait_idle(30)
            (source,) = get_json(svc, "/api/tacit/status")["capture"]
            stored = svc.store.counts()["spans"]
    assert source["source"] == "live:lo" and source["error"] is None
    assert source["exchanges"]["paired"] == requests and source["unparsed_bytes"] == {}
    assert source["live"]["dropped"] == 0 and source["live"]["delivered"] == source["packets"]
    assert stored == 2 * requests


def test_a_capture_file_corrupt_midway_gives_what_came_before(app) -> None:
    """A record with an impossible length halfway: the source ends with the error in its
    status, the exchanges before it are taken (those still open at the cut counted as without
    response), and the service goes on."""
    tmp, callgraph, truth = app
    data = bytearray((tmp / "prod.pcap").read_bytes())
    pos, records = 24, 0
    while records < 2_000:  # record headers: ts_sec, ts_frac, incl_len, orig_len
        pos += 16 + int.from_bytes(data[pos + 8 : pos + 12], "little")
        records += 1
    data[pos + 8 : pos + 12] = (0xFFFFFFF0).to_bytes(4, "little")
    (tmp / "broken.pcap").write_bytes(bytes(data))
    (tmp / "broken").mkdir()
    cfg = config(
        tmp / "broken", capture_pcap=tmp / "broken.pcap", capture_services=tmp / "services.yaml"
    )
    svc = Service(cfg, callgraph).start()
    try:
        status = _wait(svc)
        alive = svc.problem() is None
    finally:
        svc.stop()
    (source,) = status["capture"]
    x = source["exchanges"]
    assert "record 2000: impossible record length" in source["error"] and alive
    assert 0 < source["spans"] == x["spans"] == status["stored"]["spans"] < len(truth)
    assert x["exchanges"] == x["paired"] + sum(x["left_out"].values())
    assert x["left_out"][NO_RESPONSE] > 0  # open at the cut: counted, not lost
