"""read_spans / write_traces: format detection, mixing formats, round trips, common failures."""

from __future__ import annotations

import gzip
import json
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from tacit.errors import ConfigError, InputError
from tacit.formats import READ_FORMATS, WRITE_FORMATS, detect_format, read_spans, write_traces
from tacit.formats.otlp import read_otlp
from tacit.formats.span_files import read_span_set
from tacit.formats.spancsv import read_span_csv
from tacit.formats.zipkin import read_zipkin
from tacit.model.spans import CLIENT, INTERNAL, NONE, SERVER, UNKNOWN, SpanTable, SpanTableBuilder

T0 = 1_661_140_374_351_773_094  # ns, deliberately not a whole microsecond
POD = "frontend-579b9bff58-t2dbm"

CSV_TEXT = (
    "TraceID,SpanID,ParentID,PodName,OperationName,StartTimeUnixNano,EndTimeUnixNano,Duration\n"
    f"t1,a,root,{POD},GET /,{T0},{T0 + 5000},5000\n"
)


def sample_table() -> SpanTable:
    """Two traces with every kind, addresses and pod names as instances, peers and threads."""
    b = SpanTableBuilder()
    spans = [
        # trace, id, parent, service, instance, endpoint, kind, start, end, peer, thread
        ("t1", "a1", None, "frontend", POD, "GET /", SERVER, 0, 9_000_500),
        ("t1", "a2", "a1", "frontend", POD, "render", INTERNAL, 100, 400),
        ("t1", "a3", "a1", "frontend", POD, "Cart/Get", CLIENT, 1_001, 5_000_000),
        ("t1", "a4", "a3", "cart", "10.0.0.7:8080", "Cart/Get", SERVER, 2_000, 4_000_999),
        ("t1", "a5", "a4", "cart", "10.0.0.7:8080", "redis GET", UNKNOWN, 3_000, 3_999_999),
        ("t2", "b1", None, "cart", "[fe80::1]:80", "Cart/Get", SERVER, 7_000, 8_123_456),
        ("t2", "b2", "b1", "cart", "cart", "Cart/Check", CLIENT, 7_100, 7_900_000),
    ]
    for rec, (trace, sid, parent, svc, inst, ep, kind, start, end) in enumerate(spans, 1):
        b.add(
            service=svc,
            instance=inst,
            endpoint=ep,
            kind=kind,
            start=T0 + start,
            end=T0 + end,
            record=rec,
            peer="cart" if kind == CLIENT else None,
            thread=rec + 40 if kind != UNKNOWN else NONE,
            trace=trace,
            span_id=sid,
            parent_id=parent,
        )
    return b.build()


def canonical(t: SpanTable, *, micros: bool) -> set:
    """Span tuples that ignore row order and id spelling, parents and traces by content.

    With ``micros`` times are compared as the formats that keep microseconds store them:
    start rounded down, end rounded up.
    """

    def key(row: int) -> tuple:
        start, end = int(t.start[row]), int(t.end[row])
        if micros:
            start, end = start // 1000 * 1000, -(-end // 1000) * 1000
        return (
            t.name("service", row),
            t.name("instance", row),
            t.name("endpoint", row),
            int(t.kind[row]),
            start,
            end,
            t.name("peer", row),
            int(t.thread[row]),
        )

    mates: dict[int, list[tuple]] = {}
    for row in range(len(t)):
        mates.setdefault(int(t.trace[row]), []).append(key(row))
    return {
        (
            key(row),
            key(int(t.parent[row])) if t.parent[row] != NONE else None,
            frozenset(mates[int(t.trace[row])]),
        )
        for row in range(len(t))
    }


@pytest.mark.parametrize("fmt", WRITE_FORMATS)
@pytest.mark.parametrize("name", ["out.json", "out.json.gz"])
def test_round_trip_preserves_the_table(tmp_path: Path, fmt: str, name: str) -> None:
    table = sample_table()
    path = tmp_path / name
    write_traces(path, table, format=fmt)
    assert detect_format(path) == fmt
    back = read_spans(path)
    assert len(back) == len(table)
    micros = fmt != "otlp"
    assert canonical(back, micros=micros) == canonical(table, micros=micros)
    if not micros:
        np.testing.assert_array_equal(np.sort(back.start), np.sort(table.start))


@pytest.mark.parametrize("fmt", WRITE_FORMATS)
@pytest.mark.parametrize("name", ["bom.json", "bom.json.gz"])
def test_a_utf8_byte_order_mark_is_skipped(tmp_path: Path, fmt: str, name: str) -> None:
    plain = tmp_path / "plain.json"
    write_traces(plain, sample_table(), format=fmt)
    text = b"\xef\xbb\xbf" + plain.read_bytes()
    path = tmp_path / name
    path.write_bytes(gzip.compress(text) if name.endswith(".gz") else text)
    assert detect_format(path) == fmt
    micros = fmt != "otlp"
    assert canonical(read_spans(path), micros=micros) == canonical(read_spans(plain), micros=micros)


@pytest.mark.parametrize("fmt", [f for f in WRITE_FORMATS if f != "otlp"])  # OTLP nests AnyValues
def test_a_tag_nested_too_deep_to_write_is_one_input_error(tmp_path: Path, fmt: str) -> None:
    nested: list = []
    for _ in range(300):  # orjson writes at most 254 levels
        nested = [nested]
    with pytest.raises(InputError, match="cannot be written as JSON"):
        write_traces(tmp_path / "out.json", sample_table(), format=fmt, tags={0: {"x": nested}})


def test_extra_tags_are_written(tmp_path: Path) -> None:
    write_traces(tmp_path / "j.json", sample_table(), tags={0: {"tacit.parent": "x"}})
    doc = json.loads((tmp_path / "j.json").read_text())
    tags = [t for tr in doc["data"] for s in tr["spans"] for t in s["tags"]]
    assert {"key": "tacit.parent", "type": "string", "value": "x"} in tags


def write_all_formats(d: Path) -> None:
    """One file per format in ``d`` (the JSON ones written by tacit, one gzipped)."""
    table = sample_table()
    write_traces(d / "a.json", table, format="jaeger")
    write_traces(d / "b.json.gz", table, format="otlp")
    write_traces(d / "c.json", table, format="zipkin")
    (d / "d.csv").write_text(CSV_TEXT)


def test_directory_of_mixed_formats_is_one_set_of_spans(tmp_path: Path) -> None:
    """The same two traces in three formats are read once (from the first file, the others'
    copies counted as duplicates), beside the CSV file's own span."""
    write_all_formats(tmp_path)
    (tmp_path / "notes.txt").write_text("ignored: not a span file suffix")
    spans, duplicates = read_span_set(tmp_path)
    assert len(spans) == len(sample_table()) + 1
    assert duplicates == 2 * len(sample_table())
    assert [Path(s).name for s in spans.sources] == ["a.json", "b.json.gz", "c.json", "d.csv"]
    assert "frontend" in {spans.strings[int(c)] for c in spans.service}
    assert int((spans.parent == NONE).sum()) == 2 + 1
    first = read_spans(tmp_path / "a.json")  # its spans come first, with their parents
    assert spans.parent[: len(first)].tolist() == first.parent.tolist()


@pytest.mark.parametrize("fmt", ["auto", "jaeger"])
def test_a_file_reached_twice_is_refused_not_counted_twice(tmp_path: Path, fmt: str) -> None:
    write_all_formats(tmp_path)
    a = tmp_path / "a.json"
    with pytest.raises(InputError, match=r"the same file as .*a\.json: its records would count"):
        read_spans([a, a], format=fmt)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "link.json").symlink_to(a)
    with pytest.raises(InputError, match="count twice") as e:
        read_spans([a, tmp_path / "sub"], format=fmt)
    assert e.value.path == str(tmp_path / "sub" / "link.json")


@pytest.mark.parametrize(
    ("doc", "fmt"),
    [
        ({"data": []}, "jaeger"),
        ({"traceID": "t", "spans": [], "processes": {}}, "jaeger"),
        ([{"traceID": "t", "spans": []}], "jaeger"),
        ({"resourceSpans": []}, "otlp"),
        ([{"traceId": "t", "id": "a"}], "zipkin"),
        ([[{"traceId": "t", "id": "a"}]], "zipkin"),
        ([], "zipkin"),
    ],
)
def test_detect_json_documents(tmp_path: Path, doc: object, fmt: str) -> None:
    path = tmp_path / "doc.json"
    path.write_text(json.dumps(doc, indent=2))
    assert detect_format(path) == fmt


def test_detect_csv_and_blind(tmp_path: Path) -> None:
    (tmp_path / "s.csv.gz").write_bytes(gzip.compress(CSV_TEXT.encode()))
    (tmp_path / "b.jsonl").write_text('{"rpc": "Cart/Get", "kind": "server", "start": 1}\n')
    assert detect_format(tmp_path / "s.csv.gz") == "csv"
    assert detect_format(tmp_path / "b.jsonl") == "blind"


def test_blind_files_go_to_the_blind_reader(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "b.jsonl").write_text('{"rpc": "Cart/Get", "kind": "server"}\n')
    seen = []
    fake = types.ModuleType("tacit.formats.blind")
    fake.read_blind = lambda paths: seen.append(paths) or SpanTable.empty()
    monkeypatch.setitem(sys.modules, "tacit.formats.blind", fake)
    assert len(read_spans(tmp_path)) == 0
    assert seen == [[tmp_path / "b.jsonl"]]


def test_blind_reader_missing_is_an_input_error(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "b.jsonl"
    path.write_text('{"rpc": "Cart/Get", "kind": "server"}\n')
    monkeypatch.setitem(sys.modules, "tacit.formats.blind", None)  # makes the import fail
    with pytest.raises(InputError, match="blind-span JSON lines cannot be read") as e:
        read_spans(path)
    assert str(path) in str(e.value)


def test_explicit_format_skips_detection(tmp_path: Path) -> None:
    path = tmp_path / "spans.csv"
    path.write_text(CSV_TEXT)
    assert len(read_spans([path], format="csv")) == 1
    with pytest.raises(InputError, match="malformed JSON"):
        read_spans(path, format="zipkin")


@pytest.mark.parametrize(
    "content",
    ['{"something": "else"}', "[1, 2]", '[{"name": "no ids"}]', "null", "a,b,c\n1,2,3\n"],
)
def test_unknown_content_names_the_file(tmp_path: Path, content: str) -> None:
    path = tmp_path / "mystery.json"
    path.write_text(content)
    with pytest.raises(InputError, match="unknown span format") as e:
        read_spans(path)
    assert str(e.value).startswith(str(path))


def test_bad_format_names_are_config_errors(tmp_path: Path) -> None:
    assert "auto" in READ_FORMATS
    with pytest.raises(ConfigError, match="unknown trace format 'xml'"):
        read_spans(tmp_path, format="xml")
    with pytest.raises(ConfigError, match="unknown trace format 'csv'"):
        write_traces(tmp_path / "x", sample_table(), format="csv")


def test_empty_directory_and_missing_path(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="holds no"):
        read_spans(tmp_path)
    with pytest.raises(InputError, match="no such file"):
        read_spans(tmp_path / "absent.json")


READERS = [read_spans, read_zipkin, read_otlp, read_span_csv]


@pytest.mark.parametrize("reader", READERS)
def test_truncated_gzip_names_the_file(tmp_path: Path, reader) -> None:
    path = tmp_path / "spans.json.gz"
    data = gzip.compress(json.dumps({"resourceSpans": []}).encode())
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError, match="corrupt or truncated gzip") as e:
        reader(path)
    assert str(e.value).startswith(str(path))


@pytest.mark.parametrize("reader", [read_spans, read_zipkin, read_otlp])
def test_malformed_json_names_the_file_and_line(tmp_path: Path, reader) -> None:
    path = tmp_path / "spans.json"
    path.write_text('[\n{"traceId": "t",\n')
    with pytest.raises(InputError, match="malformed JSON at line 3") as e:
        reader(path)
    assert str(e.value).startswith(str(path))


def test_a_directory_file_that_holds_no_spans_is_counted_not_fatal(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A fault list beside the traces (as Nezha's days have) is left out with a notice and
    counted; named directly, it is still an error, and so is a broken file of a span format."""
    from tacit.formats import SKIPPED_FILES, observe

    day = tmp_path / "day"
    day.mkdir()
    write_traces(day / "a.json", sample_table())
    (day / "fault_list.json").write_text('{"faults": []}')
    with caplog.at_level("WARNING", logger="tacit"):
        observed, _ = observe([day])
    assert [r.getMessage() for r in caplog.records] == [
        f"{day / 'fault_list.json'}: holds no spans, skipped"
    ]
    whole, _ = observe([day / "a.json"])
    assert len(observed.spans) == len(whole.spans) > 0
    assert observed.accounting[SKIPPED_FILES] == 1 and SKIPPED_FILES not in whole.accounting
    with pytest.raises(InputError, match="unknown span format"):
        observe([day / "fault_list.json"])
    with pytest.raises(InputError, match="unknown span format"):
        read_spans([day])  # a caller that does not collect skipped files is told
    (day / "b.json").write_text('{"data": [{"traceID": ')
    with pytest.raises(InputError, match=r"b\.json"):
        observe([day])
    alone = tmp_path / "alone"
    alone.mkdir()
    (alone / "fault_list.json").write_text("[1, 2]")
    with pytest.raises(InputError, match="no span files"):
        observe([alone])


def test_format_names_are_the_registry():
    """The names commands list without importing the readers are those the readers and
    writers are registered under."""
    from tacit.formats import format_names, span_files
    from tacit.reconstruct import pipeline

    assert set(format_names.DETECTED) == {*span_files._INPUT_READERS, "blind"}
    assert tuple(span_files._AGENT_READERS) == format_names.AGENT
    assert tuple(span_files._WRITERS) == format_names.WRITE
    assert tuple(span_files._STREAM_WRITERS) == format_names.STREAM_WRITE
    assert set(format_names.STREAM_READ) <= set(format_names.DETECTED)
    assert pipeline.STREAM_READ_FORMATS == format_names.STREAM_READ
    assert format_names.listed(("a", "b", "c")) == "a, b or c"
