"""The compiled walk of HTTP/2 frames against hyperframe's parse of the same bytes (the
reference): where each frame starts and ends, what is taken from it, and where and why the walk
stops, on random frames of every type, padded or not, with holes and cuts."""

from __future__ import annotations

import struct

import numpy as np
from hyperframe.exceptions import HyperframeError
from hyperframe.frame import Frame, SettingsFrame
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tacit.formats.protocols.common import CUT, GAP
from tacit.formats.protocols.http2 import MALFORMED, _frames
from tacit.formats.tcp_stream import ByteStream

_ON_STREAM = {0x0, 0x1, 0x3, 0x5, 0x9}  # DATA, HEADERS, RST_STREAM, PUSH_PROMISE, CONTINUATION


def reference(s: ByteStream, max_frame: int) -> tuple[list, tuple[str, int] | None]:
    """The frames as hyperframe reads them: (start, end, type, flags, stream, what is used),
    and (reason, offset) where the walk stops."""
    out, data, pos = [], s.data, 0
    while pos < len(data):
        if pos + 9 > len(data):
            return out, (CUT, pos)
        length = int.from_bytes(data[pos : pos + 3], "big")
        kind, flags = data[pos + 3], data[pos + 4]
        sid = int.from_bytes(data[pos + 5 : pos + 9], "big") & 0x7FFFFFFF
        end = pos + 9 + length
        if length > max_frame:
            return out, ("HTTP/2 frame longer than max_frame", pos)
        if end > len(data):
            return out, (CUT, pos)
        if s.hole(pos, end):
            return out, (GAP, pos)
        if not sid and kind in _ON_STREAM:
            return out, (MALFORMED, pos)
        used: object = None
        if kind == 0x9:
            used = data[pos + 9 : end]
        elif kind in (0x0, 0x1, 0x4, 0x5):
            try:
                frame = Frame.parse_frame_header(memoryview(data[pos : pos + 9]))[0]
                frame.parse_body(memoryview(data[pos + 9 : end]))
            except HyperframeError:
                return out, (MALFORMED, pos)
            if kind == 0x4:
                used = frame.settings.get(SettingsFrame.HEADER_TABLE_SIZE, 0)
            else:
                used = len(frame.data) if kind == 0x0 else frame.data
        out.append((pos, end, kind, flags, sid, used))
        pos = end
    return out, None


frames = st.tuples(
    st.sampled_from([0x0, 0x1, 0x2, 0x3, 0x4, 0x5, 0x6, 0x8, 0x9, 0xB]),  # 0xB: unknown
    st.sampled_from([0x0, 0x1, 0x4, 0x8, 0x20, 0x2D, 0xFF]),
    st.sampled_from([0, 1, 2, 3, 0x80000001]),  # the reserved bit set on the last
    st.one_of(
        st.binary(max_size=40),
        st.lists(  # settings: SETTINGS_HEADER_TABLE_SIZE among others
            st.tuples(st.sampled_from([1, 3, 4]), st.integers(0, 2**32 - 1)), max_size=3
        ).map(lambda kv: b"".join(struct.pack(">HL", k, v) for k, v in kv)),
        st.tuples(st.binary(max_size=12), st.integers(-6, 2)).map(  # a pad length first, near
            lambda p: bytes([max(0, len(p[0]) + p[1])]) + p[0]  # what the payload can hold
        ),
    ),
)


def _edge(kind: int, flags: int, payload: bytes, sid: int = 1) -> dict:
    return {"raw": [(kind, flags, sid, payload)], "max_frame": 1 << 24, "pieces": [], "cut": None}


@settings(max_examples=500, deadline=None)
@example(**_edge(0x1, 0x8, b"\x02\0\0"))  # HEADERS: padding fills what follows its length
@example(**_edge(0x1, 0x8, b"\x01\0\0"))  # one byte of fragment left
@example(**_edge(0x0, 0x8, b"\x02\0\0"))  # DATA: the same padding fits (§6.1)
@example(**_edge(0x0, 0x8, b"\x03\0\0"))
@example(**_edge(0x0, 0x8, b""))  # PADDED without the pad length
@example(**_edge(0x1, 0x28, b"\x00\0\0\0\0"))  # PRIORITY fields cut short
@example(**_edge(0x1, 0x28, b"\x03\0\0\0\0\0\0"))  # padding over the priority fields
@example(**_edge(0x5, 0x0, b"\0\0\0\x02hdr"))  # PUSH_PROMISE of stream 2
@example(**_edge(0x5, 0x0, b"\0\0\0\x03hdr"))  # of an odd stream
@example(**_edge(0x5, 0x0, b"\0\0\0"))  # promised stream cut short
@example(**_edge(0x4, 0x1, b"\0\x01\0\0\0\0", sid=0))  # SETTINGS ACK with a setting
@example(**_edge(0x4, 0x0, b"\0\x01\0\0\x10\0\0\x01\0\0\0\x20", sid=0))  # the last wins
@example(**_edge(0x4, 0x0, b"\0\x01\0\0\0\0", sid=1))  # SETTINGS on a stream
@example(**_edge(0x4, 0x0, b"\0\x01\0\0\0", sid=0))  # a setting cut short
@given(
    st.lists(frames, max_size=8),
    st.one_of(st.just(1 << 24), st.integers(0, 60)),
    st.lists(st.tuples(st.integers(0, 400), st.booleans()), max_size=4),
    st.one_of(st.none(), st.integers(0, 400)),
)
def test_walk_reads_frames_as_hyperframe_does(raw, max_frame, pieces, cut) -> None:
    data = b"".join(
        len(p).to_bytes(3, "big") + bytes([k, f]) + sid.to_bytes(4, "big") + p
        for k, f, sid, p in raw
    )
    if cut is not None:
        data = data[:cut]
    starts = sorted({0} | {at for at, _ in pieces if at < max(len(data), 1)})
    lost = {at for at, held in pieces if not held}
    held = np.array([at not in lost for at in starts])
    s = ByteStream(data, np.array(starts), np.zeros(len(starts), np.int64), held, True, True)
    want, stop = reference(s, max_frame)
    got, got_stop, got_settings = _frames(s, 0, max_frame)
    assert (got_stop.reason, got_stop.at) == stop if got_stop else stop is None
    assert got_settings == [[pos, size] for pos, _, kind, _, _, size in want if kind == 0x4]
    used = []
    for pos, end, kind, flags, sid, a, b in got:
        if kind in (0x1, 0x5, 0x9):
            what: object = data[a:b]
        else:
            what = a if kind in (0x0, 0x4) else None
        used.append((pos, end, kind, flags, sid, what))
    assert used == want
