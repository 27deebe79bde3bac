"""read_jaeger / write_jaeger: every accepted form, round trips, errors naming file and record."""

from __future__ import annotations

import copy
import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from tacit.errors import InputError
from tacit.formats.jaeger import jaeger_document, read_jaeger, write_jaeger
from tacit.model.spans import CLIENT, NONE, SERVER, UNKNOWN, SpanTable
from tacit.simulate import load_app, simulate

T0_US = 1_700_000_000_123_456  # µs since the epoch


def trace_doc(trace_id: str = "t1") -> dict:
    """One Jaeger trace: frontend (host fe-7) calls cart (no host tag); one span has no kind."""

    def tag(k, v):
        return {"key": k, "type": "string", "value": v}

    def ref(parent):
        return [{"refType": "CHILD_OF", "traceID": trace_id, "spanID": parent}]

    return {
        "traceID": trace_id,
        "spans": [
            {
                "traceID": trace_id,
                "spanID": "a",
                "operationName": "GET /",
                "references": [],
                "startTime": T0_US,
                "duration": 1000,
                "tags": [tag("span.kind", "server")],
                "processID": "p1",
            },
            {
                "traceID": trace_id,
                "spanID": "b",
                "operationName": "Cart/Get",
                "references": ref("a"),
                "startTime": T0_US + 100,
                "duration": 500,
                "tags": [tag("span.kind", "client"), {"key": "thread.id", "value": 7}],
                "processID": "p1",
            },
            {
                "traceID": trace_id,
                "spanID": "c",
                "operationName": "Cart/Get",
                "references": ref("b"),
                "startTime": T0_US + 150,
                "duration": 300,
                "tags": [tag("span.kind", "SERVER")],
                "processID": "p2",
            },
            {
                "traceID": trace_id,
                "spanID": "d",
                "operationName": "load",
                # the legacy parent field instead of references; no tags at all
                "parentSpanID": "c",
                "startTime": T0_US + 200,
                "duration": 0,
                "processID": "p2",
            },
        ],
        "processes": {
            "p1": {"serviceName": "frontend", "tags": [tag("hostname", "fe-7")]},
            "p2": {"serviceName": "cart", "tags": []},
        },
    }


def by_id(t: SpanTable) -> dict[tuple[str, str], int]:
    return {(t.name("trace", r), t.name("span_id", r)): r for r in range(len(t))}


def check_trace(t: SpanTable, trace_id: str = "t1") -> None:
    """The spans of trace_doc(trace_id) in ``t`` have the expected fields."""
    rows = by_id(t)
    a, b, c, d = (rows[(trace_id, s)] for s in "abcd")
    assert [t.name("service", r) for r in (a, b, c, d)] == ["frontend", "frontend", "cart", "cart"]
    assert [t.name("instance", r) for r in (a, b, c, d)] == ["fe-7", "fe-7", "cart", "cart"]
    assert [t.name("endpoint", r) for r in (a, b, c, d)] == [
        "GET /",
        "Cart/Get",
        "Cart/Get",
        "load",
    ]
    assert [int(t.kind[r]) for r in (a, b, c, d)] == [SERVER, CLIENT, SERVER, UNKNOWN]
    t0 = T0_US * 1000
    assert int(t.start[a]) == t0 and int(t.end[a]) == t0 + 1_000_000
    assert int(t.start[b]) == t0 + 100_000 and int(t.end[b]) == t0 + 600_000
    assert int(t.start[d]) == int(t.end[d]) == t0 + 200_000
    assert [int(t.parent[r]) for r in (a, b, c, d)] == [NONE, a, b, c]
    assert int(t.thread[b]) == 7 and int(t.thread[a]) == NONE


def test_single_trace_object(tmp_path: Path) -> None:
    p = tmp_path / "one.json"
    p.write_text(json.dumps(trace_doc()))
    t = read_jaeger(p)
    assert len(t) == 4
    check_trace(t)
    assert t.start.dtype == np.int64


def test_api_export(tmp_path: Path) -> None:
    p = tmp_path / "export.json"
    p.write_text(json.dumps({"data": [trace_doc("t1"), trace_doc("t2")], "total": 0}))
    t = read_jaeger(str(p))
    assert len(t) == 8
    check_trace(t, "t1")
    check_trace(t, "t2")


def test_list_of_traces(tmp_path: Path) -> None:
    p = tmp_path / "list.json"
    p.write_text(json.dumps([trace_doc("t1"), trace_doc("t2"), trace_doc("t3")]))
    t = read_jaeger(p)
    assert len(t) == 12
    for tid in ("t1", "t2", "t3"):
        check_trace(t, tid)


def test_gzip(tmp_path: Path) -> None:
    data = json.dumps({"data": [trace_doc()]}).encode()
    (tmp_path / "a.json.gz").write_bytes(gzip.compress(data))
    check_trace(read_jaeger(tmp_path / "a.json.gz"))
    # gzip is detected by content, not by name
    (tmp_path / "b.json").write_bytes(gzip.compress(data))
    check_trace(read_jaeger(tmp_path / "b.json"))


def test_directory_and_list_of_paths(tmp_path: Path) -> None:
    d = tmp_path / "traces"
    d.mkdir()
    (d / "1.json").write_text(json.dumps(trace_doc("t1")))
    (d / "2.json.gz").write_bytes(gzip.compress(json.dumps({"data": [trace_doc("t2")]}).encode()))
    (d / "notes.txt").write_text("not a trace")
    t = read_jaeger(d)
    assert len(t) == 8
    check_trace(t, "t1")
    check_trace(t, "t2")
    assert sorted(Path(s).name for s in t.sources) == ["1.json", "2.json.gz"]

    other = tmp_path / "3.json"
    other.write_text(json.dumps(trace_doc("t3")))
    t = read_jaeger([d, other])
    assert len(t) == 12
    check_trace(t, "t3")


def test_same_span_ids_in_different_traces_stay_apart(tmp_path: Path) -> None:
    p = tmp_path / "x.json"
    p.write_text(json.dumps([trace_doc("t1"), trace_doc("t2")]))
    t = read_jaeger(p)
    rows = by_id(t)
    assert t.parent[rows[("t2", "b")]] == rows[("t2", "a")]
    assert t.parent[rows[("t1", "b")]] == rows[("t1", "a")]


def test_inline_process_and_missing_parent(tmp_path: Path) -> None:
    doc = trace_doc()
    span = doc["spans"][1]
    del span["processID"]
    span["process"] = {"serviceName": "edge", "tags": [{"key": "host.name", "value": "e1"}]}
    doc["spans"][2]["references"] = [{"refType": "CHILD_OF", "spanID": "zzz"}]  # not in input
    p = tmp_path / "x.json"
    p.write_text(json.dumps(doc))
    t = read_jaeger(p)
    rows = by_id(t)
    assert t.name("service", rows[("t1", "b")]) == "edge"
    assert t.name("instance", rows[("t1", "b")]) == "e1"
    assert t.parent[rows[("t1", "c")]] == NONE


# --------------------------------------------------------------------------------------------
# Round trip


@pytest.fixture(scope="module")
def simulated() -> SpanTable:
    return simulate(load_app(None), 80, n_requests=25, seed=3)


def test_round_trip_simulated(simulated: SpanTable, tmp_path: Path) -> None:
    sim = simulated
    for name in ("sim.json", "sim.json.gz"):
        path = tmp_path / name
        write_jaeger(path, sim)
        if name.endswith(".gz"):
            assert path.read_bytes()[:2] == b"\x1f\x8b"
        back = read_jaeger(path)
        assert len(back) == len(sim)
        assert len(np.unique(back.trace)) == len(np.unique(sim.trace)) == 25
        rows = by_id(back)
        assert len(rows) == len(sim)
        for r in range(len(sim)):
            b = rows[(sim.name("trace", r), sim.name("span_id", r))]
            for col in ("service", "instance", "endpoint", "peer"):
                assert back.name(col, b) == sim.name(col, r), (col, r)
            assert back.kind[b] == sim.kind[r]
            assert back.thread[b] == sim.thread[r]
            # µs resolution: start rounds down, end up
            assert back.start[b] == sim.start[r] // 1000 * 1000
            assert back.end[b] == -(-sim.end[r] // 1000) * 1000
            assert back.start[b] <= sim.start[r] and back.end[b] >= sim.end[r]
            p = int(sim.parent[r])
            if p == NONE:
                assert back.parent[b] == NONE
            else:
                want = rows[(sim.name("trace", p), sim.name("span_id", p))]
                assert back.parent[b] == want


def test_written_document_shape(simulated: SpanTable) -> None:
    doc = jaeger_document(simulated)
    assert {"data", "total", "limit", "offset", "errors"} <= doc.keys()
    for trace in doc["data"]:
        for span in trace["spans"]:
            assert span["processID"] in trace["processes"]
            assert isinstance(span["startTime"], int) and isinstance(span["duration"], int)
            assert span["duration"] >= 0
        starts = [s["startTime"] for s in trace["spans"]]
        assert starts == sorted(starts)


def test_extra_tags_written(simulated: SpanTable, tmp_path: Path) -> None:
    path = tmp_path / "tagged.json"
    write_jaeger(path, simulated, {0: {"tacit.score": -1.5, "note": "x"}})
    doc = json.loads(path.read_text())
    span_id = simulated.name("span_id", 0)
    span = next(s for t in doc["data"] for s in t["spans"] if s["spanID"] == span_id)
    tags = {t["key"]: t["value"] for t in span["tags"]}
    assert tags["tacit.score"] == -1.5 and tags["note"] == "x"


# --------------------------------------------------------------------------------------------
# Errors: InputError naming the file and the record


def write_doc(tmp_path: Path, doc) -> Path:
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(doc))
    return p


def read_error(path: Path) -> str:
    with pytest.raises(InputError) as e:
        read_jaeger(path)
    msg = str(e.value)
    assert str(path) in msg
    assert "Traceback" not in msg and "\n" not in msg
    return msg


def test_malformed_json(tmp_path: Path) -> None:
    p = tmp_path / "broken.json"
    p.write_text('{"data": [{"traceID": "t1", "spans": [}')
    msg = read_error(p)
    assert "malformed JSON" in msg and "line 1" in msg


def test_truncated_gzip(tmp_path: Path) -> None:
    data = gzip.compress(json.dumps({"data": [trace_doc()] * 20}).encode())
    p = tmp_path / "cut.json.gz"
    p.write_bytes(data[: len(data) // 2])
    msg = read_error(p)
    assert "gzip" in msg


def test_not_a_jaeger_document(tmp_path: Path) -> None:
    msg = read_error(write_doc(tmp_path, {"hello": 1}))
    assert "not a Jaeger document" in msg


def test_missing_start_time(tmp_path: Path) -> None:
    doc = trace_doc()
    del doc["spans"][1]["startTime"]
    msg = read_error(write_doc(tmp_path, doc))
    assert "record 2" in msg and "span b" in msg and "'startTime'" in msg


def test_duration_as_string(tmp_path: Path) -> None:
    doc = trace_doc()
    doc["spans"][2]["duration"] = "300us"
    msg = read_error(write_doc(tmp_path, doc))
    assert "record 3" in msg and "span c" in msg and "'duration'" in msg


def test_duration_of_wrong_type(tmp_path: Path) -> None:
    doc = trace_doc()
    doc["spans"][2]["duration"] = 1.5
    msg = read_error(write_doc(tmp_path, doc))
    assert "record 3" in msg and "'duration'" in msg


def test_unknown_process_id(tmp_path: Path) -> None:
    doc = trace_doc()
    doc["spans"][3]["processID"] = "p9"
    msg = read_error(write_doc(tmp_path, doc))
    assert "record 4" in msg and "span d" in msg and "p9" in msg


def test_duplicate_span_id(tmp_path: Path) -> None:
    doc = trace_doc()
    dup = copy.deepcopy(doc["spans"][1])
    doc["spans"].append(dup)
    msg = read_error(write_doc(tmp_path, doc))
    assert "duplicate span id b" in msg and "record 5" in msg


def test_negative_duration(tmp_path: Path) -> None:
    doc = trace_doc()
    doc["spans"][0]["duration"] = -5
    msg = read_error(write_doc(tmp_path, doc))
    assert "record 1" in msg and "span a" in msg and "negative duration" in msg


def test_error_counts_records_across_traces(tmp_path: Path) -> None:
    second = trace_doc("t2")
    del second["spans"][0]["spanID"]
    msg = read_error(write_doc(tmp_path, {"data": [trace_doc("t1"), second]}))
    assert "record 5" in msg and "'spanID'" in msg


def test_error_names_the_bad_file_in_a_directory(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text(json.dumps(trace_doc()))
    (tmp_path / "b.json").write_text("[")
    with pytest.raises(InputError) as e:
        read_jaeger(tmp_path)
    assert str(tmp_path / "b.json") in str(e.value)
    assert e.value.path == str(tmp_path / "b.json")


def test_nonexistent_file(tmp_path: Path) -> None:
    msg = read_error(tmp_path / "missing.json")
    assert "no such file" in msg


def test_a_time_beyond_int64_nanoseconds_names_file_record_and_column(tmp_path: Path) -> None:
    doc = trace_doc()
    doc["spans"][1]["startTime"] = 2**60  # microseconds: 2**60 * 1000 ns overflows int64
    p = tmp_path / "far.json"
    p.write_text(json.dumps(doc))
    with pytest.raises(
        InputError,
        match=r"far\.json: record 2 \(trace t1 span b\): startTime 1152921504606846976 \+",
    ):
        read_jaeger(p)
