"""Gzip inputs inflate within a bound: a small file that inflates a thousandfold (a
decompression bomb) is refused, naming the file and the variable that raises the bound,
before it fills memory, by every reader (whole files, lines, CSV, captures)."""

from __future__ import annotations

import gzip

import pytest

from tacit.errors import InputError
from tacit.formats import textio
from tacit.formats.pcap import read_packets
from tacit.formats.textio import csv_rows, iter_json_lines, read_bytes, read_text

PCAP_HEADER = bytes.fromhex("d4c3b2a1020004000000000000000000ffff000001000000")
"""A classic pcap file header: little-endian, version 2.4, snap length 65535, Ethernet."""


@pytest.fixture
def small_floor(monkeypatch):
    """A floor of 1 MB, so that a bomb of a few MB shows the bound."""
    monkeypatch.setattr(textio, "INFLATE_FLOOR", 1 << 20)


TEXT_READERS = [read_text, lambda p: list(iter_json_lines(p)), lambda p: list(csv_rows(p))]


@pytest.mark.parametrize(
    ("read", "content"),
    [(read_bytes, c) for c in (b"\0", b" ", b"\n")]
    + [(read_packets, c) for c in (b"\0", b" ", b"\n")]
    + [(read, b"1\n") for read in TEXT_READERS],
)
def test_a_file_that_inflates_a_thousandfold_is_refused(tmp_path, small_floor, read, content):
    """A capture's bomb starts as a capture does, a text bomb with text: else their first
    bytes refuse them (below)."""
    bomb = tmp_path / "bomb.gz"
    head = PCAP_HEADER if read is read_packets else b""
    bomb.write_bytes(gzip.compress(head + content * (8 << 20), 9))
    assert bomb.stat().st_size < 40_000
    with pytest.raises(InputError, match=r"inflates beyond .* TACIT_MAX_INFLATE_RATIO") as e:
        read(bomb)
    assert str(bomb) in str(e.value)


@pytest.mark.parametrize(
    ("read", "content"),
    [(read_text, c) for c in (b"\0", b" ", b"\n", b" \t\r\n")]
    + [(TEXT_READERS[1], b" \t\r\n"), (TEXT_READERS[2], b"\n")],
)
@pytest.mark.parametrize("compress", [gzip.compress, bytes])
def test_a_text_input_blank_for_its_first_mib_is_refused_there(tmp_path, read, content, compress):
    """Whitespace and zero bytes for a MiB start no text format: refused once that MiB has
    passed, however far the file goes on (an 8 KB gzip file of them inflates to gigabytes)."""
    blank = tmp_path / "blank.gz"
    blank.write_bytes(compress(content * (4 << 20)))
    with pytest.raises(InputError, match="nothing but whitespace and zero bytes") as e:
        read(blank)
    assert str(blank) in str(e.value)


@pytest.mark.parametrize("read", TEXT_READERS[:2])
def test_a_text_that_starts_within_its_first_mib_is_read(tmp_path, read):
    late = tmp_path / "late.gz"
    late.write_bytes(gzip.compress(b"\n" * (textio.HEAD_BYTES - 2) + b"1\n"))
    assert read(late)


def test_the_bound_is_the_ratio_to_the_compressed_size_and_can_be_raised(
    tmp_path, small_floor, monkeypatch
):
    text = b'{"a": 1}\n' * 200_000  # 1.8 MB: over the floor, and compresses about 300 times
    data = tmp_path / "lines.jsonl.gz"
    data.write_bytes(gzip.compress(text, 9))
    with pytest.raises(InputError, match="inflates beyond"):
        read_bytes(data)
    monkeypatch.setenv("TACIT_MAX_INFLATE_RATIO", "1000")
    assert read_bytes(data) == text
    assert len(list(iter_json_lines(data))) == 200_000
    monkeypatch.setenv("TACIT_MAX_INFLATE_RATIO", "lots")
    with pytest.raises(InputError, match="TACIT_MAX_INFLATE_RATIO='lots' is not a number"):
        read_bytes(data)


def test_a_file_within_the_bound_reads_as_before(tmp_path):
    plain = b"\xef\xbb\xbf" + b'{"a": 1}\n' * 1000  # with a byte-order mark, skipped
    data = tmp_path / "x.jsonl.gz"
    data.write_bytes(gzip.compress(plain))
    assert read_bytes(data) == plain[3:]
    assert [n for n, _ in iter_json_lines(data)] == list(range(1, 1001))


def test_json_lines_pass_over_blank_lines_by_the_block(tmp_path):
    """Blank lines (of spaces, tabs, carriage returns) are skipped whatever their number, the
    lines around them numbered as they are in the file; a line longer than a block is whole."""
    from tacit.formats.textio import _BLOCK, iter_json_lines

    long = b'{"a": "' + b"x" * (3 * _BLOCK) + b'"}'
    path = tmp_path / "x.jsonl"
    path.write_bytes(b"\n \t\r\n" + b'{"n": 1}\n' + b"\n" * (2 * _BLOCK) + long + b"\n  \n[2]")
    got = list(iter_json_lines(path))
    assert [n for n, _ in got] == [3, 4 + 2 * _BLOCK, 6 + 2 * _BLOCK]
    assert got[0][1] == {"n": 1} and len(got[1][1]["a"]) == 3 * _BLOCK and got[2][1] == [2]


def test_a_file_of_zeros_is_refused_from_its_head_not_inflated_first(tmp_path, monkeypatch):
    """Zero bytes start neither a JSON document nor the Collector's length-prefixed protobuf
    (whose first message begins with a ``resource_spans`` tag): refused as no span format
    from the first megabyte, without the file being read whole."""
    from tacit.formats import span_files

    path = tmp_path / "zeros.json.gz"
    path.write_bytes(gzip.compress(bytes(64 << 20), 9))
    monkeypatch.setattr(span_files, "read_text", lambda p: pytest.fail(f"{p} read whole"))
    with pytest.raises(InputError, match="unknown span format"):
        span_files.detect_format(path)


def test_a_gzip_file_that_is_no_capture_is_refused_from_its_first_bytes(tmp_path, monkeypatch):
    from tacit.formats import pcap

    path = tmp_path / "zeros.pcap.gz"
    path.write_bytes(gzip.compress(bytes(64 << 20), 9))
    monkeypatch.setattr(pcap, "read_bytes", lambda p: pytest.fail(f"{p} read whole"))
    with pytest.raises(InputError, match=r"not a pcap or pcapng file \(starts with 00000000\)"):
        pcap.read_packets(str(path))
