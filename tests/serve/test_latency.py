"""The latency series of ``tacit serve``: Pirate's estimates from a capture file equal the batch
estimator's on the same file and score against the simulator's truth as Pirate does; RDA
agents' interval records round-trip through a followed file and a POST, malformed lines are
counted and kept, a restart neither loses nor repeats a line; all of it shows at /metrics."""

from __future__ import annotations

import json
import socket
import struct
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from capture_probe import needs_capture
from clirun import finish, one_error_line, start
from serve_app import config, get, get_json, running, shop_callgraph, url
from serve_latency import PIRATE, SIM, json_lines, pirate_capture, rda_records
from tacit.errors import ConfigError, InputError
from tacit.formats.pcap import read_packets
from tacit.response_latency import PirateParams, estimate_response_latency, score_estimates
from tacit.serve import Service, Store, load_config, trace_writer
from tacit.serve.replicas import QueryReplica

WAIT_S = 30
SECOND = 10**9
MALFORMED = ["not json at all", '{"interval": "7", "start_ns": 1, "end_ns": 2}', "[1, 2]"]


def _until(check: Any, what: str) -> None:
    end = time.monotonic() + WAIT_S
    while not check():
        if time.monotonic() > end:
            raise AssertionError(f"waited {WAIT_S} s for {what}")
        time.sleep(0.05)


def _metric(text: str, name: str, **labels: str) -> float:
    """The value of one sample in Prometheus' text format (which sorts the labels)."""
    pairs = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    key = name + ("{" + pairs + "}" if labels else "")
    for line in text.splitlines():
        if line.startswith(key + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no sample {key}")


@pytest.fixture(scope="module")
def capture(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return pirate_capture(tmp_path_factory.mktemp("pirate"))


@pytest.fixture(scope="module")
def agents(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return rda_records(tmp_path_factory.mktemp("rda"))


def test_pirate_estimates_are_the_batch_estimators_and_near_the_truth(
    tmp_path: Path, capture: Any
) -> None:
    path, sim = capture
    with running(tmp_path, pirate_pcap=path, pirate=PIRATE) as svc:
        (feed,) = svc.pirate
        _until(feed.finished.is_set, "the capture to be read")
        assert feed.error is None
        answer = get_json(svc, "/api/tacit/latency/response")
        metrics = get(svc, "/metrics")[1].decode()
        status = get_json(svc, "/api/tacit/status")

    read = read_packets(path)
    batch = estimate_response_latency(read.packets, PIRATE)
    assert len(batch) > 4 * SIM.clients
    rows = [{"source": str(path), **r} for r in batch.as_rows()]
    for r in rows:
        del r["connection"]
    key = ("epoch_start_ns", "source", "client")
    assert answer["data"] == sorted(rows, key=lambda r: tuple(r[k] for k in key))
    assert status["pirate"] == [
        {"source": str(path), "packets": len(read.packets), "estimates": len(batch),
         "live": None, "finished": True, "error": None}
    ]  # fmt: skip

    # The series: per server and epoch, the samples-weighted mean of the connections' estimates.
    (series,) = answer["series"]
    assert series["server"] == SIM.server
    by_epoch: dict[int, list[dict]] = {}
    for r in rows:
        by_epoch.setdefault(r["epoch_start_ns"], []).append(r)
    assert [p["epoch_start_ns"] for p in series["points"]] == sorted(by_epoch)
    for p in series["points"]:
        rs = by_epoch[p["epoch_start_ns"]]
        n = sum(r["samples"] for r in rs)
        assert p["samples"] == n and p["connections"] == len(rs)
        assert p["latency_ns"] == sum(r["latency_ns"] * r["samples"] for r in rs) // n

    # Against the simulator's truth: the mean latency of the requests completing in each
    # epoch. Algorithm 2 with the paper's parameters: median 0.019–0.030 on seeds 3–5 (the
    # relative error of the estimate against that mean); the bound leaves room, not a bias.
    t = sim.truth
    scored = score_estimates(
        batch, (t.client_hi, t.client_lo, t.client_port), t.seen_ns, t.latency_ns
    )
    assert scored.connections == SIM.clients
    assert scored.median_relative_error < 0.1

    # Every packet accounted for: the estimator's buckets partition the capture's IP packets.
    packets = answer["packets"][str(path)]
    assert sum(packets["estimator"].values()) == packets["capture"]["ip_packets"]
    assert sum(packets["capture"].values()) == read.accounting.records
    assert packets["estimator"]["used"] == batch.accounting.counts["used"]

    # Metrics: every estimate in the histogram; the gauge the latest epoch's weighted mean.
    server = {"server": SIM.server}
    assert _metric(metrics, "tacit_pirate_estimate_seconds_count", **server) == len(batch)
    assert _metric(metrics, "tacit_pirate_estimate_seconds_sum", **server) == pytest.approx(
        sum(r["latency_ns"] for r in rows) / 1e9
    )
    last = series["points"][-1]
    assert _metric(metrics, "tacit_pirate_latency_seconds", **server) == pytest.approx(
        last["latency_ns"] / 1e9, rel=1e-6
    )
    used = {"stage": "estimator", "bucket": "used"}
    assert _metric(metrics, "tacit_pirate_packets_total", **used) == packets["estimator"]["used"]


def _check_stored(rows: list[dict[str, Any]], records: list[dict[str, Any]], source: str) -> None:
    """The API's rows are the agent's interval records: every field kept, those a record lacks
    null, and the source and the time it was received added."""
    records = [r for r in records if "interval" in r]
    assert len(rows) == len(records)
    for row, record in zip(rows, records, strict=True):
        assert row["source"] == source and row["received_ns"] > 0
        assert {k: row[k] for k in record} == record
        assert all(row[k] is None for k in row.keys() - record.keys() - {"source", "received_ns"})


def test_rda_records_round_trip_through_a_followed_file_and_a_post(
    tmp_path: Path, agents: Any
) -> None:
    receiver, sender = agents
    intervals = [r for r in receiver if "interval" in r]
    assert len(intervals) == len(receiver) - 1 and receiver[-1]["summary"]
    results = tmp_path / "receiver.jsonl"
    lines = json_lines(receiver[:4]) + "\n".join(MALFORMED) + "\n\n" + json_lines(receiver[4:])
    results.write_text(lines[:-30])  # the last line not yet complete
    source = str(results)

    def answer(svc: Service) -> dict[str, Any]:
        return get_json(svc, "/api/tacit/latency/oneway")

    complete = lines.count("\n")
    with running(tmp_path, rda_results=(results,)) as svc:
        follower = svc.rda_files[0]
        _until(lambda: follower.file.line == complete - 1, "the complete lines")
        time.sleep(3 * 0.2)  # a few more polls: the incomplete line stays unread
        assert follower.file.line == complete - 1
        with results.open("a") as f:
            f.write(lines[-30:])
        _until(lambda: follower.file.line == complete, "the last line")
        got = answer(svc)
        metrics = get(svc, "/metrics")[1].decode()

        # A POST of the sender's records (the agent's own file as the body), twice: the second
        # replaces the first.
        body = json_lines(sender).encode()
        for _ in range(2):
            request = urllib.request.Request(
                url(svc, "/api/tacit/latency/oneway?source=path-a"), data=body
            )
            with urllib.request.urlopen(request, timeout=30) as r:
                posted = json.loads(r.read())
        assert posted == {
            "source": "path-a", "stored": len(sender) - 1, "summary": 1, "blank": 0,
            "malformed": 0, "rejected": [],
        }  # fmt: skip
        both = get_json(svc, "/api/tacit/latency/oneway?source=path-a")["data"]

    _check_stored(got["data"], receiver, source)
    assert got["rejected"] == {source: len(MALFORMED)}
    _check_stored(both, sender, "path-a")

    # Metrics: lines by result, intervals by status, the latest interval's mean and std.
    assert _metric(metrics, "tacit_rda_lines_total", result="stored") == len(intervals)
    assert _metric(metrics, "tacit_rda_lines_total", result="malformed") == len(MALFORMED)
    assert _metric(metrics, "tacit_rda_lines_total", result="summary") == 1
    assert _metric(metrics, "tacit_rda_lines_total", result="blank") == 1
    assert _metric(metrics, "tacit_rda_intervals_total", status="complete") == len(intervals)
    last = max(intervals, key=lambda r: r["interval"])
    assert _metric(metrics, "tacit_rda_mean_seconds", source=source) == pytest.approx(
        last["mean_ns"] / 1e9
    )
    assert _metric(metrics, "tacit_rda_std_seconds", source=source) == pytest.approx(
        last["std_ns"] / 1e9
    )

    # The malformed lines are kept with their line numbers and reasons, and logged.
    import duckdb

    with duckdb.connect(str(tmp_path / "tacit.duckdb"), read_only=True) as db:
        rejected = db.execute("SELECT line, reason FROM rda_rejected ORDER BY line").fetchall()
    assert [n for n, _ in rejected] == [5, 6, 7]
    assert rejected[0][1].startswith("not JSON")
    assert rejected[1][1] == "interval '7' is not an integer"
    assert rejected[2][1] == "not a JSON object"

    # A restart goes on from where the file was read: nothing read again, nothing lost.
    with results.open("a") as f:
        f.write(MALFORMED[0] + "\n")
    with running(tmp_path, rda_results=(results,)) as svc:
        _until(lambda: svc.rda_files[0].file.line == complete + 1, "the line added")
        again = get_json(svc, f"/api/tacit/latency/oneway?source={source}")
    assert again["data"] == got["data"]  # the same rows, not received again
    assert again["rejected"] == {source: len(MALFORMED) + 1}


def test_a_query_replica_answers_the_latency_series_as_the_store_does(
    tmp_path: Path, capture: Any, agents: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With blocks, the series are copied to them as they change: a query replica gives the
    store's answers, Pirate's from a capture file and RDA's posted, and their counts."""
    monkeypatch.setattr(trace_writer, "LATENCY_EXPORT_S", 0.1)
    path, _ = capture
    blocks = tmp_path / "blocks"
    paths = ["/api/tacit/latency/response", "/api/tacit/latency/oneway"]
    with running(tmp_path, pirate_pcap=path, pirate=PIRATE, blocks=blocks) as svc:
        _until(svc.pirate[0].finished.is_set, "the capture to be read")
        replica = QueryReplica(config(tmp_path, role="query", blocks=blocks)).start()
        try:
            request = urllib.request.Request(
                url(svc, "/api/tacit/latency/oneway?source=path-a"),
                data=json_lines(agents[1]).encode(),
            )
            urllib.request.urlopen(request, timeout=30).close()
            want = [get_json(svc, p) for p in paths]
            assert want[0]["data"] and want[1]["data"]
            _until(lambda: [get_json(replica, p) for p in paths] == want, "the replica's copy")
            stored = get_json(replica, "/api/tacit/status")["stored"]
            assert stored == svc.store.counts()
        finally:
            replica.stop()


def test_a_post_of_malformed_lines_is_answered_line_by_line(tmp_path: Path) -> None:
    with running(tmp_path) as svc:
        request = urllib.request.Request(
            url(svc, "/api/tacit/latency/oneway"), data="\n".join(MALFORMED).encode()
        )
        with urllib.request.urlopen(request, timeout=30) as r:
            answer = json.loads(r.read())
        refused = urllib.request.Request(url(svc, "/api/tacit/latency/oneway"), data=b"\xff\n")
        with pytest.raises(urllib.error.HTTPError) as bad:
            urllib.request.urlopen(refused, timeout=30)
    assert answer["stored"] == 0 and answer["malformed"] == len(MALFORMED)
    assert [r["line"] for r in answer["rejected"]] == [1, 2, 3]
    assert bad.value.code == 400


@needs_capture(tool=False)
def test_a_live_source_measures_a_servers_think_time(tmp_path: Path) -> None:
    """A server on loopback that answers every request after 30 ms; Pirate, given only the
    client-to-server packets captured live, sees the 30 ms."""
    delay_s, requests = 0.03, 30
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    took: list[float] = []  # each answer's delay as the server saw it (ms): more when busy

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            while conn.recv(4096):
                began = time.perf_counter()
                time.sleep(delay_s)
                took.append((time.perf_counter() - began) * 1e3)
                conn.sendall(bytes(3000))

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    live = {"pirate_interface": "lo", "pirate_filter": f"tcp dst port {port}"}
    live |= {"pirate_server": f"127.0.0.1:{port}", "pirate": PirateParams(epoch_ns=SECOND // 4)}
    with running(tmp_path, **live) as svc:
        began = time.perf_counter()
        with socket.create_connection(("127.0.0.1", port)) as client:
            for _ in range(requests):
                client.sendall(bytes(200))
                got = 0
                while got < 3000:
                    got += len(client.recv(65536))
        epochs = (time.perf_counter() - began) / 0.25 + 1  # at most, over the requests
        time.sleep(0.2)  # the last packets through the capture
        (source,) = get_json(svc, "/api/tacit/status")["pirate"]
        assert source["source"] == "live:lo" and source["error"] is None
        assert source["live"]["dropped"] == 0 and source["live"]["delivered"] > 0
    server.join(5)
    listener.close()
    store = Store(tmp_path / "tacit.duckdb")
    try:
        rows = store.pirate_estimates(None, None, None, 1000)
        packets = store.pirate_packets()["live:lo"]
    finally:
        store.close()
    assert {r[2] for r in rows} == {f"127.0.0.1:{port}"}
    samples = sum(r[6] for r in rows)
    assert samples >= requests - 1 - int(epochs)  # a gap a request after the first, but where
    # an epoch's end cuts one: a busy machine spreads the requests over more epochs
    mean_ms = sum(r[5] * r[6] for r in rows) / samples / 1e6
    assert delay_s * 1e3 <= mean_ms < max(took) + 5, (mean_ms, min(took), max(took))
    assert packets["estimator"].get("other_direction", 0) == 0  # the filter kept one direction
    assert sum(packets["estimator"].values()) == packets["capture"]["ip_packets"]


def test_the_options_are_read_from_the_file_and_checked(tmp_path: Path) -> None:
    (tmp_path / "serve.yaml").write_text(
        "pirate_pcap: a.pcap\npirate_server: 10.0.0.5:443\npirate_filter: tcp port 443\n"
        "pirate_epoch_s: 0.5\nrda_results: r.jsonl\n"
    )
    cfg = load_config(tmp_path / "serve.yaml")
    assert cfg.pirate_pcap == tmp_path / "a.pcap" and cfg.pirate_filter == "tcp port 443"
    assert cfg.pirate == PirateParams(epoch_ns=SECOND // 2)
    assert cfg.rda_results == (tmp_path / "r.jsonl",)
    (tmp_path / "serve.yaml").write_text("rda_results: [a.jsonl, 3]\n")
    with pytest.raises(ConfigError, match="'rda_results' must be a path"):
        load_config(tmp_path / "serve.yaml")
    with pytest.raises(ConfigError, match="cannot capture on 'tacit-nosuch0'"):
        Service(config(tmp_path, pirate_interface="tacit-nosuch0"), shop_callgraph())


def test_a_corrupt_capture_ends_its_source_not_the_service(tmp_path: Path) -> None:
    bad = tmp_path / "bad.pcap"
    bad.write_bytes(b"this is no capture file at all")
    with pytest.raises(InputError, match="not a pcap or pcapng file"):
        Service(config(tmp_path, pirate_pcap=bad), shop_callgraph())  # refused at the start
    header = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)  # pcap 2.4, Ethernet
    bad.write_bytes(header + b"\xff" * 40)  # a corrupt first record
    with pytest.raises(ConfigError, match="bad capture filter"):
        Service(config(tmp_path, pirate_pcap=bad, pirate_filter="((("), shop_callgraph())
    with running(tmp_path, pirate_pcap=bad) as svc:
        _until(svc.pirate[0].finished.is_set, "the source to end")
        (source,) = get_json(svc, "/api/tacit/status")["pirate"]
        assert source["error"] and source["estimates"] == 0
        assert get(svc, "/readyz")[0] == 200


def test_the_command_refuses_a_missing_capture_in_one_line(tmp_path: Path) -> None:
    run = finish({"serve": start("serve", "--pirate-pcap", "nosuch.pcap", cwd=tmp_path)})
    assert "no such capture file" in one_error_line(run["serve"], "nosuch.pcap")


def test_a_line_longer_than_a_read_is_one_rejected_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, agents: Any
) -> None:
    from tacit.serve import followed_file, rda_feed
    from tacit.serve.metrics import ServeMetrics

    monkeypatch.setattr(followed_file, "MAX_READ", 1024)  # more than a record
    receiver, _ = agents
    results = tmp_path / "receiver.jsonl"
    results.write_text(json_lines(receiver[:1]) + "x" * 1500)  # a long line, not yet ended
    store = Store(tmp_path / "tacit.duckdb")
    try:
        follower = rda_feed.RdaFollower(results, rda_feed.RdaIngest(store, ServeMetrics()))
        while follower.read_more():
            pass
        assert follower.file.line == 1  # the long line waits for its end, however long it grows
        with results.open("a") as f:
            f.write("y" * 1500)
        assert not follower.read_more()
        with results.open("a") as f:
            f.write("\n" + json_lines(receiver[1:3]))
        while follower.read_more():
            pass
        assert follower.file.line == 4 and follower.file.offset == results.stat().st_size
        assert store.rda_rejected() == {str(results): 1}
        assert len(store.rda_intervals(str(results), None, None, 10)) == 3
    finally:
        store.close()


def test_a_file_of_garbage_is_rejected_line_by_line_and_logged_in_a_few_lines(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Every line of 20,000 lines of garbage is a stored rejection, and the log says so in a
    few lines, not 20,000."""
    from tacit.serve import rda_feed
    from tacit.serve.metrics import ServeMetrics

    results = tmp_path / "garbage.jsonl"
    results.write_text("".join(f"\x00garbage {k}\n" for k in range(20_000)))
    store = Store(tmp_path / "tacit.duckdb")
    try:
        follower = rda_feed.RdaFollower(results, rda_feed.RdaIngest(store, ServeMetrics()))
        with caplog.at_level("WARNING", logger="tacit.serve"):
            while follower.read_more():
                pass
        assert store.rda_rejected() == {str(results): 20_000}
    finally:
        store.close()
    assert len(caplog.records) <= 5 * (rda_feed.LOGGED + 1)
    assert "more lines are not RDA interval records" in caplog.text
