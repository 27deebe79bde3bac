"""The compiled HPACK decoder against the hpack library's (the reference): blocks its encoder
made, and malformed or arbitrary bytes, decode to the same fields or are rejected by both."""

from __future__ import annotations

from typing import Any

import hpack
import pytest
from hpack.hpack import encode_integer
from hypothesis import given, settings
from hypothesis import strategies as st

from tacit.formats.protocols.hpack_decoder import (
    DEFAULT_TABLE_SIZE,
    HpackDecoder,
    HpackError,
)

_BIG = 1 << 24  # no field section limit in the differential tests

names = st.one_of(
    st.sampled_from([b":method", b":path", b":status", b"content-type", b"x-request-id", b"te"]),
    st.binary(min_size=1, max_size=12),
)
values = st.one_of(
    st.sampled_from([b"GET", b"POST", b"200", b"/", b"application/grpc", b""]),
    st.binary(max_size=40),
    st.integers(500, 3000).map(lambda n: b"v" * n),  # an entry that evicts most of the table
)
# a field: name, value, and how it is sent (indexed when the table allows, never indexed, or
# without indexing)
fields = st.tuples(names, values, st.sampled_from(["index", "never", "none"]))
# a block: its fields, Huffman or not, the decoder's new limit (None: unchanged) and the table
# sizes the encoder sets before it (several updates in one block are allowed, §4.2)
blocks = st.tuples(
    st.lists(fields, max_size=12),
    st.booleans(),
    st.one_of(st.none(), st.sampled_from([0, 64, 256, 4096, 20000])),
    st.lists(st.integers(0, 1 << 16), max_size=2),
)


def encode(enc: hpack.Encoder, block: list, huffman: bool) -> bytes:
    """The block as the reference encoder writes it; the encoder never sends literals without
    indexing (§6.2.2), so those are never-indexed literals (§6.2.3) with the 0x10 bit cleared:
    one representation at a time, each of which starts with its first byte."""
    out = [enc.encode([], huffman=huffman)]  # pending table size updates
    for name, value, how in block:
        rep = enc.encode([(name, value, how != "index")], huffman=huffman)
        if how == "none":
            rep = bytes([rep[0] & ~0x10]) + rep[1:]
        out.append(rep)
    return b"".join(out)


Ours = tuple[HpackDecoder, HpackDecoder]
"""The compiled decoder twice, fed the same blocks: one gives bytes, the other text."""


def both(limit: int = DEFAULT_TABLE_SIZE, max_field_section: int = _BIG) -> tuple[Any, Ours]:
    ref = hpack.Decoder(max_header_list_size=max_field_section)
    ref.max_allowed_table_size = limit
    return ref, (HpackDecoder(limit, max_field_section), HpackDecoder(limit, max_field_section))


def same(ref: hpack.Decoder, ours: Ours, block: bytes) -> list | None:
    """The fields of ``block`` when both decode it to the same ones (as bytes, and as text read
    as UTF-8), None when both reject it."""
    raw, text = ours
    try:
        want = ref.decode(block, raw=True)
    except hpack.HPACKError:
        for decoder in ours:
            with pytest.raises(HpackError):
                decoder.decode(block)
        return None
    assert raw.decode(block) == want
    utf8 = [(n.decode("utf-8", "replace"), v.decode("utf-8", "replace")) for n, v in want]
    assert text.decode(block, text=True) == utf8
    assert raw.table_size == text.table_size == ref.header_table_size
    return want


@settings(max_examples=100, deadline=None)
@given(st.lists(blocks, min_size=1, max_size=8))
def test_encoded_conversations_decode_as_the_reference_does(conversation) -> None:
    enc = hpack.Encoder()
    ref, ours = both()
    limit = DEFAULT_TABLE_SIZE
    for fields_, huffman, new_limit, sizes in conversation:
        if new_limit is not None:
            limit = ref.max_allowed_table_size = ours[0].limit = ours[1].limit = new_limit
        for size in [*sizes, enc.header_table_size]:  # the last follows a lower limit (§4.2)
            if min(size, limit) != enc.header_table_size:  # the same size again unsets the
                enc.header_table_size = min(size, limit)  # encoder's pending update
        block = encode(enc, fields_, huffman)
        assert same(ref, ours, block) is not None
        assert same(ref, ours, b"") == []  # an empty block changes nothing


@settings(max_examples=200, deadline=None)
@given(st.lists(blocks, min_size=1, max_size=4), st.data())
def test_cut_blocks_are_rejected_or_decoded_as_the_reference_does(conversation, data) -> None:
    """A block cut short is valid when cut between representations, else malformed: the
    decoders agree either way, from the same dynamic table."""
    enc = hpack.Encoder()
    encoded = [encode(enc, f, huffman) for f, huffman, _, _ in conversation]
    *before, last = encoded
    cut = data.draw(st.integers(0, len(last)))
    ref, ours = both()
    for block in before:
        assert same(ref, ours, block) is not None
    same(ref, ours, last[:cut])


@settings(max_examples=500, deadline=None)
@given(st.lists(st.binary(max_size=24), min_size=1, max_size=4))
def test_arbitrary_bytes_are_rejected_or_decoded_as_the_reference_does(raw) -> None:
    ref, ours = both()
    for block in raw:
        if same(ref, ours, block) is None:
            break


def _size_update(size: int) -> bytes:
    b = encode_integer(size, 5)
    b[0] |= 0x20
    return bytes(b)


@pytest.mark.parametrize(
    ("block", "limit", "max_field_section"),
    [
        (b"\xff", DEFAULT_TABLE_SIZE, _BIG),  # integer cut before its continuation (§5.1)
        (b"\xff\x80\x80", DEFAULT_TABLE_SIZE, _BIG),  # cut inside its continuation
        (b"\xff\x80\x80\x80\x80\x80\x01", DEFAULT_TABLE_SIZE, _BIG),  # too long
        (b"\x80", DEFAULT_TABLE_SIZE, _BIG),  # index 0 (§6.1)
        (b"\xbe", DEFAULT_TABLE_SIZE, _BIG),  # index 62: the dynamic table is empty (§2.3.3)
        (b"\x7f\x20\x01a", DEFAULT_TABLE_SIZE, _BIG),  # a literal's name index out of range
        (b"\x40\x05ab", DEFAULT_TABLE_SIZE, _BIG),  # string cut short (§5.2)
        (b"\x40", DEFAULT_TABLE_SIZE, _BIG),  # literal without its name
        (b"\x41", DEFAULT_TABLE_SIZE, _BIG),  # literal without its value
        (b"\x00\x81\x18\x00", DEFAULT_TABLE_SIZE, _BIG),  # Huffman padding of zeros (§5.2)
        (b"\x00\x82\x1f\xff\x00", DEFAULT_TABLE_SIZE, _BIG),  # padding longer than 7 bits
        (b"\x00\x84\xff\xff\xff\xff\x00", DEFAULT_TABLE_SIZE, _BIG),  # EOS in the string
        (_size_update(5000), DEFAULT_TABLE_SIZE, _BIG),  # above the SETTINGS limit (§6.3)
        (b"\x82" + _size_update(100), DEFAULT_TABLE_SIZE, _BIG),  # after a field (§4.2)
        (b"\x82", 100, _BIG),  # the limit fell to 100 and the table was not shrunk (§4.2)
        (b"\x82\x84", DEFAULT_TABLE_SIZE, 79),  # two fields of 80 bytes (§4.1), 79 accepted
    ],
)
def test_malformed_blocks_are_rejected_as_the_reference_does(
    block: bytes, limit: int, max_field_section: int
) -> None:
    ref, ours = both(limit, max_field_section)
    assert same(ref, ours, block) is None


def test_valid_edges_decode() -> None:
    """The longest integer allowed, a 7-bit all-ones padding, empty strings, a size update to 0
    and back, an entry that names an entry it evicts (§4.4), and text that is not UTF-8."""
    ref, ours = both()
    assert same(ref, ours, b"\x00\x81\x1f\x00") == [(b"a", b"")]  # "a" padded with 111
    assert same(ref, ours, b"\x00\x80\x00") == [(b"", b"")]
    assert same(ref, ours, b"\x3f\xe1\x9f\x80\x80\x00\x82")  # 4096 in 5 continuation bytes
    big = b"\x40\x01n" + encode_integer(4000, 7) + b"v" * 4000
    assert same(ref, ours, big)
    evicts = b"\x7e" + encode_integer(4000, 7) + b"w" * 4000  # names entry 62, then evicts it
    assert same(ref, ours, evicts) == [(b"n", b"w" * 4000)]
    assert same(ref, ours, _size_update(0) + _size_update(4096) + b"\x82")
    assert same(ref, ours, b"\x00\x02\xc3\xa9\x02\xff\x41") == [(b"\xc3\xa9", b"\xffA")]
    assert ours[1].decode(b"\x00\x01k\x02\xff\x41", text=True) == [("k", "\ufffdA")]


def test_entries_that_fill_the_table_exactly_stay() -> None:
    """Eviction stops as soon as the size is at most the maximum (§4.4): two entries of 2048
    bytes each (§4.1) fill 4096 and both remain; a third entry evicts the older."""
    ref, ours = both()
    fill = [(b"a", b"x" * 2015), (b"b", b"y" * 2015)]
    assert same(ref, ours, hpack.Encoder().encode(fill, huffman=False))
    assert same(ref, ours, b"\xbe\xbf") == fill[::-1]  # 62: the newest, 63: the older
    assert same(ref, ours, b"\x40\x01c\x00")  # 33 bytes more (§4.1): "a" goes
    assert same(ref, ours, b"\xbe\xbf") == [(b"c", b""), (b"b", b"y" * 2015)]
    with pytest.raises(HpackError, match="index"):
        ours[0].decode(b"\xc0")


def test_limit_above_the_default_grows_the_table() -> None:
    enc = hpack.Encoder()
    ref, ours = both(limit=1 << 16)
    enc.header_table_size = 1 << 16
    fields_ = [(b"x-%d" % i, b"y" * 900) for i in range(60)]  # 55k bytes of entries
    assert same(ref, ours, enc.encode(fields_)) == fields_
    assert same(ref, ours, enc.encode(fields_)) == fields_  # all indexed now
    assert same(ref, ours, enc.encode(fields_[::-1])) == fields_[::-1]


@pytest.mark.parametrize("bad", [-1])
def test_negative_settings_are_refused(bad: int) -> None:
    with pytest.raises(ValueError, match="at least 0"):
        HpackDecoder(limit=bad)
    with pytest.raises(ValueError, match="at least 0"):
        HpackDecoder().limit = bad


def test_changed_tells_whether_the_table_changed() -> None:
    enc = hpack.Encoder()
    ours = HpackDecoder()
    first = enc.encode([(b"x-id", b"1")])
    ours.decode(first)
    assert ours.changed
    again = enc.encode([(b"x-id", b"1")])  # indexed now: the table stays as it is
    assert ours.decode(again) == [(b"x-id", b"1")]
    assert not ours.changed
