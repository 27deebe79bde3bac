"""HTTP/2 (RFC 9113), gRPC included: the exchanges of one connection from its two byte streams.

HTTP/2 multiplexes streams on one connection (§5), so responses do not come in request order
and this module has no ``requests``/``responses`` pair like the other protocols: ``exchanges``
reads both directions and returns one :class:`Exchange` per stream.

Frames (§4.1 header, §6 definitions) are walked by one compiled loop per direction; field
blocks (a HEADERS or PUSH_PROMISE frame and its CONTINUATION frames, §4.3) are decoded by one
HPACK decoder (RFC 7541, :mod:`.hpack_decoder`) per direction, every block in order, since each
may change the decoder's dynamic table. h2's connection state machine is not used: a passive
observer sends nothing, and the captures it reads may lack a connection's start or bytes in the
middle.

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
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import numpy as np
from numba import njit

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
_DATA, _HEADERS, _RST, _SETTINGS, _PUSH, _CONTINUATION = 0x0, 0x1, 0x3, 0x4, 0x5, 0x9  # §6
_END_STREAM, _END_HEADERS, _PADDED, _PRIORITY = 0x1, 0x4, 0x8, 0x20  # frame flags (§6.1, §6.2)
_ACK = 0x1  # SETTINGS (§6.5)
_HEADER_TABLE_SIZE = 0x1  # the SETTINGS_HEADER_TABLE_SIZE identifier (§6.5.2)
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
    up, up_stop, up_settings = _frames(client, len(PREFACE), max_frame)
    down, down_stop, down_settings = (
        ([], Stop(MIDWAY, 0), []) if not server.start_seen else _frames(server, 0, max_frame)
    )
    streams: dict[int, Exchange] = {}
    requests = _Blocks(client, _limits(server, down_settings), _request_head)
    _read(client, up, up_stop, requests, streams, conn, True)
    responses = _Blocks(server, _limits(client, up_settings), _response_head)
    _read(server, down, down_stop, responses, streams, conn, False)
    return list(streams.values())


_Frames = list[tuple[int, ...]]
_Head = TypeVar("_Head")
_STOPS = ("", CUT, "HTTP/2 frame longer than max_frame", GAP, MALFORMED)
"""Why the walk of a stream's frames stopped, by the code :func:`_walk` returns."""


def _frames(
    s: ByteStream, pos: int, max_frame: int
) -> tuple[_Frames, Stop | None, list[list[int]]]:
    """The frames of ``s`` from ``pos`` as (first byte, end, type, flags, stream id, a, b), up
    to the first that cannot be read, why it could not (None when the stream ends at a frame
    boundary), and (first byte, ``a``) of its SETTINGS frames.

    ``a`` and ``b`` are what is used of a frame: a DATA frame's payload size without padding in
    ``a`` (§6.1); the field block fragment of HEADERS, PUSH_PROMISE and CONTINUATION at
    ``data[a:b]`` (§6.2, §6.6, §6.10); the SETTINGS_HEADER_TABLE_SIZE a SETTINGS frame sets in
    ``a`` (0 if none, §6.5); 0 otherwise.
    """
    rows, code, at = _walk(s.data, pos, max_frame, s.piece, s.holes)
    settings = rows[rows[:, 2] == _SETTINGS][:, [0, 5]].tolist()
    frames = list(zip(*rows.T.tolist(), strict=True))
    return frames, Stop(_STOPS[code], at) if code else None, settings


@njit(cache=True)
def _walk(data, pos, max_frame, piece, holes):  # pragma: no cover - compiled
    """The frame walk of :func:`_frames`: the rows, and the code in :data:`_STOPS` of why it
    stopped where it did (0: the end of the stream).

    Frame payloads are checked as far as what is taken from them needs (§6.1, §6.2, §6.5,
    §6.6): padding that fits, the priority fields and promised stream id present, a promised
    stream id even and not 0, SETTINGS on stream 0 in whole 6-byte settings (none in an ACK).
    """
    end = len(data)
    rows = np.zeros((min(end // _HEADER + 1, 1024), 7), np.int64)
    n = 0
    any_hole = holes[-1] > 0
    while pos < end:
        body = pos + _HEADER
        if body > end:
            return rows[:n], 1, pos
        length = (np.int64(data[pos]) << 16) | (np.int64(data[pos + 1]) << 8) | data[pos + 2]
        kind, flags = np.int64(data[pos + 3]), np.int64(data[pos + 4])
        sid = _be32(data, pos + 5) & _STREAM_ID
        nxt = body + length
        if length > max_frame:
            return rows[:n], 2, pos
        if nxt > end:
            return rows[:n], 1, pos
        if any_hole:
            k0 = np.searchsorted(piece, pos, side="right") - 1
            k1 = np.searchsorted(piece, nxt - 1, side="right") - 1
            if holes[k1 + 1] != holes[k0]:
                return rows[:n], 3, pos
        if not sid and kind in (_DATA, _HEADERS, _RST, _PUSH, _CONTINUATION):  # §6: on a stream
            return rows[:n], 4, pos
        a = b = 0
        if kind == _CONTINUATION:
            a, b = body, nxt
        elif kind in (_DATA, _HEADERS, _PUSH):
            skip = pad = 0
            if flags & _PADDED:
                if not length:
                    return rows[:n], 4, pos
                skip, pad = 1, np.int64(data[body])
            if kind == _HEADERS and flags & _PRIORITY:
                if length - skip < 5:
                    return rows[:n], 4, pos
                a = body + skip + 5
            elif kind == _PUSH:
                if length - skip < 4:
                    return rows[:n], 4, pos
                promised = _be32(data, body + skip)
                if promised == 0 or promised % 2:
                    return rows[:n], 4, pos
                a = body + skip + 4
            else:
                a = body + skip
            if pad and pad >= (length - skip if kind == _HEADERS else length):
                return rows[:n], 4, pos
            b = max(a, nxt - pad)
            if kind == _DATA:
                a, b = b - a, 0
        elif kind == _SETTINGS:
            if sid or (flags & _ACK and length) or length % 6:
                return rows[:n], 4, pos
            for k in range(body, nxt, 6):
                if (np.int64(data[k]) << 8 | data[k + 1]) == _HEADER_TABLE_SIZE:
                    a = _be32(data, k + 2)
        if n == len(rows):
            more = np.zeros((2 * n, 7), np.int64)
            more[:n] = rows
            rows = more
        row = rows[n]
        row[0], row[1], row[2], row[3], row[4], row[5], row[6] = pos, nxt, kind, flags, sid, a, b
        n += 1
        pos = nxt
    return rows[:n], 0, pos


@njit(cache=True, inline="always")
def _be32(data, i):  # pragma: no cover - compiled
    return (
        (np.int64(data[i]) << 24)
        | (np.int64(data[i + 1]) << 16)
        | (np.int64(data[i + 2]) << 8)
        | np.int64(data[i + 3])
    )


def _limits(s: ByteStream, settings: list[list[int]]) -> list[tuple[int, int]]:
    """(capture time, value) where the largest SETTINGS_HEADER_TABLE_SIZE the sender of ``s``
    has advertised in ``settings`` (first byte, value) rises above the ones before (the initial
    value included)."""
    out = []
    top = _INITIAL_TABLE
    for pos, size in settings:
        if size > top:
            top = size
            out.append((s.time(pos), size))
    return out


class _Blocks(Generic[_Head]):
    """The HPACK decoder of the field blocks one stream carries, and what ``parse`` makes of
    each block's fields.

    A decoder's dynamic table may not exceed what its own endpoint advertised in
    SETTINGS_HEADER_TABLE_SIZE (RFC 9113 §6.5.2; the encoder announces its size with dynamic
    table size updates inside blocks, RFC 7541 §4.2, §6.3, which the decoder applies). The limit
    set is the largest value the receiving endpoint advertised in SETTINGS captured no later than
    the block: a peer may go on using the larger size until it has received a decrease, and
    cannot use an increase before the SETTINGS frame has passed the capture point.

    Blocks that leave the dynamic table as it was decode the same way while it stays so (RFC 7541
    §3.2: decoding depends only on the table); what they parse to is remembered until the table
    changes, since a connection repeats such blocks for every request of one kind.
    """

    def __init__(
        self,
        s: ByteStream,
        raises: list[tuple[int, int]],
        parse: Callable[[list[tuple[str, str]]], _Head],
    ) -> None:
        self.s, self.raises, self.parse = s, raises, parse
        self.decoder = HpackDecoder(_INITIAL_TABLE, _MAX_FIELD_SECTION)
        self.known: dict[bytes, _Head] = {}

    def decode(self, pos: int, block: bytes) -> _Head:
        """What the fields of the block whose first frame starts at ``pos`` parse to; they are
        read as UTF-8 (invalid bytes replaced)."""
        while self.raises and self.raises[0][0] <= self.s.time(pos):
            self.decoder.limit = self.raises.pop(0)[1]
        known = self.known.get(block)
        if known is not None:
            return known
        head = self.parse(self.decoder.decode(block, text=True))
        if self.decoder.changed:
            self.known.clear()
        else:
            if len(self.known) >= _KNOWN_BLOCKS:
                self.known.clear()
            self.known[block] = head
        return head


def _block(data: bytes, frames: _Frames, i: int, stop: Stop | None) -> tuple[bytes, int, int]:
    """The field block that starts with frame ``i``, the index of the frame after it, and the
    stream offset after its last frame (§6.10: CONTINUATION frames follow with nothing between)."""
    pos, end, _, flags, sid, a, b = frames[i]
    parts = [data[a:b]]
    while not flags & _END_HEADERS:
        i += 1
        if i == len(frames):
            raise Stop(stop.reason if stop else CUT, pos)
        _, end, kind, flags, more, a, b = frames[i]
        if kind != _CONTINUATION or more != sid:
            raise Stop("HTTP/2 field block interrupted (RFC 9113 §6.10)", pos)
        parts.append(data[a:b])
    return b"".join(parts), i + 1, end


def _read(
    s: ByteStream,
    frames: _Frames,
    stop: Stop | None,
    blocks: _Blocks[Any],
    streams: dict[int, Exchange],
    conn: Skipper,
    client: bool,
) -> None:
    """Read one direction's frames into ``streams``: the client's HEADERS open exchanges and
    carry the request; the server's frames answer them."""
    side = "client" if client else "server"
    data, decode, get = s.data, blocks.decode, streams.get
    i, n = 0, len(frames)
    try:
        while i < n:
            pos, end, kind, flags, sid, a, b = frames[i]
            i += 1
            if kind == _DATA:
                ex = get(sid)
                if ex is None:
                    conn.skip(_orphan(sid), end - pos)
                    continue
                if client:
                    ex.request_bytes += a
                else:
                    ex.response_bytes += a
            elif kind in (_HEADERS, _PUSH):
                if flags & _END_HEADERS:
                    block = data[a:b]
                else:
                    block, i, end = _block(data, frames, i - 1, stop)
                try:
                    head = decode(pos, block)
                except HpackError as e:
                    raise Stop(UNDECODABLE, pos) from e
                ex = get(sid)
                if kind == _PUSH:
                    conn.skip(PUSH, end - pos)
                    continue
                if ex is None and client:
                    ex = streams[sid] = _request(sid, pos, head)
                elif ex is None:
                    conn.skip(_orphan(sid), end - pos)
                    continue
                elif not client:
                    _response(ex, pos, head)
            elif kind == _RST:
                ex = get(sid)
                if ex is None:
                    conn.skip(_orphan(sid), end - pos)
                    continue
                ex.reset = True
                _end(ex, client, end)
                continue
            elif kind == _CONTINUATION:
                raise Stop("HTTP/2 CONTINUATION outside a field block (RFC 9113 §6.10)", pos)
            else:
                continue  # connection control, PRIORITY, WINDOW_UPDATE, unknown types (§5.5)
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


_RequestHead = tuple[str, str, str, str, dict[str, str]]
"""What an exchange takes from a request's field block: method, path, authority, content-type,
and the regular fields."""
_ResponseHead = tuple[int, int, str]
"""What an exchange takes from a response's field block: its first final status, its last
grpc-status (-1 where absent) and its first content-type that is not empty ("" if none)."""


def _request_head(fields: list[tuple[str, str]]) -> _RequestHead:
    method = path = authority = ""
    headers: dict[str, str] = {}
    for name, value in fields:
        if name[:1] == ":":
            if name == ":method":
                method = value
            elif name == ":path":
                path = value
            elif name == ":authority":
                authority = value
            continue
        key = name.lower()
        if key in headers:
            value = headers[key] + ("; " if key == "cookie" else ", ") + value
        headers[key] = value
    return method, path, authority, headers.get("content-type", ""), headers


def _request(sid: int, pos: int, head: _RequestHead) -> Exchange:
    method, path, authority, content_type, headers = head
    return Exchange(
        sid,
        pos,
        method=method,
        path=path,
        authority=authority,
        content_type=content_type,
        headers=headers.copy(),  # the block's head may be shared by later requests
    )


def _response_head(fields: list[tuple[str, str]]) -> _ResponseHead:
    """A response field block: informational or final header section, or trailers (§8.1)."""
    status = grpc_status = -1
    content_type = ""
    for name, value in fields:
        if name == ":status" and value.isascii() and value.isdigit():
            if status < 0 and not 100 <= int(value) < 200:
                status = int(value)
        elif name == "grpc-status" and value.isascii() and value.isdigit():
            grpc_status = int(value)
        elif name == "content-type" and not content_type:
            content_type = value
    return status, grpc_status, content_type


def _response(ex: Exchange, pos: int, head: _ResponseHead) -> None:
    status, grpc_status, content_type = head
    if ex.response_start < 0:
        ex.response_start = pos
    if ex.status < 0:
        ex.status = status
    if grpc_status >= 0:
        ex.grpc_status = grpc_status
    if not ex.content_type:
        ex.content_type = content_type
