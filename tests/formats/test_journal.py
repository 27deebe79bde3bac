"""Reading systemd journal exports (``journalctl -o export`` and ``-o json``) as syslog records."""

from __future__ import annotations

import json
import struct

import pytest

from tacit.errors import InputError
from tacit.formats.journal import detect_journal, export_entries
from tacit.formats.syslog import parse_syslog_text, read_syslog

US = 1_000


def binary(name: bytes, value: bytes) -> bytes:
    """A binary field of the Journal Export Format: name, 64-bit little-endian size, value."""
    return name + b"\n" + struct.pack("<Q", len(value)) + value + b"\n"


EXPORT = (
    b"__CURSOR=s=739ad463;i=1\n"
    b"__REALTIME_TIMESTAMP=1714566896123456\n"
    b"__MONOTONIC_TIMESTAMP=2201\n"
    b"_HOSTNAME=web1\n"
    b"SYSLOG_IDENTIFIER=nginx\n"
    b"_PID=812\n" + binary(b"MESSAGE", b"upstream timed out\nretrying") + b"\n"
    b"__REALTIME_TIMESTAMP=1714566897000001\n"
    b"_HOSTNAME=web2\n"
    b"_COMM=sshd\n"
    + binary(b"COREDUMP_BLOB", b"\x00\xff\n\n\x0a")
    + b"MESSAGE=Accepted password for root\n"
    b"\n"
    b"_HOSTNAME=web3\n"
    b"MESSAGE=an entry without its time\n"
    b"\n"
    b"__REALTIME_TIMESTAMP=1714566898000000\n" + binary(b"MESSAGE", b"caf\xc3\xa9 \xff") + b"\n"
)


def test_export_with_binary_fields(tmp_path):
    path = tmp_path / "web.export"
    path.write_bytes(EXPORT)
    r = read_syslog(tmp_path)
    assert r.formats == {str(path): "journal-export"}
    assert r.records.time.tolist() == [
        1714566896123456 * US,
        1714566897000001 * US,
        1714566898000000 * US,
    ]
    assert r.records.device_names().tolist() == ["web1", "web2", "-"]
    assert r.records.app == ["nginx", "sshd", ""]
    assert r.records.content == [
        "upstream timed out\nretrying",
        "Accepted password for root",
        "café \\xff",
    ]
    # Lines as a text tool counts them: the newlines inside binary values count too.
    assert r.records.line.tolist() == [1, 11, 24]
    assert r.accounting == {"lines": 4, "parsed": 3, "blank": 0, "unparsed": 1}
    assert r.unparsed_lines == [f"{path}:21: entry has no __REALTIME_TIMESTAMP"]
    with pytest.raises(InputError) as e:
        read_syslog(path, errors="raise")
    assert str(e.value) == f"{path}: record line 21: entry has no __REALTIME_TIMESTAMP"


def test_export_entries_keep_repeated_fields():
    data = b"A=1\nA=2\n" + binary(b"B", b"x\ny") + b"\n\n\nC=3"
    assert list(export_entries(data, "x")) == [
        (1, {"A": [b"1", b"2"], "B": [b"x\ny"]}),
        (9, {"C": [b"3"]}),
    ]


def test_export_binary_field_cut_short_names_its_line():
    data = b"__REALTIME_TIMESTAMP=1\nX=1\nMESSAGE\n" + struct.pack("<Q", 100) + b"short\n"
    with pytest.raises(InputError) as e:
        parse_syslog_text(data.decode(), "journal-export", source="cut.export")
    assert e.value.path == "cut.export" and e.value.record == "line 3"
    assert "'MESSAGE'" in str(e.value) and "\n" not in str(e.value)


def test_json_lines_with_byte_arrays_multiple_values_and_omitted_ones():
    entries = [
        {
            "__REALTIME_TIMESTAMP": "1714566896123456",
            "_HOSTNAME": "db1",
            "SYSLOG_IDENTIFIER": "postgres",
            "_PID": "77",
            "MESSAGE": list(b"checkpoint\n\x1b[1mdone"),
        },
        {
            "__REALTIME_TIMESTAMP": "1714566897000000",
            "_HOSTNAME": "db1",
            "SYSLOG_IDENTIFIER": ["postgres", "pg"],
            "MESSAGE": ["first value", list(b"second")],
        },
        {"__REALTIME_TIMESTAMP": "1714566898000000", "_HOSTNAME": "db1", "MESSAGE": None},
        {"_HOSTNAME": "db1", "MESSAGE": "no time"},
        {"__REALTIME_TIMESTAMP": "17145668.5", "MESSAGE": "not microseconds"},
    ]
    lines = [json.dumps(e) for e in entries]
    text = "\n".join([lines[0], "", lines[1], "{broken", *lines[2:], "[1, 2]"]) + "\n"
    r = parse_syslog_text(text, source="j.json")
    assert r.formats == {"j.json": "journal-json"}
    assert r.records.time.tolist() == [1714566896123456 * US, 1714566897000000 * US]
    assert r.records.content == ["checkpoint\n\x1b[1mdone", "first value"]
    assert r.records.app == ["postgres", "postgres"]
    assert r.records.line.tolist() == [1, 3]
    assert r.accounting == {"lines": 8, "parsed": 2, "blank": 1, "unparsed": 5}
    assert [u.split(": ", 1)[1] for u in r.unparsed_lines] == [
        "malformed JSON (unexpected character, expected a string key)",
        "MESSAGE left out by journalctl (over 4096 bytes; export with --all)",
        "entry has no __REALTIME_TIMESTAMP",
        "__REALTIME_TIMESTAMP is not a count of microseconds: '17145668.5'",
        "not a JSON object",
    ]


def test_detection_needs_a_journal_entry():
    assert detect_journal(b"\n__CURSOR=x\n__REALTIME_TIMESTAMP=1\n") == "journal-export"
    assert detect_journal(b'{"__REALTIME_TIMESTAMP": "1", "MESSAGE": "m"}\n') == "journal-json"
    assert detect_journal(b'{"time": 1}\n') is None
    assert detect_journal(b"KEY=value\nOTHER=1\n") is None
    assert detect_journal(b"<13>1 2024-05-01T00:00:00Z h a - - - m\n") is None
