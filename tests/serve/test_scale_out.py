"""``tacit serve`` as roles: ingest replicas appending to the shared log (NATS JetStream), the
reconstruct role reading it, its rounds on a Dask cluster; against one process given the same
requests in the log's order."""

from __future__ import annotations

import math
import os
import threading
import time

import duckdb
import pytest
from prometheus_client.parser import text_string_to_metric_families

from serve_app import config, get, get_json, post, running, shop_spans, url
from tacit.errors import ConfigError
from tacit.experiment.capture import stop_process
from tacit.experiment.memcached import free_port
from tacit.experiment.nats_server import nats_unavailable, start_nats
from tacit.experiment.otlp_load import encoded_requests, lost_context, post_requests
from tacit.experiment.scale_out import KILLS, ScaleOutParams, run_ceiling, run_scale_out
from tacit.serve import Service, log_feed, reconstructor
from tacit.serve.block_files import SCHEMA_BLOCK, TableFiles
from tacit.serve.http_routes import PROTOBUF
from tacit.serve.replicas import IngestReplica, QueryReplica
from tacit.serve.span_log import SpanLog
from tacit.serve.store_blocks import MERGE_AGAIN, PENDING, STATE_KEY
from tacit.serve.store_traces import FINISHED_TABLES

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


def _log_metrics(svc: Service) -> dict[str, float]:
    """The reconstruct role's place in the log, as ``/metrics`` gives it."""
    families = text_string_to_metric_families(get(svc, "/metrics")[1].decode())
    return {
        s.name: s.value
        for f in families
        for s in f.samples
        if s.name.startswith("tacit_log_") and s.labels == {"stream": "tacit"}
    }


def _wait_taken(svc: Service, spans: int, timeout_s: float = 60) -> None:
    end = time.monotonic() + timeout_s
    while svc.ingest.next_seq < spans and time.monotonic() < end:
        time.sleep(0.1)
    assert svc.ingest.next_seq == spans
    assert svc.wait_idle(timeout_s)


def test_two_ingest_replicas_and_rounds_on_dask_store_what_one_process_stores(tmp_path, nats_url):
    """Every call's context lost, so that the rounds on the workers infer every call."""
    distributed = pytest.importorskip("distributed")
    requests = encoded_requests(lost_context(shop_spans(3)))
    total = sum(n for n, _ in requests)
    replicas = [
        IngestReplica(config(tmp_path / f"r{i}", role="ingest", nats=nats_url)).start()
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
        changes = {"role": "reconstruct", "nats": nats_url, "dask": cluster.scheduler_address}
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


def test_a_purge_drops_exactly_the_messages_below_its_sequence(nats_url):
    """JetStream takes a purge to 1 for the whole stream: the log asks none there."""
    log = SpanLog(nats_url, "purged", 1 << 20).open()
    try:
        for i in range(5):
            log.publish(b"request %d" % i, "protobuf", i)
        log.purge_below(1)
        assert log.messages() == 5
        log.purge_below(3)
        assert log.messages() == 3
    finally:
        log.close()


def test_the_log_is_purged_only_below_what_the_store_holds(tmp_path, nats_url, monkeypatch):
    """The reconstruct role's journal is not synced request by request: the log keeps every
    request until the store has it, so each purge reaches only below the requests the store's
    ``ingest`` table holds."""
    monkeypatch.setattr(log_feed, "PURGE_EVERY", 3)
    requests = encoded_requests(shop_spans(3))
    replica = IngestReplica(config(tmp_path / "r", role="ingest", nats=nats_url)).start()
    try:
        post_requests(requests, f"http://127.0.0.1:{replica.http_port}/v1/traces", connections=1)
    finally:
        replica.stop()
    purges: list[tuple[int, int]] = []
    with running(tmp_path, role="reconstruct", nats=nats_url) as driver:
        assert driver.log_feed is not None
        purge, cursor = driver.log_feed.log.purge_below, driver.store._cursor

        def checked_purge(seq: int) -> None:
            ((held,),) = cursor().execute("SELECT count(*) FROM ingest").fetchall()
            purges.append((seq, held))
            purge(seq)

        monkeypatch.setattr(driver.log_feed.log, "purge_below", checked_purge)
        _wait_taken(driver, sum(n for n, _ in requests))
        left = driver.log_feed.log.messages()
    assert len(purges) == len(requests) // 3
    assert all(seq - 1 <= held for seq, held in purges), purges
    assert left == len(requests) - max(1, purges[-1][0]) + 1


@pytest.mark.live
def test_kill_9_of_a_replica_a_worker_and_the_reconstruct_role_loses_nothing(tmp_path, nats_url):
    """Each process killed mid-stream, each role a process of its own: an ingest replica (its
    senders go on to the other, as a load balancer sends them, and a request it had logged
    without answering is logged once), a Dask worker (its tasks run again elsewhere) and the
    reconstruct role (started again, it reads on from its position and restores from its
    journal what it had not reconstructed). Every span sent is acknowledged and stored once,
    every request taken once, and the store is what one process stores given the log's order.
    Every call's context is lost, so that the rounds on the workers infer every call."""
    pytest.importorskip("distributed")
    params = ScaleOutParams(seconds=8, kill=KILLS, lost=True)
    run = run_scale_out(tmp_path / "run", params, tell=lambda _: None)
    logs = "".join(p.read_text()[-1500:] for p in (tmp_path / "run").glob("*.log"))
    assert run.killed == ["replica0", "worker0", "reconstruct"]
    assert run.sent == run.acknowledged == run.stored, logs
    assert run.requests_taken == run.requests
    assert run.windows_stored_twice == 0
    assert run.identical_to_single_process, logs
    assert run.query_replica_agrees


def test_an_ingest_replica_checks_logs_and_holds_senders_back(tmp_path, nats_url):
    """A malformed request is refused with the reason and not logged; a valid one is logged
    before its answer; a full log holds the sender back (429 with a retry delay), as a full
    service does; queries go elsewhere."""
    requests = encoded_requests(shop_spans(1))
    small = requests[0][1]
    changes = {"role": "ingest", "nats": nats_url, "nats_stream": "small",
               "nats_max_bytes": len(small) + 1000}  # fmt: skip
    replica = IngestReplica(config(tmp_path, **changes)).start()
    try:
        assert post(replica, b"\x0a\xff", PROTOBUF)[0] == 400
        assert post(replica, small, PROTOBUF)[0] == 200
        assert post(replica, small, PROTOBUF)[0] == 200  # the same request: logged once
        assert replica.log.messages() == 1
        status, body, headers = post(replica, requests[1][1], PROTOBUF)
        assert (status, headers["Retry-After"]) == (429, "1"), body
        assert b"the log is full" in body
        assert replica.log.messages() == 1
        assert get(replica, "/api/services")[0] == 404
        assert get(replica, "/readyz")[0] == 200
    finally:
        replica.stop()


def test_a_query_replica_answers_from_the_blocks_as_the_store_does(tmp_path):
    """The process storing traces writes each round as a block; a query replica reading the
    blocks gives the same answers as the store (services, searches, traces by id, counts),
    and a block written later shows at once."""
    requests = encoded_requests(shop_spans(3))
    blocks = tmp_path / "blocks"
    with running(tmp_path, blocks=blocks) as svc:
        replica = QueryReplica(config(tmp_path, role="query", blocks=blocks)).start()
        try:
            assert get_json(replica, "/api/tacit/status")["stored"]["spans"] == 0
            post_requests(requests[:3], url(svc, "/v1/traces"), connections=1)
            assert svc.wait_idle(60)
            early = get_json(replica, "/api/tacit/status")["stored"]["spans"]
            post_requests(requests[3:], url(svc, "/v1/traces"), connections=1)
            assert svc.wait_idle(60)
            paths = ["/api/services", "/api/services/frontend/operations",
                     "/api/traces?service=frontend&limit=50", "/api/dependencies?endTs=" +
                     str(2**62 // 10**6) + "&lookback=" + str(2**62 // 10**6)]  # fmt: skip
            ids = [t["traceID"] for t in get_json(svc, paths[2])["data"]]
            paths += [f"/api/traces/{i}" for i in ids[:5]]
            for path in paths:
                assert get_json(replica, path) == get_json(svc, path), path
            stored = svc.store.counts()
            assert get_json(replica, "/api/tacit/status")["stored"] == stored
        finally:
            replica.stop()
    assert 0 < early < stored["spans"] == sum(n for n, _ in requests)


def test_a_query_replica_reads_the_blocks_of_a_reconstruct_role_per_application(tmp_path):
    """Two stores, as two reconstruct roles of two applications write them, each its blocks
    in a directory of its own: a query replica given the directory above both answers for
    both, the second from once its blocks are there."""
    blocks = tmp_path / "blocks"
    for app in ("a", "b"):
        (tmp_path / app).mkdir()
    with running(tmp_path / "a", blocks=blocks / "a") as a:
        post_requests(encoded_requests(shop_spans(1, seed=3)), url(a, "/v1/traces"))
        assert a.wait_idle(60)
        replica = QueryReplica(config(tmp_path, role="query", blocks=blocks)).start()
        try:
            assert get_json(replica, "/api/tacit/status")["stored"] == a.store.counts()
            with running(tmp_path / "b", blocks=blocks / "b") as b:
                post_requests(encoded_requests(shop_spans(1, seed=4)), url(b, "/v1/traces"))
                assert b.wait_idle(60)
                both = {k: a.store.counts()[k] + b.store.counts()[k] for k in ("spans", "traces")}
                status = get_json(replica, "/api/tacit/status")
                assert {k: status["stored"][k] for k in both} == both
                assert status["blocks"] == [str(blocks / "a"), str(blocks / "b")]
                for svc in (a, b):
                    found = get_json(svc, "/api/traces?service=frontend&limit=3")["data"]
                    for trace in found:
                        path = f"/api/traces/{trace['traceID']}"
                        assert get_json(replica, path) == get_json(svc, path)
        finally:
            replica.stop()
    with pytest.raises(ConfigError, match="holds no blocks"):
        QueryReplica(config(tmp_path, role="query", blocks=tmp_path / "a"))


def test_a_block_is_in_place_exactly_when_its_round_is_stored(tmp_path):
    """Killed between writing a block and committing its round, or between the commit and
    moving it into place: a restart deletes the first (the round is done again) and moves the
    second in."""
    with running(tmp_path, blocks=tmp_path / "blocks") as svc:
        post_requests(encoded_requests(shop_spans(1)), url(svc, "/v1/traces"), connections=1)
        assert svc.wait_idle(60)
        committed = svc.store.state(STATE_KEY, 0)
    blocks = tmp_path / "blocks"
    assert committed > 0 and not list((blocks / PENDING).iterdir())
    spans = sorted((blocks / "spans").glob("0*.parquet"))
    # the last block as if its move had not happened, and one more never committed
    last = blocks / PENDING / spans[-1].stem
    last.mkdir()
    spans[-1].rename(last / "spans.parquet")
    ghost = blocks / PENDING / f"{committed:012d}"
    ghost.mkdir()
    (ghost / "spans.parquet").write_bytes((last / "spans.parquet").read_bytes())
    with running(tmp_path, blocks=blocks):
        pass
    assert sorted((blocks / "spans").glob("0*.parquet")) == spans
    assert not list((blocks / PENDING).iterdir())


def _answers(svc) -> list:
    """What a query API says of the shop app's traces: services, a search, some traces by id,
    and the counts."""
    found = get_json(svc, "/api/traces?service=frontend&limit=20")
    ids = sorted(t["traceID"] for t in found["data"])[:5]
    return [get_json(svc, "/api/services"), get_json(svc, "/api/tacit/status")["stored"],
            *(get_json(svc, f"/api/traces/{i}") for i in ids)]  # fmt: skip


def _merged_while_streaming(tmp_path, compact_rounds: int, merge_again: int = MERGE_AGAIN):
    """The blocks of the shop app's stream, compacted every ``compact_rounds`` rounds (merged
    blocks merged again ``merge_again`` at a time), once a query replica reading them gave
    the store's answers."""
    blocks = tmp_path / "blocks"
    with running(tmp_path, blocks=blocks) as svc:
        writer = svc.reconstructor.writer.blocks
        assert writer is not None
        writer.compact_rounds, writer.merge_again = compact_rounds, merge_again
        post_requests(encoded_requests(shop_spans(3)), url(svc, "/v1/traces"), connections=1)
        assert svc.wait_idle(60)
        replica = QueryReplica(config(tmp_path, role="query", blocks=blocks)).start()
        try:
            assert _answers(replica) == _answers(svc)
        finally:
            replica.stop()
    return blocks


def test_blocks_merged_during_the_stream_answer_as_the_store_does(tmp_path):
    """With a compaction every two rounds, the rounds' blocks are merged while the stream
    goes on; a query replica then gives the store's answers, reading merged blocks."""
    blocks = _merged_while_streaming(tmp_path, compact_rounds=2)
    for table in FINISHED_TABLES:
        assert TableFiles.of(blocks / table).merged, table


def test_merged_blocks_merged_again_answer_as_the_store_does(tmp_path, monkeypatch):
    """Rounds merged two at a time and those merged again three at a time: a query replica
    reads the outer blocks and gives the store's answers."""
    monkeypatch.setattr(reconstructor, "GROUP_SPANS", 0)  # a write per request: many rounds
    blocks = _merged_while_streaming(tmp_path, compact_rounds=1, merge_again=3)
    for table in FINISHED_TABLES:
        outer = TableFiles.of(blocks / table).outer()
        assert max(b - a + 1 for a, b in outer) >= 6, (table, outer)


def test_a_compaction_keeps_the_answers_and_its_rounds_go_later(tmp_path, monkeypatch):
    """Merged, the rounds' own files stay until the next compaction (a reader may have listed
    them), and the answers are the same throughout. A restart finishes what a compaction
    killed midway left: a merge not moved in is deleted, and so are the rounds a merged block
    holds."""
    # a write per request, so that each part sent makes rounds to merge however busy the
    # machine is (requests queued behind a slow turn would be stored in one write)
    monkeypatch.setattr(reconstructor, "GROUP_SPANS", 0)
    blocks = tmp_path / "blocks"
    with running(tmp_path, blocks=blocks) as svc:
        writer = svc.reconstructor.writer.blocks
        assert writer is not None
        post_requests(encoded_requests(shop_spans(3)), url(svc, "/v1/traces"), connections=1)
        assert svc.wait_idle(60)
        replica = QueryReplica(config(tmp_path, role="query", blocks=blocks)).start()
        try:
            before = _answers(replica)
            rounds = sorted(TableFiles.of(blocks / "spans").rounds.values())
            assert len(rounds) >= 2
            assert writer.compact() == len(rounds)
            files = TableFiles.of(blocks / "spans")
            assert len(files.merged) == 1 and files.covered() == rounds
            newest = max(path.stat().st_mtime_ns for path in rounds)  # retention's date of it
            assert next(iter(files.merged.values())).stat().st_mtime_ns == newest
            assert _answers(replica) == before
            more = encoded_requests(shop_spans(2, seed=5))
            post_requests(more, url(svc, "/v1/traces"), connections=1)
            assert svc.wait_idle(60)
            after = _answers(replica)
            assert writer.compact() > 0
            files = TableFiles.of(blocks / "spans")  # the first merge's rounds are gone
            assert len(files.merged) == 2 and not set(rounds) & set(files.rounds.values())
            assert files.covered() == sorted(files.rounds.values())
            assert _answers(replica) == after == _answers(svc)
            # as if killed midway through a third: a merge written aside, a round merged
            # and still in place
            aside = blocks / PENDING / "merge-000000000000-000000000001"
            aside.mkdir()
            (aside / "spans.parquet").write_bytes(b"PAR1")
            kept = next(iter(files.merged.values()))
            ghost = blocks / "spans" / f"{min(files.merged)[0]:012d}.parquet"
            ghost.write_bytes(kept.read_bytes())
        finally:
            replica.stop()
    with running(tmp_path, blocks=blocks) as svc:
        assert not ghost.exists() and not list((blocks / PENDING).iterdir())
        replica = QueryReplica(config(tmp_path, role="query", blocks=blocks)).start()
        try:
            assert _answers(replica) == after
        finally:
            replica.stop()


def test_a_round_not_yet_in_place_is_never_inside_a_merged_block(tmp_path, monkeypatch):
    """A round stored but not moved into place (moved in at the next start) bounds what is
    merged: merged past it, it would be taken for merged and deleted once moved in."""
    monkeypatch.setattr(reconstructor, "GROUP_SPANS", 0)  # a write per request: many rounds
    blocks = tmp_path / "blocks"
    with running(tmp_path, blocks=blocks) as svc:
        writer = svc.reconstructor.writer.blocks
        assert writer is not None
        post_requests(encoded_requests(shop_spans(3)), url(svc, "/v1/traces"), connections=1)
        assert svc.wait_idle(60)
        rounds = sorted(TableFiles.of(blocks / "spans").rounds)
        held = rounds[len(rounds) // 2]
        (blocks / PENDING / f"{held:012d}").mkdir()
        (blocks / "spans" / f"{held:012d}.parquet").rename(
            blocks / PENDING / f"{held:012d}" / "spans.parquet"
        )
        writer.compact()
        assert [b for _, b in TableFiles.of(blocks / "spans").merged] == [
            max(n for n in rounds if n < held)
        ]
    with running(tmp_path, blocks=blocks) as svc:
        pass
    files = TableFiles.of(blocks / "spans")
    assert held in files.rounds and files.rounds[held] not in files.covered()


def test_a_merge_that_fails_leaves_the_rounds_and_the_service_goes_on(tmp_path, caplog):
    """A round the compaction cannot read (a torn file): the merge is given up, logged, and
    tried again at the next; the rounds stay as they are and every span is stored."""
    blocks = tmp_path / "blocks"
    requests = encoded_requests(shop_spans(3))
    half = len(requests) // 2
    with running(tmp_path, blocks=blocks) as svc:
        assert svc.reconstructor.writer.blocks is not None
        post_requests(requests[:half], url(svc, "/v1/traces"), connections=1)
        assert svc.wait_idle(60)
        min(TableFiles.of(blocks / "spans").rounds.values()).write_bytes(b"torn")
        svc.reconstructor.writer.blocks.compact_rounds = 1
        post_requests(requests[half:], url(svc, "/v1/traces"), connections=1)
        assert svc.wait_idle(60)
        assert svc.store.counts()["spans"] == sum(n for n, _ in requests)
    assert "blocks could not be merged" in caplog.text
    assert not TableFiles.of(blocks / "spans").merged
    assert not list((blocks / PENDING).iterdir())


@pytest.mark.live
def test_the_reconstruct_role_reads_on_once_the_log_is_back(tmp_path):
    """The NATS server killed (``kill -9``) and started again on its store: what it had
    acknowledged is still there, and the reconstruct role, not ready meanwhile, reads on
    from its position."""
    reason = nats_unavailable()
    if reason:
        pytest.skip(reason)
    port = free_port()
    nats_url = f"nats://127.0.0.1:{port}"
    requests = encoded_requests(shop_spans(2))
    half = len(requests) // 2
    nats = start_nats(port, tmp_path / "jetstream")
    try:
        replica = IngestReplica(config(tmp_path, role="ingest", nats=nats_url)).start()
        try:
            post_requests(requests[:half], url(replica, "/v1/traces"), connections=1)
        finally:
            replica.stop()
        (tmp_path / "driver").mkdir()
        with running(tmp_path / "driver", role="reconstruct", nats=nats_url) as driver:
            _wait_taken(driver, sum(n for n, _ in requests[:half]))
            nats.kill()
            nats.wait()
            end = time.monotonic() + 30
            while driver.problem() is None and time.monotonic() < end:
                time.sleep(0.2)
            assert "the log cannot be read" in (driver.problem() or "")
            assert math.isnan(_log_metrics(driver)["tacit_log_backlog_requests"])
            nats = start_nats(port, tmp_path / "jetstream")
            replica = IngestReplica(config(tmp_path, role="ingest", nats=nats_url)).start()
            try:
                post_requests(requests[half:], url(replica, "/v1/traces"), connections=1)
            finally:
                replica.stop()
            _wait_taken(driver, sum(n for n, _ in requests))
            assert driver.problem() is None
            assert _log_metrics(driver) == {
                "tacit_log_position": len(requests) + 1,
                "tacit_log_backlog_requests": 0,
            }
    finally:
        stop_process(nats)


def test_blocks_go_with_the_retention_time(tmp_path):
    """A block written before the retention cut is deleted; the newer ones and the schema
    blocks stay."""
    blocks = tmp_path / "blocks"
    with running(tmp_path, blocks=blocks) as svc:
        post_requests(encoded_requests(shop_spans(1)), url(svc, "/v1/traces"), connections=1)
        assert svc.wait_idle(60)
        writer = svc.reconstructor.writer.blocks
        assert writer is not None
        written = sorted(blocks.glob("*/0*.parquet"))
        old, new = written[: len(written) // 2], written[len(written) // 2 :]
        hour_ago = time.time_ns() - 3600 * 10**9
        for path in old:
            os.utime(path, ns=(hour_ago, hour_ago))
        assert writer.expire(time.time_ns() - 60 * 10**9) == len(old)
    assert sorted(blocks.glob("*/0*.parquet")) == new
    assert len(list(blocks.glob(f"*/{SCHEMA_BLOCK}"))) == len(FINISHED_TABLES)


@pytest.mark.live
def test_one_reconstruct_process_takes_a_backlog_from_the_log(tmp_path):
    """The stream put in the log first, one reconstruct process pinned to one core then takes
    all of it: the run that checks the capacity model's ceiling (bench_scale_out.py)."""
    if nats_unavailable():
        pytest.skip(nats_unavailable())
    run = run_ceiling(tmp_path, ScaleOutParams(seconds=2), cores="0", tell=lambda _: None)
    assert run.spans == sum(n for n, _ in encoded_requests(shop_spans(2)))
    assert run.cpu_s > 0 and run.wall_s > 0
    with duckdb.connect(str(tmp_path / "tacit.duckdb"), read_only=True) as db:
        stored = db.execute("SELECT count(DISTINCT span_id) FROM spans").fetchone()
    assert stored == (run.spans,)


def test_a_stream_the_server_refuses_is_a_one_line_error(tmp_path, nats_url):
    changes = {"role": "ingest", "nats": nats_url, "nats_max_bytes": 2**50}
    with pytest.raises(ConfigError, match="refused the stream 'tacit': insufficient storage"):
        IngestReplica(config(tmp_path, **changes)).start()
