"""CSV span tables: fields, workload names, line-numbered errors, and the real Nezha data."""

from __future__ import annotations

import csv
import gzip
import io
from pathlib import Path

import numpy as np
import pytest

from tacit.errors import InputError
from tacit.formats.spancsv import read_span_csv, workload_name
from tacit.formats.textio import read_text
from tacit.model.spans import NONE, UNKNOWN

HEADER = "TraceID,SpanID,ParentID,PodName,OperationName,StartTimeUnixNano,EndTimeUnixNano,Duration"
T0 = 1_661_140_374_351_773_094
ROWS = [
    f"t1,a1,root,frontend-579b9bff58-t2dbm,GET /,{T0},{T0 + 9000},9000",
    f"t1,a2,a1,frontend-579b9bff58-t2dbm,Cart/Get,{T0 + 10},{T0 + 500},490",
    f"t1,a3,a2,cartservice-579f59597d-wc2lz,Cart/Get,{T0 + 20},{T0 + 400},380",
    "",
    f't1,a4,a3,redis-0,"HGET cart,1",{T0 + 30},{T0 + 40},10',
    f"t2,b1,,frontend-579b9bff58-t2dbm,GET /,{T0 + 50},{T0 + 60},10",
    f"t2,b2,zz,frontend-579b9bff58-t2dbm,orphan,{T0 + 55},{T0 + 58},3",
]
REAL = (
    Path(__file__).parents[2] / "../shared/data/nezha/online_boutique/2022-08-22/03_53_trace.csv.gz"
)


def write(tmp_path: Path, lines: list[str], name: str = "trace.csv") -> Path:
    path = tmp_path / name
    data = "\n".join(lines).encode() + b"\n"
    path.write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    return path


@pytest.mark.parametrize("name", ["trace.csv", "trace.csv.gz"])
def test_every_field_is_read(tmp_path: Path, name: str) -> None:
    t = read_span_csv(write(tmp_path, [HEADER, *ROWS], name))
    assert len(t) == 6
    col = {c: [t.name(c, r) for r in range(len(t))] for c in ("span_id", "service", "instance")}
    assert col["span_id"] == ["a1", "a2", "a3", "a4", "b1", "b2"]
    assert col["service"] == ["frontend", "frontend", "cartservice", "redis-0"] + ["frontend"] * 2
    assert col["instance"][2] == "cartservice-579f59597d-wc2lz"
    assert t.name("endpoint", 3) == "HGET cart,1"  # quoted field with a comma
    assert set(t.kind.tolist()) == {UNKNOWN}
    assert t.start.dtype == np.int64 and int(t.start[1]) == T0 + 10 and int(t.end[1]) == T0 + 500
    assert t.parent.tolist() == [NONE, 0, 1, 2, NONE, NONE]  # root, "", and a missing parent
    assert t.record.tolist() == [2, 3, 4, 6, 7, 8]  # CSV lines: header is 1, line 5 blank
    assert t.peer.tolist() == [NONE] * 6 and t.thread.tolist() == [NONE] * 6
    assert [t.name("trace", r) for r in (0, 4)] == ["t1", "t2"]


@pytest.mark.parametrize(
    ("pod", "workload"),
    [
        ("frontend-579b9bff58-t2dbm", "frontend"),
        ("ts-order-service-5d8d6c5c7f-abcde", "ts-order-service"),
        ("currencyservice-cf787dd48-vpjrd", "currencyservice"),
        ("api-1234567890-x1y2z", "api"),  # decimal hash of old releases
        ("redis-0", "redis-0"),  # StatefulSet ordinal
        ("fluentd-x7k2p", "fluentd-x7k2p"),  # lone suffix: kept
        ("my-redis-master-cache", "my-redis-master-cache"),  # hash needs a digit
        ("frontend", "frontend"),
    ],
)
def test_workload_name(pod: str, workload: str) -> None:
    assert workload_name(pod) == workload


def error_of(tmp_path: Path, lines: list[str]) -> str:
    path = write(tmp_path, lines)
    with pytest.raises(InputError) as e:
        read_span_csv(path)
    assert str(e.value).startswith(str(path))
    return str(e.value)


def test_missing_columns_name_the_file(tmp_path: Path) -> None:
    text = error_of(tmp_path, ["TraceID,SpanID,PodName,StartTimeUnixNano", "t,a,p,1"])
    assert "missing column(s) ParentID, OperationName, EndTimeUnixNano" in text


def test_empty_file(tmp_path: Path) -> None:
    (tmp_path / "e.csv").write_text("")
    with pytest.raises(InputError, match="missing column"):
        read_span_csv(tmp_path / "e.csv")


@pytest.mark.parametrize(
    ("row", "message"),
    [
        (
            f"t1,x,root,web-1,op,12.5,{T0}",
            "field 'StartTimeUnixNano' must be an integer, got '12.5'",
        ),
        (f"t1,x,root,web-1,op,{T0},", "field 'EndTimeUnixNano' must be an integer, got ''"),
        (f"t1,x,root,web-1,op,{T0},{T0 - 1}", "span ends before it starts"),
        ("t1,x,root,web-1,op,-5,10", "span starts before 1970 (-5 ns since the epoch)"),
        (f"t1,x,root,,op,{T0},{T0}", "empty PodName"),
        (f"t1,x,root,web-1,op,{T0}", "6 fields, but the header has 7"),
    ],
)
def test_bad_row_names_file_and_line(tmp_path: Path, row: str, message: str) -> None:
    header = HEADER.removesuffix(",Duration")
    text = error_of(tmp_path, [header, f"t1,a,root,web-1,op,{T0},{T0}", row])
    assert f"record line 3: {message}" in text


@pytest.mark.realdata
def test_real_nezha_csv() -> None:
    if not REAL.exists():
        pytest.skip("../shared/data absent: real-data test skipped")
    t = read_span_csv(REAL)
    assert len(t) == 23019
    assert len(np.unique(t.trace)) == 497
    services = {t.strings[int(c)] for c in np.unique(t.service)}
    assert {"frontend", "productcatalogservice", "currencyservice"} <= services
    assert all("-" not in s for s in services)  # every pod name reduced to its Deployment
    roots = sum(row["ParentID"] == "root" for row in csv.DictReader(io.StringIO(read_text(REAL))))
    assert roots == 497
    missing_parents = int((t.parent == NONE).sum()) - roots
    assert missing_parents == 0  # every non-root span's parent is in the file
