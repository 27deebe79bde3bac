"""HTTP/2 (RFC 9113), gRPC included: the exchanges of one connection from its two byte streams.

HTTP/2 multiplexes streams on one connection (§5), so responses do not come in request order
and this module has no ``requests``/``responses`` pair like the other protocols: ``exchanges``
reads both directions and returns one :class:`Exchange` per stream.

Frames (§4.1 header, §6 definitions) are parsed by hyperframe; field blocks (a HEADERS or
PUSH_PROMISE frame and its CONTINUATION frames, §4.3) are decoded by one HPACK decoder (RFC 7541,
:mod:`.hpack_decoder`) per direction, every block in order, since each may change the decoder's
dynamic table. h2's connection state machine is not used: a passive observer sends nothing, and
the captures it reads may lack a connection's start or bytes in the middle.

What the bytes cannot tell:

- A connection whose client preface (§3.4) was not captured: the dynamic tables hold fields from
  blocks never seen (RFC 7541 §2.3.2), and frame boundaries are unknown. It gives no exchanges;
  all its bytes are counted under :data:`MIDWAY`. A server stream whose start was not seen is
  counted likewise, and its responses are missing.
- After a gap in the capture, a frame cut by the end of the capture, a malformed frame or a field
  block that does not decode, frame boundaries or the decoder's state are lost: that direction is
  read no further and the rest of it is counted as "client: <reason>" or "server: <reason>".
- Server push (§8.4): PUSH_PROMISE blocks are decoded (they change the table) but pushed streams
  make no exchange; their frames are counted under :data:`PUSH`.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field
from typing import Any

from hyperframe.exceptions import HyperframeError
from hyperframe.frame import (
    ContinuationFrame,
    DataFrame,
    Frame,
    HeadersFrame,
    PushPromiseFrame,
    RstStreamFrame,
    SettingsFrame,
)

from tacit.formats.protocols.common import CUT, GAP, Skipper, Stop
from tacit.formats.protocols.hpack_decoder import HpackDecoder, HpackError
from tacit.formats.tcp_stream import ByteStream

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
"""The client connection preface (§3.4)."""
SNIFF = re.compile(re.escape(PREFACE))
"""The first bytes of a client stream that speaks HTTP/2 with prior knowledge or after TLS."""

MIDWAY = "HTTP/2 header compression state unknown (capture began mid-connection)"
NOT_HTTP2 = "HTTP/2 client stream without the connection preface"
PUSH = "HTTP/2 server push not followed"
ORPHAN = "HTTP/2 frames of a stream whose request was not captured"
MALFORMED = "malformed HTTP/2 frame"
UNDECODABLE = "HPACK field block that does not decode (decoder state lost)"

_HEADER = 9  # frame header length (§4.1)
_INITIAL_TABLE = 4096  # SETTINGS_HEADER_TABLE_SIZE until a SETTINGS frame changes it (§6.5.2)
_MAX_FIELD_SECTION = 1 << 24
"""The largest decoded field section accepted: generous, an observer rejects nothing a peer took."""
_DATA, _HEADERS, _RST = DataFrame.type, HeadersFrame.type, RstStreamFrame.type
_SETTINGS, _PUSH, _CONTINUATION = SettingsFrame.type, PushPromiseFrame.type, ContinuationFrame.type
_END_STREAM, _END_HEADERS, _PADDED, _PRIORITY = 0x1, 0x4, 0x8, 0x20  # frame flags (§6.1, §6.2)
_STRUCTURED = frozenset((_DATA, _HEADERS, _PUSH, _SETTINGS))
_ON_STREAM = frozenset((_DATA, _HEADERS, _RST, _PUSH, _CONTINUATION))  # never on stream 0 (§6)
_STREAM_ID = 0x7FFFFFFF  # the stream identifier's 31 bits (§4.1)
_KNOWN_BLOCKS = 4096


@dataclass(slots=True)
class Exchange:
    """One HTTP/2 stream: a request and its response. Offsets are into the client stream
    (``request_*``) or the server stream (``response_*``); -1 where the capture holds none.

    - ``request_start``: the first byte of the request's HEADERS frame.
    - ``request_end``: just after the frame that ended the client's side of the stream: the one
      with END_STREAM (the last CONTINUATION of its field block when END_STREAM is on a HEADERS
      frame), or the client's RST_STREAM if that came first.
    - ``response_start``: the first byte of the server's first HEADERS frame on the stream (an
      informational 1xx response's included).
    - ``response_end``: just after the server's frame that ended the server's side: END_STREAM
      (as for ``request_end``) or the server's RST_STREAM. A stream the client reset keeps -1
      unless the server's side had ended, or ends, too.
    - ``method``, ``path``, ``authority``: the request's pseudo-header fields (§8.3.1), "" when
      absent; ``status``: the final (non-1xx) ``:status``; ``grpc_status``: ``grpc-status`` from
      the response's trailers or trailers-only response (gRPC over HTTP/2).
    - ``content_type``: the request's ``content-type``, else the response's.
    - ``request_bytes`` / ``response_bytes``: DATA payload bytes, padding excluded (§6.1).
    - ``reset``: an RST_STREAM for the stream was seen from either side (§6.4).
    - ``headers``: the request's regular fields, names lower case; values repeated under one name
      joined by ", " (RFC 9110 §5.3), cookies by "; " (§8.2.3).
    """

    stream_id: int
    request_start: int
    request_end: int = -1
    response_start: int = -1
    response_end: int = -1
    method: str = ""
    path: str = ""
    authority: str = ""
    status: int = -1
    grpc_status: int = -1
    content_type: str = ""
    request_bytes: int = 0
    response_bytes: int = 0
    reset: bool = False
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def grpc(self) -> bool:
        """Whether the exchange is a gRPC call (its content-type is application/grpc[+...])."""
        return self.content_type.startswith("application/grpc")


def exchanges(
    client: ByteStream, server: ByteStream, conn: Skipper, max_frame: int = 1 << 24
) -> list[Exchange]:
    """Every stream of one connection, in order of ``request_start``: ``client`` and ``server``
    are its two directions.

    Counted on ``conn`` by reason (module docstring): the bytes that could not be read, and the
    frames of streams that make no exchange (pushed ones, and those whose request was not
    captured). The preface and connection control frames (SETTINGS, PING, GOAWAY,
    WINDOW_UPDATE, PRIORITY, unknown types) are read and belong to no exchange; they are not
    counted. A frame longer than ``max_frame`` stops its direction like a malformed one; the
    default accepts every length the 24-bit field can hold (§4.1)."""
    head = client.data[: len(PREFACE)]
    if not client.start_seen or client.hole(0, len(head)) or not PREFACE.startswith(head):
        _skip(conn, MIDWAY if not client.start_seen else NOT_HTTP2, client.end + server.end)
        return []
    if len(head) < len(PREFACE):
        _skip(conn, f"client: {CUT}", client.end + server.end)
        return []
    up, up_stop = _frames(client, len(PREFACE), max_frame)
    down, down_stop = (
        ([], Stop(MIDWAY, 0)) if not server.start_seen else _frames(server, 0, max_frame)
    )
    streams: dict[int, Exchange] = {}
    _read(client, up, up_stop, _Blocks(client, _limits(server, down)), streams, conn, True)
    _read(server, down, down_stop, _Blocks(server, _limits(client, up)), streams, conn, False)
    return list(streams.values())


_Frames = list[tuple[int, int, int, int, int, Any]]
_FRAME_HEADER = struct.Struct(">HBBBL")  # length (24 bits), type, flags, R + stream id (§4.1)


def _frames(s: ByteStream, pos: int, max_frame: int) -> tuple[_Frames, Stop | None]:
    """The frames of ``s`` from ``pos`` as (first byte, end, type, flags, stream id, contents),
    up to the first that cannot be read, and why it could not (None when the stream ends at a
    frame boundary).

    The contents are what is used of a frame: a DATA frame's payload size without padding
    (§6.1), the field block fragment of HEADERS, PUSH_PROMISE and CONTINUATION (§6.2, §6.6,
    §6.10), the SETTINGS_HEADER_TABLE_SIZE a SETTINGS frame sets (0 if none, §6.5). hyperframe
    parses the payloads that have a structure; the payload of an unpadded DATA frame, of a
    HEADERS frame with neither PADDED nor PRIORITY flag and of a CONTINUATION frame is the data
    or fragment itself.
    """
    out: _Frames = []
    data = s.data
    view = memoryview(data)
    holes = bool(s.holes[-1])
    end = s.end
    unpack = _FRAME_HEADER.unpack_from
    while pos < end:
        body = pos + _HEADER
        if body > end:
            return out, Stop(CUT, pos)
        high, low, kind, flags, sid = unpack(data, pos)
        sid &= _STREAM_ID
        nxt = body + (high << 8 | low)
        if nxt - body > max_frame:
            return out, Stop("HTTP/2 frame longer than max_frame", pos)
        if nxt > end:
            return out, Stop(CUT, pos)
        if holes and s.hole(pos, nxt):
            return out, Stop(GAP, pos)
        if not sid and kind in _ON_STREAM:
            return out, Stop(MALFORMED, pos)
        if kind == _DATA and not flags & _PADDED:
            contents: Any = nxt - body
        elif kind == _CONTINUATION or (kind == _HEADERS and not flags & (_PADDED | _PRIORITY)):
            contents = data[body:nxt]
        elif kind in _STRUCTURED:
            try:
                frame: Any = Frame.parse_frame_header(view[pos:body])[0]
                frame.parse_body(view[body:nxt])
            except HyperframeError:
                return out, Stop(MALFORMED, pos)
            if kind == _SETTINGS:
                contents = frame.settings.get(SettingsFrame.HEADER_TABLE_SIZE, 0)
            else:
                contents = len(frame.data) if kind == _DATA else frame.data
        else:
            contents = None
        out.append((pos, nxt, kind, flags, sid, contents))
        pos = nxt
    return out, None


def _limits(s: ByteStream, frames: _Frames) -> list[tuple[int, int]]:
    """(capture time, value) where the largest SETTINGS_HEADER_TABLE_SIZE the sender of ``s``
    has advertised rises above the ones before (the initial value included)."""
    out = []
    top = _INITIAL_TABLE
    for pos, _, kind, _, _, size in frames:
        if kind == _SETTINGS and size > top:
            top = size
            out.append((s.time(pos), size))
    return out


class _Blocks:
    """The HPACK decoder of the field blocks one stream carries.

    A decoder's dynamic table may not exceed what its own endpoint advertised in
    SETTINGS_HEADER_TABLE_SIZE (RFC 9113 §6.5.2; the encoder announces its size with dynamic
    table size updates inside blocks, RFC 7541 §4.2, §6.3, which the decoder applies). The limit
    set is the largest value the receiving endpoint advertised in SETTINGS captured no later than
    the block: a peer may go on using the larger size until it has received a decrease, and
    cannot use an increase before the SETTINGS frame has passed the capture point.

    Blocks that leave the dynamic table as it was decode the same way while it stays so (RFC 7541
    §3.2: decoding depends only on the table); their fields are remembered until the table
    changes, since a connection repeats such blocks for every request of one kind.
    """

    def __init__(self, s: ByteStream, raises: list[tuple[int, int]]) -> None:
        self.s, self.raises = s, raises
        self.decoder = HpackDecoder(_INITIAL_TABLE, _MAX_FIELD_SECTION)
        self.known: dict[bytes, list[tuple[bytes, bytes]]] = {}

    def decode(self, pos: int, block: bytes) -> list[tuple[bytes, bytes]]:
        """The fields of the block whose first frame starts at ``pos``."""
        while self.raises and self.raises[0][0] <= self.s.time(pos):
            self.decoder.limit = self.raises.pop(0)[1]
        known = self.known.get(block)
        if known is not None:
            return known
        fields = self.decoder.decode(block)
        if self.decoder.changed:
            self.known.clear()
        else:
            if len(self.known) >= _KNOWN_BLOCKS:
                self.known.clear()
            self.known[block] = fields
        return fields


def _block(frames: _Frames, i: int, stop: Stop | None) -> tuple[bytes, int, int]:
    """The field block that starts with frame ``i``, the index of the frame after it, and the
    stream offset after its last frame (§6.10: CONTINUATION frames follow with nothing between)."""
    pos, end, _, flags, sid, f = frames[i]
    parts = [f]
    while not flags & _END_HEADERS:
        i += 1
        if i == len(frames):
            raise Stop(stop.reason if stop else CUT, pos)
        _, end, kind, flags, more, f = frames[i]
        if kind != _CONTINUATION or more != sid:
            raise Stop("HTTP/2 field block interrupted (RFC 9113 §6.10)", pos)
        parts.append(f)
    return b"".join(parts), i + 1, end


def _read(
    s: ByteStream,
    frames: _Frames,
    stop: Stop | None,
    blocks: _Blocks,
    streams: dict[int, Exchange],
    conn: Skipper,
    client: bool,
) -> None:
    """Read one direction's frames into ``streams``: the client's HEADERS open exchanges and
    carry the request; the server's frames answer them."""
    side = "client" if client else "server"
    i = 0
    try:
        while i < len(frames):
            pos, end, kind, flags, sid, f = frames[i]
            if kind in (_HEADERS, _PUSH):
                block, i, end = _block(frames, i, stop)
                try:
                    fields = blocks.decode(pos, block)
                except HpackError as e:
                    raise Stop(UNDECODABLE, pos) from e
                ex = streams.get(sid)
                if kind == _PUSH:
                    conn.skip(PUSH, end - pos)
                    continue
                if ex is None and client:
                    ex = streams[sid] = _request(sid, pos, fields)
                elif ex is None:
                    conn.skip(_orphan(sid), end - pos)
                    continue
                elif not client:
                    _response(ex, pos, fields)
            else:
                i += 1
                if kind == _CONTINUATION:
                    raise Stop("HTTP/2 CONTINUATION outside a field block (RFC 9113 §6.10)", pos)
                if kind != _DATA and kind != _RST:
                    continue  # connection control, PRIORITY, WINDOW_UPDATE, unknown types (§5.5)
                ex = streams.get(sid)
                if ex is None:
                    conn.skip(_orphan(sid), end - pos)
                    continue
                if kind == _RST:
                    ex.reset = True
                    _end(ex, client, end)
                    continue
                if client:
                    ex.request_bytes += f
                else:
                    ex.response_bytes += f
            if flags & _END_STREAM:
                _end(ex, client, end)
    except Stop as e:
        _skip(conn, f"{side}: {e.reason}", s.end - e.at)
        return
    if stop is not None:
        _skip(conn, f"{side}: {stop.reason}", s.end - stop.at)


def _skip(conn: Skipper, reason: str, nbytes: int) -> None:
    if nbytes:
        conn.skip(reason, nbytes)


def _orphan(sid: int) -> str:
    """Why a frame of a stream without an exchange is passed over: streams with even numbers
    are the server's, opened by push (§5.1.1)."""
    return PUSH if sid % 2 == 0 else ORPHAN


def _end(ex: Exchange, client: bool, end: int) -> None:
    if client and ex.request_end < 0:
        ex.request_end = end
    elif not client and ex.response_end < 0:
        ex.response_end = end


def _text(b: bytes) -> str:
    return b.decode("utf-8", "replace")


def _request(sid: int, pos: int, fields: list[tuple[bytes, bytes]]) -> Exchange:
    ex = Exchange(sid, pos)
    headers = ex.headers
    for name, value in fields:
        if name[:1] == b":":
            if name == b":method":
                ex.method = _text(value)
            elif name == b":path":
                ex.path = _text(value)
            elif name == b":authority":
                ex.authority = _text(value)
            continue
        key, text = _text(name).lower(), _text(value)
        if key in headers:
            text = headers[key] + ("; " if key == "cookie" else ", ") + text
        headers[key] = text
    ex.content_type = headers.get("content-type", "")
    return ex


def _response(ex: Exchange, pos: int, fields: list[tuple[bytes, bytes]]) -> None:
    """A response field block: informational or final header section, or trailers (§8.1)."""
    if ex.response_start < 0:
        ex.response_start = pos
    for name, value in fields:
        if name == b":status" and value.isdigit():
            status = int(value)
            if ex.status < 0 and not 100 <= status < 200:
                ex.status = status
        elif name == b"grpc-status" and value.isdigit():
            ex.grpc_status = int(value)
        elif name == b"content-type" and not ex.content_type:
            ex.content_type = _text(value)
