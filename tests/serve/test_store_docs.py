"""Trace documents in the store: kept zlib-compressed, read back as the JSON the Jaeger API
serves, and a file written before they were compressed still read and written."""

from __future__ import annotations

import duckdb
import orjson
import pyarrow as pa

from tacit.serve.finished_rows import _SCHEMAS
from tacit.serve.store import Store, TraceQuery, pack_doc, unpack_doc

DOC = {
    "traceID": "0af7651916cd43dd8448eb211c80319c",
    "spans": [
        {"spanID": f"{i:016x}", "operationName": "GET /cart", "tags": [{"key": "k", "value": i}]}
        for i in range(20)
    ],
    "processes": {"p1": {"serviceName": "cart", "tags": []}},
    "warnings": None,
}


def _trace_row(trace_id: str, doc: bytes) -> dict[str, pa.Table]:
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


def test_a_document_is_stored_compressed_and_read_back_as_its_json(tmp_path):
    packed = pack_doc(DOC)
    assert len(packed) < len(orjson.dumps(DOC)) / 3
    assert orjson.loads(unpack_doc(packed)) == DOC
    store = Store(tmp_path / "t.duckdb")
    store.write_finished(_trace_row(DOC["traceID"], packed), {})
    assert orjson.loads(store.trace(DOC["traceID"])) == DOC
    assert [orjson.loads(d) for d in store.find_traces(TraceQuery(service="cart"))] == [DOC]
    store.close()


def test_a_file_of_uncompressed_documents_is_upgraded_and_both_kinds_are_read(tmp_path):
    path = tmp_path / "old.duckdb"
    con = duckdb.connect(str(path))  # the schema of the traces table before compression
    con.execute(
        "CREATE TABLE traces(trace_id VARCHAR, service VARCHAR, operation VARCHAR, "
        "start_ns BIGINT, duration_ns BIGINT, spans INTEGER, min_score DOUBLE, "
        "finished_ns BIGINT, doc VARCHAR)"
    )
    con.execute("CREATE INDEX traces_by_id ON traces(trace_id)")
    con.execute(
        "INSERT INTO traces VALUES ('00000000000000000000000000000001', 'cart', 'GET /cart', "
        "1, 2, 20, NULL, 3, ?)",
        [orjson.dumps(DOC).decode()],
    )
    con.close()
    store = Store(path)
    new = DOC | {"traceID": "00000000000000000000000000000002"}
    store.write_finished(_trace_row(new["traceID"], pack_doc(new)), {})
    assert orjson.loads(store.trace("00000000000000000000000000000001")) == DOC
    assert orjson.loads(store.trace(new["traceID"])) == new
    cur = store._cursor()
    assert cur.execute(
        "SELECT data_type FROM information_schema.columns "
        "WHERE table_name = 'traces' AND column_name = 'doc'"
    ).fetchall() == [("BLOB",)]
    assert cur.execute("SELECT index_name FROM duckdb_indexes()").fetchall() == [("traces_by_id",)]
    store.close()
