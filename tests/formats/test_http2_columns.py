"""HTTP/2 exchanges as columns (what spans from packets read) against the fields that were sent:
requests encoded by the hpack library's encoder into frames, the kept header values and the
pseudo-header fields compared with what RFC 9110 §5.3 and RFC 9113 §8.2.3 make of the sent fields,
and with the exchanges read one object per stream."""

from __future__ import annotations

import struct

import hpack
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tacit.formats.protocols.http2 import PREFACE, columns, exchanges
from tacit.formats.tcp_stream import ByteStream

KEEP = ("x-request-id", "cookie", "content-type", "x-caf\u00e9")
NAMES = ("x-request-id", "X-Request-Id", "cookie", "content-type", "x-caf\u00e9", "x-other")
"""Kept names in lower and upper case, one not ASCII, and one not kept."""


class Skipped(dict):
    def skip(self, reason: str, nbytes: int) -> None:
        self[reason] = self.get(reason, 0) + nbytes


def frame(kind: int, flags: int, sid: int, payload: bytes) -> bytes:
    return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + struct.pack(">I", sid) + payload


def stream(data: bytes) -> ByteStream:
    one = np.zeros(1, np.int64)
    return ByteStream(data, one, one, np.ones(1, bool), closed=True, start_seen=True)


def sent_value(fields: list[tuple[str, str]], name: str) -> str | None:
    """The value of ``name`` as a recipient combines the sent fields (names in any case)."""
    values = [v for n, v in fields if n.lower() == name]
    return ("; " if name == "cookie" else ", ").join(values) if values else None


requests = st.lists(
    st.tuples(
        st.sampled_from(["GET", "POST", "\u00e9"]),
        st.text(max_size=8),
        st.lists(st.tuples(st.sampled_from(NAMES), st.text(max_size=6)), max_size=5),
    ),
    min_size=1,
    max_size=6,
)


@settings(max_examples=150, deadline=None)
@given(requests, st.booleans())
def test_kept_values_and_request_fields_are_the_sent_ones(requests, huffman) -> None:
    enc = hpack.Encoder()
    up, down = [PREFACE, frame(0x4, 0, 0, b"")], [frame(0x4, 0, 0, b"")]
    sent = []
    for k, (method, path, regular) in enumerate(requests):
        sid = 2 * k + 1
        fields = [(":method", method), (":path", path), (":authority", "a"), *regular]
        block = enc.encode([(n.encode(), v.encode()) for n, v in fields], huffman=huffman)
        up.append(frame(0x1, 0x4 | 0x1, sid, block))  # END_HEADERS, END_STREAM
        sent.append(fields)
    client, server = stream(b"".join(up)), stream(b"".join(down))
    skipped = Skipped()
    got = columns(client, server, skipped, KEEP)
    assert not skipped
    assert got.text(got.method) == [method for method, _, _ in requests]
    assert got.text(got.path) == [path for _, path, _ in requests]
    assert got.text(got.authority) == ["a"] * len(requests)
    for name in KEEP:
        assert got.text(got.kept[name], None) == [sent_value(f, name) for f in sent], name
    assert got.text(got.content_type) == [sent_value(f, "content-type") or "" for f in sent]
    objects = exchanges(client, server, Skipped())
    for name in KEEP:
        assert [x.headers.get(name) for x in objects] == got.text(got.kept[name], None)
