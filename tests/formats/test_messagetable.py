"""Message tables as CSV, JSON lines and Parquet: round trips, time units, failures."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest

from tacit.causal_paths.inputs import read_messages
from tacit.errors import InputError
from tacit.formats.messages_input import detect_message_input
from tacit.formats.messagetable import (
    ns_to_iso,
    read_message_table,
    table_format,
    write_message_table,
)
from tacit.model.messages import MISSING, MessageTable, MessageTableBuilder

T = 1_714_557_600_123_456_789  # deliberately not a whole microsecond


def sample() -> MessageTable:
    b = MessageTableBuilder()
    b.add(
        src="web:80",
        dst="db:5432",
        src_host="web",
        dst_host="db",
        src_endpoint="10.0.0.1:40000",
        dst_endpoint="10.0.0.9:5432",
        send=T,
        recv=T + 250_001,
        size=120,
        flow=0,
        record=1,
    )
    b.add(
        src="db:5432",
        dst="web:80",
        src_host="db",
        dst_host="web",
        src_endpoint="10.0.0.9:5432",
        dst_endpoint="10.0.0.1:40000",
        send=T + 900_000,
        recv=MISSING,
        size=4096,
        flow=0,
        record=2,
    )
    b.add(src="10.1.2.3", dst="web:80", send=MISSING, recv=T + 5, record=3)  # no endpoints
    return b.build()


def same(a: MessageTable, b: MessageTable, exact_times: bool = True) -> None:
    assert len(a) == len(b)
    for col in ("src", "dst", "src_host", "dst_host", "src_endpoint", "dst_endpoint"):
        assert [a.name(col, i) for i in range(len(a))] == [b.name(col, i) for i in range(len(b))]
    for col in ("size", "flow"):
        assert getattr(a, col).tolist() == getattr(b, col).tolist(), col
    for col in ("send", "recv"):
        x, y = getattr(a, col), getattr(b, col)
        assert ((x == MISSING) == (y == MISSING)).all()
        diff = np.abs(x[x != MISSING] - y[y != MISSING])
        assert diff.max() <= (0 if exact_times else 1_000), col


@pytest.mark.parametrize("suffix", [".csv", ".csv.gz", ".jsonl", ".jsonl.gz", ".parquet"])
@pytest.mark.parametrize("time_format", ["ns", "iso", "seconds"])
def test_round_trip(tmp_path: Path, suffix: str, time_format: str):
    path = tmp_path / f"messages{suffix}"
    write_message_table(path, sample(), time_format=time_format)
    if suffix.endswith(".gz"):
        assert path.read_bytes()[:2] == b"\x1f\x8b"
    back = read_message_table(path)
    # float seconds in JSON and Parquet keep ~0.2 us; everything else is exact
    exact = not (time_format == "seconds" and suffix in (".jsonl", ".jsonl.gz", ".parquet"))
    same(sample(), back, exact_times=exact)
    assert back.sources == [str(path)]


def test_csv_layout_and_missing_cells(tmp_path):
    path = tmp_path / "m.csv"
    write_message_table(path, sample(), time_format="iso")
    lines = path.read_text().splitlines()
    assert lines[0] == (
        "sender,sender_endpoint,send_time,receiver,receiver_endpoint,receive_time,size,"
        "sender_host,receiver_host,flow"
    )
    assert lines[2].split(",")[5] == ""  # the missing receive time
    assert lines[1].split(",")[2] == ns_to_iso(T) == "2024-05-01T10:00:00.123456789Z"


def test_time_units_are_detected_per_column(tmp_path):
    path = tmp_path / "m.csv"
    path.write_text(
        "sender,receiver,send_time,receive_time,size\n"
        "a,b,1714557600.5,2024-05-01T12:00:00.000000001+02:00,10\n"
        "b,a,1714557601,,20\n"
    )
    t = read_message_table(path)
    assert t.send.tolist() == [1_714_557_600_500_000_000, 1_714_557_601_000_000_000]
    assert t.recv.tolist() == [1_714_557_600_000_000_001, MISSING]
    assert t.size.tolist() == [10, 20]
    assert t.flow.tolist() == [-1, -1]
    assert t.name("src_host", 0) == "a" and t.name("src_endpoint", 0) is None
    assert t.record.tolist() == [2, 3]


def test_jsonl_typed_times(tmp_path):
    path = tmp_path / "m.ndjson"
    path.write_text(
        '{"sender": "a", "receiver": "b", "send_time": 1714557600000000001, '
        '"receive_time": null}\n'
        '{"sender": "b", "receiver": "a", "send_time": null, "receive_time": 7}\n'
    )
    t = read_message_table(path)
    assert t.send.tolist() == [1_714_557_600_000_000_001, MISSING]
    assert t.recv.tolist() == [MISSING, 7]


@pytest.mark.parametrize(
    ("text", "record", "message"),
    [
        ("sender,receiver,send_time,receive_time\na,b,1,2\nc,d,,\n", "line 3", "both are empty"),
        ("sender,receiver,send_time,receive_time\na,b,1,\n,d,,2\n", "line 3", "empty sender"),
        (
            "sender,receiver,send_time,receive_time\na,b,1,\nc,d,2024-05-01T00:00:00Z,\n",
            "line 3",
            "mixes ISO-8601 strings and numbers",
        ),
        (
            "sender,receiver,send_time,receive_time\na,b,1,2,3\n",
            "line 2",
            "5 fields, the header has 4",
        ),
        ("sender,receiver,send_time,receive_time,size\na,b,1,2,big\n", "line 2", "integer"),
        (
            "sender,receiver,send_time,receive_time,flow\na,b,1,2,1\nc,d,3,4,17000000000000000000\n",
            "line 3",
            "flow 17000000000000000000 is out of range",
        ),
    ],
)
def test_bad_rows_are_named(tmp_path, text, record, message):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(InputError, match=message) as e:
        read_message_table(path)
    assert e.value.record == record
    assert e.value.path == str(path)


def test_not_a_message_table(tmp_path):
    path = tmp_path / "spans.csv"
    path.write_text("TraceID,SpanID\n1,2\n")
    with pytest.raises(InputError, match="missing column"):
        read_message_table(path)


def test_format_by_suffix_or_content(tmp_path):
    write_message_table(tmp_path / "a.parquet", sample())
    (tmp_path / "a.parquet").rename(tmp_path / "a.bin")
    assert table_format(tmp_path / "a.bin") == "parquet"
    (tmp_path / "b.txt").write_bytes(gzip.compress(b'{"sender": "a"}\n'))
    assert table_format(tmp_path / "b.txt") == "jsonl"
    assert table_format(tmp_path / "c.csv.gz", head=b"") == "csv"


def test_read_messages_dispatches_message_tables(tmp_path):
    write_message_table(tmp_path / "one.csv", sample())
    write_message_table(tmp_path / "two.jsonl", sample(), time_format="iso")
    write_message_table(tmp_path / "three.parquet", sample())
    for name in ("one.csv", "two.jsonl", "three.parquet"):
        assert detect_message_input(tmp_path / name) == "table"
    messages, acc = read_messages([tmp_path])
    assert len(messages) == 9 and acc["message_table_rows"] == 9 and acc["files"] == 3
    unknown = tmp_path / "notes.log"
    unknown.write_text("hello\n")
    with pytest.raises(InputError, match="unknown message input"):
        read_messages([unknown])


def test_bytes_that_are_not_utf8_are_refused_by_the_reader(tmp_path):
    path = tmp_path / "m.csv"
    write_message_table(path, sample())
    path.write_bytes(path.read_bytes().replace(b"web", b"w\xffb", 1))
    assert detect_message_input(path) == "table"  # the header is still readable
    with pytest.raises(InputError, match=r"m\.csv: not UTF-8 text"):
        read_messages([path])
