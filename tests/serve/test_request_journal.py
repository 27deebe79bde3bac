"""The journal of acknowledged requests, and the store taking it in on a restart."""

from __future__ import annotations

import os
import shutil

import pytest

from tacit.serve.journal import Request, read_segment
from tacit.serve.store import Store

REQUESTS = [
    Request(0, 3, 10, "protobuf", b"\x0a\x01\x02"),
    Request(3, 2, 11, "json", b'{"resourceSpans": []}', {"capture_offset:a.pcap": 4096}),
    Request(5, 1, 12, "protobuf", b""),
]


def _segment(tmp_path, requests):
    path = tmp_path / "segment"
    path.write_bytes(b"".join(r.record() for r in requests))
    return path


def test_records_read_back_as_written(tmp_path):
    assert read_segment(_segment(tmp_path, REQUESTS)) == (REQUESTS, 0)


@pytest.mark.parametrize("cut", [1, 10, 30, -5, -1])
def test_a_record_cut_short_is_left_out_and_counted(tmp_path, cut):
    path = _segment(tmp_path, REQUESTS)
    last = len(REQUESTS[-1].record())
    data = path.read_bytes()
    keep = len(data) - last + cut if cut > 0 else len(data) + cut
    path.write_bytes(data[:keep])
    assert read_segment(path) == (REQUESTS[:-1], keep - (len(data) - last))


def test_a_damaged_record_is_left_out(tmp_path):
    path = _segment(tmp_path, REQUESTS)
    data = bytearray(path.read_bytes())
    data[-6] ^= 0xFF  # a byte of the last record's body
    path.write_bytes(bytes(data))
    assert read_segment(path)[0] == REQUESTS[:-1]


def _ingest(db):
    store = Store(db)
    try:
        rows = store._cursor().execute("SELECT * FROM ingest ORDER BY first_seq").fetchall()
        return rows, store.state("capture_offset:a.pcap", -1), store.torn
    finally:
        store.close()


def test_a_store_left_without_closing_takes_its_journal_in(tmp_path):
    db = tmp_path / "tacit.duckdb"
    store = Store(db)
    for r in REQUESTS:
        store.append_request(r.first_seq, r.spans, r.received_ns, r.encoding, r.body, r.state)
    (journal,) = tmp_path.glob("tacit.duckdb.journal.*")
    with journal.open("ab") as f:  # a crash while the next request was being written
        f.write(REQUESTS[0].record()[:20])
    store._con.close()  # no close(): nothing moved in, as after kill -9
    rows, offset, torn = _ingest(db)
    assert rows == [(r.first_seq, r.spans, r.received_ns, r.encoding, r.body) for r in REQUESTS]
    assert offset == 4096
    assert torn == [(journal, 20)]
    assert not list(tmp_path.glob("tacit.duckdb.journal.*"))  # taken in, and closed empty


def test_a_segment_taken_in_but_not_removed_is_not_taken_twice(tmp_path):
    db = tmp_path / "tacit.duckdb"
    store = Store(db)
    store.append_request(0, 3, 10, "protobuf", b"abc")
    (journal,) = tmp_path.glob("tacit.duckdb.journal.*")
    kept = shutil.copy(journal, tmp_path / "kept")
    store.settle()
    store._con.close()
    shutil.move(kept, journal)  # as if the crash came between the commit and the removal
    rows, _, _ = _ingest(db)
    assert rows == [(0, 3, 10, "protobuf", b"abc")]


def test_a_failed_append_leaves_no_broken_record(tmp_path, monkeypatch):
    db = tmp_path / "tacit.duckdb"
    store = Store(db)
    store.append_request(0, 3, 10, "protobuf", b"abc")
    sync = os.fdatasync

    def disk_full(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fdatasync", disk_full)
    with pytest.raises(OSError):
        store.append_request(3, 1, 11, "protobuf", b"lost")
    monkeypatch.setattr(os, "fdatasync", sync)
    store.append_request(3, 2, 12, "protobuf", b"de")  # the sender tried again
    (journal,) = tmp_path.glob("tacit.duckdb.journal.*")
    assert [r.body for r in read_segment(journal)[0]] == [b"abc", b"de"]
    store.close()


def test_an_append_after_close_fails(tmp_path):
    store = Store(tmp_path / "tacit.duckdb")
    store.close()
    with pytest.raises(OSError):
        store.append_request(0, 1, 10, "protobuf", b"late")
