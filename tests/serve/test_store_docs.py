"""Trace documents in the store: made from the spans' parts when asked for, the same as the
Jaeger writer makes of the same traces; a file of an earlier version, whose traces kept their
documents (compressed, or as text before that), is upgraded and both kinds are read."""

from __future__ import annotations

import math
import zlib

import duckdb
import numpy as np
import orjson
import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from serve_app import QUICK, shop_callgraph, shop_spans
from tacit.experiment.otlp_load import BATCH, sdk_spans
from tacit.formats.common import tag
from tacit.formats.jaeger import jaeger_traces, with_tags
from tacit.formats.otlp import read_export_request
from tacit.reconstruct.assemble import evidence_tags
from tacit.reconstruct.online import NS
from tacit.reconstruct.pipeline import ONLINE
from tacit.serve import store_traces
from tacit.serve.finished_rows import _SCHEMAS, Rows, TakenIds, finished_traces, kept_ids
from tacit.serve.online_feed import OnlineFeed
from tacit.serve.store import Store, TraceQuery

SEED = 7
DOC = {
    "traceID": "0af7651916cd43dd8448eb211c80319c",
    "spans": [
        {"spanID": f"{i:016x}", "operationName": "GET /cart", "tags": [{"key": "k", "value": i}]}
        for i in range(20)
    ],
    "processes": {"p1": {"serviceName": "cart", "tags": []}},
    "warnings": None,
}


def _stored_traces(store: Store, seconds: float) -> list[dict]:
    """The shop app's spans through the SDK's encoding, the feed and the store, as the service
    stores them; returns the Jaeger writer's documents of the same finished traces."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    spans = shop_spans(seconds, rate=100)
    readable = sdk_spans(spans)
    order = np.argsort(spans.end, kind="stable").tolist()
    feed = OnlineFeed(shop_callgraph(), QUICK)
    expected, next_seq = [], 0
    taken = TakenIds()  # the trace ids the store's rows took

    def store_(finished) -> None:
        rows = Rows()
        for f in finished:
            seq, given = feed.release(f)
            kept = kept_ids(f, given, taken)
            rows.add_finished(f, seq, given, SEED, 0, kept)
            expected.extend(jaeger_traces(*finished_traces(f, SEED, kept)))
        store.write_finished(rows.tables(0), {})

    for a in range(0, len(order), BATCH):
        body = encode_spans([readable[r] for r in order[a : a + BATCH]]).SerializeToString()
        batch, parent_ids = read_export_request(body, "protobuf", "test request")
        seq = np.arange(next_seq, next_seq + len(batch))
        store_(feed.push(batch, parent_ids, seq, math.inf).finished)
        next_seq += len(batch)
    store_(feed.advance(feed.tw.latest_end + 10 * NS))
    return expected


def test_documents_made_from_stored_spans_are_the_jaeger_writers(tmp_path):
    store = Store(tmp_path / "t.duckdb")
    expected = _stored_traces(store, 4)
    assert len(expected) > 300
    for doc in expected:
        assert orjson.loads(store.trace(doc["traceID"].upper())) == doc
    (n,) = store._cursor().execute("SELECT count(*) FROM processes").fetchone()
    assert 1 < n <= len({p["serviceName"] for d in expected for p in d["processes"].values()}) * 4
    latest = sorted(expected, key=lambda d: -min(s["startTime"] for s in d["spans"]))
    found = [orjson.loads(d) for d in store.find_traces(TraceQuery(service="frontend", limit=5))]
    assert [d["traceID"] for d in found] == [d["traceID"] for d in latest[:5]]
    assert found == latest[:5]
    store.close()


def _trace_row(trace_id: str, doc: bytes | None) -> dict[str, pa.Table]:
    row = {
        "trace_id": trace_id,
        "service": "cart",
        "operation": "GET /cart",
        "start_ns": 1,
        "duration_ns": 2,
        "spans": 20,
        "min_score": None,
        "finished_ns": 3,
        "doc": doc,
    }
    ops = {
        "trace_id": trace_id,
        "service": "cart",
        "operation": "GET /cart",
        "start_ns": 1,
        "duration_ns": 2,
        "trace_start_ns": 1,
    }
    return {
        "traces": pa.Table.from_pylist([row], schema=_SCHEMAS["traces"]),
        "trace_operations": pa.Table.from_pylist([ops], schema=_SCHEMAS["trace_operations"]),
    }


def test_a_file_of_stored_documents_is_upgraded_and_they_are_read(tmp_path):
    path = tmp_path / "old.duckdb"
    con = duckdb.connect(str(path))  # the first schema of the traces table: documents as text
    con.execute(
        "CREATE TABLE traces(trace_id VARCHAR, service VARCHAR, operation VARCHAR, "
        "start_ns BIGINT, duration_ns BIGINT, spans INTEGER, min_score DOUBLE, "
        "finished_ns BIGINT, doc VARCHAR)"
    )
    con.execute("CREATE INDEX traces_by_id ON traces(trace_id)")
    con.execute(  # and of the spans table, before it held the documents' parts
        "CREATE TABLE spans(seq BIGINT, trace_id VARCHAR, span_id VARCHAR, "
        "parent_span_id VARCHAR, service VARCHAR, instance VARCHAR, operation VARCHAR, "
        "kind VARCHAR, start_ns BIGINT, duration_ns BIGINT, parent_service VARCHAR, "
        "score DOUBLE, alternatives VARCHAR, unmapped VARCHAR, given_trace_id VARCHAR, "
        "given_parent_id VARCHAR)"
    )
    con.execute(
        "INSERT INTO traces VALUES ('00000000000000000000000000000001', 'cart', 'GET /cart', "
        "1, 2, 20, NULL, 3, ?)",
        [orjson.dumps(DOC).decode()],
    )
    con.close()
    store = Store(path)
    compressed = DOC | {"traceID": "00000000000000000000000000000002"}
    store.write_finished(
        _trace_row(compressed["traceID"], zlib.compress(orjson.dumps(compressed))), {}
    )
    assert orjson.loads(store.trace("00000000000000000000000000000001")) == DOC
    assert orjson.loads(store.trace(compressed["traceID"])) == compressed
    assert [orjson.loads(d) for d in store.find_traces(TraceQuery(service="cart"))] == [compressed]
    for doc in _stored_traces(store, 1):  # and traces stored now, in the upgraded tables
        assert orjson.loads(store.trace(doc["traceID"])) == doc
    cur = store._cursor()
    assert cur.execute(
        "SELECT data_type FROM information_schema.columns "
        "WHERE table_name = 'traces' AND column_name = 'doc'"
    ).fetchall() == [("BLOB",)]
    assert cur.execute("SELECT index_name FROM duckdb_indexes()").fetchall() == [("traces_by_id",)]
    store.close()


def test_a_search_by_tags_finds_every_match_however_old(tmp_path, monkeypatch):
    monkeypatch.setattr(store_traces, "TAG_PAGE", 7)  # many pages, none of them enough
    store = Store(tmp_path / "t.duckdb")
    docs = _stored_traces(store, 4)
    for tags in (
        (("peer.service", "db"),),
        (("peer.service", "db"), ("host.name", "catalog-1")),
        (("peer.service", "db"), ("tacit.algorithm", ONLINE)),  # evidence: in the columns
        (("tacit.algorithm", ONLINE),),
    ):
        q = TraceQuery(service="catalog", limit=10**6, tags=tags)
        expected = {d["traceID"] for d in docs if store_traces._has_tags(d, q)}
        found = [orjson.loads(d)["traceID"] for d in store.find_traces(q)]
        assert 20 < len(expected) == len(found)
        assert set(found) == expected
    store.close()


def test_spans_whose_stored_tags_hold_the_evidence_make_the_same_documents(tmp_path):
    """Rows of an earlier version kept the evidence tags in their tags' JSON as well as in
    their columns: a document takes them once, in the same place."""
    store = Store(tmp_path / "t.duckdb")
    expected = _stored_traces(store, 1)
    cur = store._cursor()
    rows = cur.execute("SELECT seq, tags, score, alternatives, unmapped FROM spans").fetchall()
    with_evidence = pa.table(
        {
            "seq": [r[0] for r in rows],
            "tags": [
                orjson.dumps(with_tags(orjson.loads(r[1]), evidence_tags(ONLINE, *r[2:]))).decode()
                for r in rows
            ],
        }
    )
    cur.register("old", with_evidence)
    cur.execute("UPDATE spans SET tags = old.tags FROM old WHERE spans.seq = old.seq")
    assert cur.execute("SELECT count(*) FROM spans WHERE tags LIKE '%tacit.%'").fetchone()[0] == (
        len(rows)
    )
    for doc in expected:
        assert orjson.loads(store.trace(doc["traceID"])) == doc
    store.close()


@given(
    st.text(st.sampled_from('ab%_\\"\u00e9'), min_size=1, max_size=4),
    st.one_of(
        st.text(st.sampled_from('ab%_\\"\u00e9 1'), max_size=4),
        st.integers(-1000, 1000),
        st.booleans(),
        st.floats(allow_nan=False, allow_infinity=False, width=32),
    ),
    st.lists(st.tuples(st.sampled_from(["a", "b%", "k_"]), st.text(max_size=3)), max_size=3),
)
def test_tag_patterns_match_every_list_of_tags_with_the_tag(key, value, others):
    """The patterns a search by tags filters spans with keep every span the search wants
    (they may keep a few more, which the documents then tell), and no span without the tag's
    key, or whose one tag has another value."""
    wanted = store_traces.tag_value_text(value)
    patterns = store_traces._tag_patterns(key, wanted)
    con = duckdb.connect()

    def matches(tags: list[dict]) -> bool:
        text = orjson.dumps(tags).decode()
        like = " OR ".join(["? LIKE ? ESCAPE '\\'"] * len(patterns))
        return con.execute(f"SELECT {like}", [x for p in patterns for x in (text, p)]).fetchone()[0]

    tags = [tag(k, v) for k, v in [*others, (key, value)]]
    assert matches(tags)
    assert not matches([t for t in tags if t["key"] != key])
    assert not matches([tag(key, wanted + "x")])
    assert not matches([tag(key, [value])])
