"""Retention: what the service took in longer ago than ``retention_s`` is deleted, and only
that; the numbering of spans survives it and a restart."""

from __future__ import annotations

import pytest

from serve_app import get, get_json, running, shop_spans, until
from tacit.errors import ConfigError
from tacit.experiment.otlp_load import send_spans
from tacit.serve import ServeConfig
from tacit.serve.store import Store

NOW = 1_800_000_000 * 10**9


def _samples(text: str) -> dict[str, float]:
    """The samples of a Prometheus exposition, by name and labels."""
    lines = (x.rpartition(" ") for x in text.splitlines() if x and not x.startswith("#"))
    return {name: float(value) for name, _, value in lines}


def _count(store: Store, table: str, where: str = "TRUE") -> int:
    return store._cursor().execute(f"SELECT count(*) FROM {table} WHERE {where}").fetchall()[0][0]


@pytest.fixture
def store(tmp_path):
    """Two traces finished an hour ago (spans 0–3, and 4–5 with span 6 still to come), one
    finished now (7–8), a span in no trace (9); their requests; confidence, RDA and Pirate
    rows of then and now; a capture file's old Pirate estimate."""
    s = Store(tmp_path / "t.duckdb")
    old, new = NOW - 3600 * 10**9, NOW
    cur = s._cursor()
    spans = [(0, "a"), (1, "a"), (2, "a"), (3, "a"), (4, "b"), (5, "b"), (6, "b"), (7, "c"),
             (8, "c"), (9, None)]  # fmt: skip
    for seq, trace in spans:
        cur.execute(
            "INSERT INTO spans (seq, trace_id, service, start_ns) VALUES (?, ?, 'svc', ?)",
            [seq, trace, old],
        )
    for trace, finished, n in (("a", old, 4), ("b", old, 3), ("c", new, 2)):
        cur.execute(
            "INSERT INTO traces (trace_id, finished_ns, spans) VALUES (?, ?, ?)",
            [trace, finished, n],
        )
        cur.execute("INSERT INTO trace_operations (trace_id, service) VALUES (?, 'svc')", [trace])
    for first, n, received in ((0, 4, old), (4, 2, old), (6, 4, new)):
        cur.execute("INSERT INTO ingest VALUES (?, ?, ?, 'json', '')", [first, n, received])
    for at in (old, new):
        cur.execute("INSERT INTO confidence (at_ns, service, links) VALUES (?, 'svc', 10)", [at])
        cur.execute("INSERT INTO rda_rejected VALUES ('r', 1, 'bad', ?)", [at])
        cur.execute(
            "INSERT INTO rda_intervals (source, role, interval, received_ns) "
            "VALUES ('r', 'receiver', ?, ?)",
            [at // 10**9, at],
        )
        for source in ("live:eth0", "capture.pcap"):
            cur.execute(
                "INSERT INTO pirate_estimates (source, epoch_end_ns) VALUES (?, ?)", [source, at]
            )
    yield s
    s.close()


def test_expire_deletes_what_was_taken_in_before_the_cut_and_nothing_else(store):
    deleted = store.expire(NOW - 60 * 10**9, low_water=10).rows
    # Trace b keeps its spans: span 6 came in with the recent request (sequence cut 6).
    assert deleted == {
        "spans": 4,
        "trace_operations": 1,
        "traces": 1,
        "ingest": 2,
        "confidence": 1,
        "pirate_estimates": 1,
        "rda_intervals": 1,
        "rda_rejected": 1,
    }
    cur = store._cursor()
    assert [r[0] for r in cur.execute("SELECT trace_id FROM traces ORDER BY 1").fetchall()] == [
        "b",
        "c",
    ]
    assert _count(store, "spans", "trace_id IS NULL") == 1  # span 9 is after the cut
    assert _count(store, "pirate_estimates", "source = 'capture.pcap'") == 2
    assert store.next_seq() == 10  # the last request stays: the numbering goes on


def test_expire_keeps_what_reconstruction_may_still_read(store):
    """Below the low-water mark only: spans still being reconstructed, and the requests a
    restart reads them back from, stay however old."""
    store.expire(NOW + 10**9, low_water=2)
    assert _count(store, "traces") == 3 and _count(store, "spans") == 10
    assert _count(store, "ingest") == 3
    assert store.expire(NOW + 10**9, low_water=10).rows["traces"] == 3
    assert _count(store, "spans") == 0 and _count(store, "ingest") == 1


def test_passes_of_a_few_spans_delete_what_one_pass_deletes(store):
    """Bounded passes (a trace at a time here: each holds at least two spans) until one says
    it is done: the same rows go, and no pass takes a trace without all its spans."""
    total: dict[str, int] = {}
    passes = 0
    while True:
        expired = store.expire(NOW + 10**9, low_water=10, most_spans=2)
        passes += 1
        for table, n in expired.rows.items():
            total[table] = total.get(table, 0) + n
        assert _count(store, "traces", "trace_id NOT IN (SELECT trace_id FROM spans "
                      "WHERE trace_id IS NOT NULL)") == 0  # fmt: skip
        if expired.done:
            break
    assert passes == 3  # traces a, b and c
    assert total["spans"] == 10 and total["traces"] == 3 and total["ingest"] == 2
    assert _count(store, "spans") == 0 and _count(store, "ingest") == 1


def test_the_service_expires_its_traces_and_the_numbering_survives(tmp_path):
    spans = shop_spans(3)
    with running(tmp_path, retention_s=1.0) as svc:
        log = send_spans(spans, f"http://127.0.0.1:{svc.http_port}/v1/traces")
        assert log.acknowledged == len(spans)
        assert svc.wait_idle(60)
        until(lambda: not _count(svc.store, "traces"), 30)
        assert _count(svc.store, "traces") == 0 and _count(svc.store, "spans") == 0
        assert _count(svc.store, "ingest") == 1
        service = spans.strings[int(spans.service[0])]
        assert get_json(svc, f"/api/traces?service={service}")["data"] == []
        metrics = _samples(get(svc, "/metrics")[1].decode())
        assert metrics["tacit_traces_finished_total"] > 0
        assert (
            metrics['tacit_rows_expired_total{table="traces"}']
            == (metrics["tacit_traces_finished_total"])
        )
        assert not any(k.startswith("tacit_service_confidence_ratio{") for k in metrics)
    with running(tmp_path) as svc:
        send_spans(spans, f"http://127.0.0.1:{svc.http_port}/v1/traces")
        assert svc.wait_idle(60)
        seqs = svc.store._cursor().execute("SELECT min(seq), count(*) FROM spans").fetchall()
    assert seqs == [(len(spans), len(spans))]


def test_retention_must_be_finite_and_not_negative():
    for bad in (-1.0, float("inf")):
        with pytest.raises(ConfigError, match="retention_s"):
            ServeConfig(retention_s=bad)
