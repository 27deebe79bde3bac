"""HTTP/2 (RFC 9113), gRPC included: the exchanges of one connection from its two byte streams.

HTTP/2 multiplexes streams on one connection (§5), so responses do not come in request order
and this module has no ``requests``/``responses`` pair like the other protocols: ``exchanges``
reads both directions and returns one :class:`Exchange` per stream; ``columns`` returns the
same as columns (:class:`Streams`), with only the request header fields asked for.

Frames (§4.1 header, §6 definitions) are found by one compiled loop per direction and read by
another, which keeps the streams' state in a table; field blocks (a HEADERS or PUSH_PROMISE
frame and its CONTINUATION frames, §4.3) are decoded in that loop by one HPACK decoder
(RFC 7541, :mod:`.hpack_decoder`) per direction, every block in order, since each may change
the decoder's dynamic table, and the fields an exchange takes are read there, their values
interned once per connection. h2's connection state machine is not used: a passive
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

import itertools
import re
from dataclasses import dataclass, field, fields
from typing import Any, overload

import numpy as np
from numba import njit

from tacit.formats.protocols.common import CUT, GAP, Skipper, Stop
from tacit.formats.protocols.hpack_decoder import (
    CHANGED,
    FIELDS,
    LIMIT,
    NEED_OUT,
    NEED_TABLE,
    HpackDecoder,
    decode_block,
)
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
    got = _Connection((), True).read(client, server, conn, max_frame)

    def column(name: str) -> list:
        if name == "headers":
            return got.headers or []
        values = getattr(got, name)
        return got.text(values) if name in _TEXT else values.tolist()

    names = [f.name for f in fields(Exchange)]
    return [Exchange(*row) for row in zip(*map(column, names), strict=True)]


_TEXT = ("method", "path", "authority", "content_type")
"""The fields of :class:`Exchange` that :class:`Streams` holds as codes of strings."""
_STOPS = ("", CUT, "HTTP/2 frame longer than max_frame", GAP, MALFORMED)
"""Why the walk of a stream's frames stopped, by the code :func:`_walk` returns."""


def _frames(
    s: ByteStream, pos: int, max_frame: int
) -> tuple[np.ndarray, Stop | None, list[list[int]]]:
    """The frames of ``s`` from ``pos`` as rows (first byte, end, type, flags, stream id, a, b), up
    to the first that cannot be read, why it could not (None when the stream ends at a frame
    boundary), and (first byte, ``a``) of its SETTINGS frames.

    ``a`` and ``b`` are what is used of a frame: a DATA frame's payload size without padding in
    ``a`` (§6.1); the field block fragment of HEADERS, PUSH_PROMISE and CONTINUATION at
    ``data[a:b]`` (§6.2, §6.6, §6.10); the SETTINGS_HEADER_TABLE_SIZE a SETTINGS frame sets in
    ``a`` (0 if none, §6.5); 0 otherwise.
    """
    rows, code, at = _walk(s.data, pos, max_frame, s.piece, s.holes)
    settings = rows[rows[:, 2] == _SETTINGS][:, [0, 5]].tolist()
    return rows, Stop(_STOPS[code], at) if code else None, settings


@njit(cache=True)
def _walk(data, pos, max_frame, piece, holes):  # pragma: no cover - compiled  # noqa: C901, PLR0912, PLR0915
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


def _limits(
    s: ByteStream, settings: list[list[int]], top: int = _INITIAL_TABLE
) -> tuple[np.ndarray, np.ndarray]:
    """(capture times, values) where the largest SETTINGS_HEADER_TABLE_SIZE the sender of ``s``
    has advertised in ``settings`` (first byte, value) rises above the ones before (``top``, the
    largest before ``s`` begins, included)."""
    times, values = [], []
    for pos, size in settings:
        if size > top:
            top = size
            times.append(s.time(pos))
            values.append(size)
    return np.array(times, np.int64), np.array(values, np.int64)


@dataclass(frozen=True)
class Resume:
    """What reading a connection needs to go on from a point where both directions are at a
    frame boundary and no stream is open (so that a live capture need not keep the connection's
    packets from its start): the HPACK decoder of the client's field blocks and of the
    server's, whose dynamic tables (RFC 7541 §2.3.2) and limits carry over."""

    client: HpackDecoder
    server: HpackDecoder

    def copy(self) -> Resume:
        return Resume(self.client.copy(), self.server.copy())


@dataclass(frozen=True)
class Streams:
    """The exchanges of one connection as columns, one row per stream in order of
    ``request_start``: the fields of :class:`Exchange`, its text fields as codes into
    ``strings`` (-1 where the request has no such field; see :meth:`text`).

    ``kept``: per requested header name, the codes of the requests' values of it (joined as in
    :attr:`Exchange.headers`). ``headers``: every request's regular fields, when asked for.
    """

    stream_id: np.ndarray
    request_start: np.ndarray
    request_end: np.ndarray
    response_start: np.ndarray
    response_end: np.ndarray
    status: np.ndarray
    grpc_status: np.ndarray
    request_bytes: np.ndarray
    response_bytes: np.ndarray
    reset: np.ndarray
    method: np.ndarray
    path: np.ndarray
    authority: np.ndarray
    content_type: np.ndarray
    kept: dict[str, np.ndarray]
    strings: list[str]
    headers: list[dict[str, str]] | None = None
    resume: Resume | None = None
    """Where the reading ended, to go on from (meaningful where it ended with no stream open
    and nothing unread)."""

    def __len__(self) -> int:
        return len(self.stream_id)

    @overload
    def text(self, codes: np.ndarray, absent: str = "") -> list[str]: ...
    @overload
    def text(self, codes: np.ndarray, absent: None) -> list[str | None]: ...
    def text(self, codes: np.ndarray, absent: str | None = "") -> list[Any]:
        """The strings of ``codes``, ``absent`` for -1."""
        return np.array([*self.strings, absent], dtype=object)[codes].tolist()

    @property
    def grpc(self) -> np.ndarray:
        """Which exchanges are gRPC calls (:attr:`Exchange.grpc`)."""
        grpc = [v.startswith("application/grpc") for v in self.strings]
        return np.array([*grpc, False], dtype=bool)[self.content_type]


def columns(
    client: ByteStream,
    server: ByteStream,
    conn: Skipper,
    keep: tuple[str, ...] = (),
    max_frame: int = 1 << 24,
    resume: Resume | None = None,
) -> Streams:
    """:func:`exchanges` as columns, with the values of the request header fields named in
    ``keep`` (lower case) instead of every field: what spans from packets need, made without an
    object per stream. With ``resume`` (left as it is), both streams are read from where an
    earlier reading of the connection ended (:attr:`Streams.resume`), with no preface."""
    return _Connection(keep, False).read(client, server, conn, max_frame, resume)


# The columns of the compiled walk's exchange table (:class:`Streams` in this order).
_SID, _REQUEST_START, _REQUEST_END, _RESPONSE_START, _RESPONSE_END, _STATUS = range(6)
_GRPC_STATUS, _REQUEST_BYTES, _RESPONSE_BYTES, _RESET = range(6, 10)
_METHOD, _PATH, _AUTHORITY, _CONTENT_TYPE = range(10, 14)
_UNSET = (0, 0, -1, -1, -1, -1, -1, 0, 0, 0, -1, -1, -1, -1)
"""A new exchange's row: offsets, statuses and text codes -1."""
_WORDS = (b":method", b":path", b":authority", b"content-type", b":status", b"grpc-status")
"""The field names the walk looks for, by their index in this tuple; the kept names follow."""
_PSEUDO = 3  # the first three are the request's pseudo-header fields, in the order of _METHOD...
_WORD_CONTENT_TYPE, _WORD_STATUS, _WORD_GRPC_STATUS = 3, 4, 5
_KEPT = 6

# What the walk's scalar state holds: where the next SETTINGS limit is, the exchanges and
# strings so far, the fields of the last block, and the bytes passed over for push and for
# streams without an exchange with the frame at which each was first passed over.
_CUR, _EXCHANGES, _STRINGS, _LAST_FIELDS, _PUSHED, _ORPHANED, _PUSHED_AT, _ORPHANED_AT = range(8)

# What the walk answers: done; the decoder needs room (for a block of the size given, or
# as decode_block answered); a request block for Python to read; a stop (_READ_STOPS).
_DONE, _NEED_META, _NEED_DECODER, _UNUSUAL, _STOPPED = range(5)
_INTERRUPTED, _OUTSIDE, _UNDECODABLE, _RAN_OUT = 5, 6, 7, 8
_READ_STOPS = (
    *_STOPS,
    "HTTP/2 field block interrupted (RFC 9113 §6.10)",
    "HTTP/2 CONTINUATION outside a field block (RFC 9113 §6.10)",
    UNDECODABLE,
)
"""Why the walk of a direction stopped: :data:`_STOPS`, then the walk's own reasons;
``_RAN_OUT``, the frames ending inside a field block, is why the frames end."""
_FNV_OFFSET, _FNV_PRIME = 0xCBF29CE484222325, 0x100000001B3  # FNV-1a, 64 bits
_MEMO = 64
"""Response blocks whose reading the walk remembers while the dynamic table stays as it was."""


class _Connection:
    """The state of one connection's compiled walk: the exchange table, the map from stream id
    to row, and the connection's distinct strings (bytes, interned by the walk)."""

    def __init__(self, keep: tuple[str, ...], every: bool) -> None:
        self.keep, self.every = keep, every
        words = [*_WORDS, *(k.encode() for k in keep)]
        self.words = np.frombuffer(b"".join(words), np.uint8)
        self.word_at = np.cumsum([0, *map(len, words)], dtype=np.int64)
        self.st = np.zeros(8, np.int64)
        self.pool = np.zeros(1 << 12, np.uint8)
        self.offs = np.zeros(1 << 8, np.int64)
        self.slots = np.full(1 << 9, -1, np.int64)
        self.headers: dict[int, dict[str, str]] = {}
        self.ex = np.zeros((0, len(_UNSET)), np.int64)
        self.kept = np.zeros((0, len(keep)), np.int64)
        self.smap = np.zeros((4, 2), np.int64)

    def read(
        self,
        client: ByteStream,
        server: ByteStream,
        conn: Skipper,
        max_frame: int,
        resume: Resume | None = None,
    ) -> Streams:
        decoders = (
            resume.copy()
            if resume is not None
            else Resume(*(HpackDecoder(_INITIAL_TABLE, _MAX_FIELD_SECTION) for _ in range(2)))
        )
        head = client.data[: len(PREFACE)]
        if resume is not None:
            up, up_stop, up_settings = _frames(client, 0, max_frame)
            down, down_stop, down_settings = _frames(server, 0, max_frame)
        elif not client.start_seen or client.hole(0, len(head)) or not PREFACE.startswith(head):
            _skip(conn, MIDWAY if not client.start_seen else NOT_HTTP2, client.end + server.end)
            return self._streams(decoders)
        elif len(head) < len(PREFACE):
            _skip(conn, f"client: {CUT}", client.end + server.end)
            return self._streams(decoders)
        else:
            up, up_stop, up_settings = _frames(client, len(PREFACE), max_frame)
            down, down_stop, down_settings = np.zeros((0, 7), np.int64), Stop(MIDWAY, 0), []
            if server.start_seen:
                down, down_stop, down_settings = _frames(server, 0, max_frame)
        cap = int(np.count_nonzero(up[:, 2] == _HEADERS))
        self.ex = np.tile(np.array(_UNSET, np.int64), (cap, 1))
        self.kept = np.full((cap, len(self.keep)), -1, np.int64)
        self.smap = np.zeros((1 << max(2, (2 * cap).bit_length()), 2), np.int64)
        d = decoders
        self._side(client, up, up_stop, _limits(server, down_settings, d.client.limit), d.client,
                   True, conn)  # fmt: skip
        self._side(server, down, down_stop, _limits(client, up_settings, d.server.limit), d.server,
                   False, conn)  # fmt: skip
        return self._streams(decoders)

    def _side(
        self,
        s: ByteStream,
        rows: np.ndarray,
        stop: Stop | None,
        limits: tuple[np.ndarray, np.ndarray],
        decoder: HpackDecoder,
        client: bool,
        conn: Skipper,
    ) -> None:
        """Walk one direction's frames (:func:`_walk_side`), acting on what it asks for."""
        side = "client" if client else "server"
        data = np.frombuffer(s.data, np.uint8)
        times = s.times(rows[:, 0]) if len(limits[0]) else limits[0]
        st = self.st
        st[_CUR] = st[_PUSHED] = st[_ORPHANED] = 0
        st[_PUSHED_AT] = st[_ORPHANED_AT] = -1
        i = 0
        while True:
            meta, ents, table, out = decoder.state
            code, i, x, self.pool, self.offs, self.slots = _walk_side(
                data, rows, i, client, *limits, times, meta, ents, table, out,
                self.smap, self.ex, self.kept, self.words, self.word_at, self.every,
                st, self.pool, self.offs, self.slots,
            )  # fmt: skip
            if code == _NEED_META:
                decoder.make_room(x)
            elif code == _NEED_DECODER:
                decoder.resume(x)
            elif code == _UNUSUAL:
                self._request(x, decoder.fields(int(st[_LAST_FIELDS]), text=True))
            else:
                break
        passed = sorted(
            (int(st[at]), reason, int(st[n]))
            for at, reason, n in ((_PUSHED_AT, PUSH, _PUSHED), (_ORPHANED_AT, ORPHAN, _ORPHANED))
            if st[n]
        )
        for _, reason, n in passed:
            conn.skip(reason, n)
        if code == _STOPPED:
            reason = (stop.reason if stop else CUT) if x == _RAN_OUT else _READ_STOPS[x]
            _skip(conn, f"{side}: {reason}", s.end - i)
        elif stop is not None:
            _skip(conn, f"{side}: {stop.reason}", s.end - stop.at)

    def _request(self, e: int, fields: list[tuple[str, str]]) -> None:
        """Read the request block of exchange ``e`` that the walk left to Python."""
        method, path, authority, content_type, headers = _request_head(fields)
        for col, value in zip(
            (_METHOD, _PATH, _AUTHORITY, _CONTENT_TYPE),
            (method, path, authority, content_type),
            strict=True,
        ):
            self.ex[e, col] = self._intern(value)
        for k, name in enumerate(self.keep):
            kept = headers.get(name)
            self.kept[e, k] = -1 if kept is None else self._intern(kept)
        if self.every:
            self.headers[e] = headers

    def _intern(self, value: str) -> int:
        b = np.frombuffer(value.encode(), np.uint8)
        self.pool, self.offs, self.slots = _room(
            self.pool, self.offs, self.slots, self.st, len(b), 1
        )
        return int(_intern(b, 0, len(b), self.pool, self.offs, self.slots, self.st))

    def _streams(self, resume: Resume) -> Streams:
        n, count = int(self.st[_EXCHANGES]), int(self.st[_STRINGS])
        sid, start, end, response_start, response_end, status, grpc_status, *rest = self.ex[:n].T
        request_bytes, response_bytes, reset, method, path, authority, content_type = rest
        offs = self.offs[: count + 1].tolist()
        raw = self.pool[: offs[-1]].tobytes()
        text: Any = raw.decode("ascii") if raw.isascii() else raw
        strings = [text[a:b] for a, b in itertools.pairwise(offs)]
        if text is raw:
            strings = [v.decode("utf-8", "replace") for v in strings]
        return Streams(
            sid,
            start,
            end,
            response_start,
            response_end,
            status,
            grpc_status,
            request_bytes,
            response_bytes,
            reset.astype(bool),
            method,
            path,
            authority,
            content_type,
            kept={k: self.kept[:n, j] for j, k in enumerate(self.keep)},
            strings=strings,
            headers=[self.headers[e] for e in range(n)] if self.every else None,
            resume=resume,
        )


@njit(cache=True)
def _walk_side(  # noqa: C901, PLR0912, PLR0915
    data, rows, i, client, limit_time, limit_value, times, meta, ents, table, out,
    smap, ex, kept, words, word_at, every, st, pool, offs, slots,
):  # fmt: skip  # pragma: no cover - compiled
    """Read one direction's frames from ``rows[i]`` into the exchange table ``ex`` (and
    ``kept``): the client's HEADERS open exchanges and carry the request; the server's frames
    answer them. Field blocks are decoded in order by :func:`decode_block` into ``out``, the
    SETTINGS limit raised before each as :func:`_limits` says (RFC 9113 §6.5.2). A response
    block that left the dynamic table as it was decodes the same way while the table stays so
    (RFC 7541 §3.2: decoding depends only on the table; a later raise of the limit cannot make
    it fail), so what it gave is remembered, by its bytes, until the table changes: a
    connection repeats such blocks for every response of one kind.

    Answers (what, frame index, value, and the string buffers, grown): ``_DONE`` at the end of
    the frames; ``_NEED_META``, ``_NEED_DECODER`` to be resumed at the same frame when the
    decoder has grown; ``_UNUSUAL`` after a request block whose fields the walk does not read
    itself (non-ASCII names, a kept field repeated, or ``every`` field wanted), resumed at the
    next frame; ``_STOPPED`` where the direction cannot be read on (reason in
    :data:`_READ_STOPS`, or ``_RAN_OUT``)."""
    n = len(rows)
    got = np.empty(2 * (len(word_at) - 1), np.int64)
    memo = np.full((_MEMO, 5), -1, np.int64)
    while i < n:
        pos, end, kind, flags, sid = rows[i, 0], rows[i, 1], rows[i, 2], rows[i, 3], rows[i, 4]
        a, b = rows[i, 5], rows[i, 6]
        first = i
        i += 1
        j = _stream(smap, sid)
        e = smap[j, 1] if smap[j, 0] else -1
        if kind == _DATA:
            if e < 0:
                _pass_over(st, sid, end - pos, first)
                continue
            ex[e, _REQUEST_BYTES if client else _RESPONSE_BYTES] += a
        elif kind in (_HEADERS, _PUSH):
            what, nfields, k, slot, hit = _field_block(
                data, rows, first, client, limit_time, limit_value, times, meta, ents, table,
                out, memo, st,
            )  # fmt: skip
            if what == _STOPPED:
                return _STOPPED, pos, nfields, pool, offs, slots
            if what == _NEED_META:
                return _NEED_META, first, nfields, pool, offs, slots
            if k > first:
                i, end = k + 1, rows[k, 1]
            if nfields in (NEED_OUT, NEED_TABLE):
                return _NEED_DECODER, first, nfields, pool, offs, slots
            if nfields < 0:
                return _STOPPED, pos, _UNDECODABLE, pool, offs, slots
            if hit < 0 and meta[CHANGED]:
                memo[:, 0] = -1
            if kind == _PUSH:
                _pass_over(st, 0, end - pos, first)
                continue
            if e < 0 and client:
                e = st[_EXCHANGES]
                st[_EXCHANGES] += 1
                smap[j, 0], smap[j, 1] = sid + 1, e
                ex[e, _SID], ex[e, _REQUEST_START] = sid, pos
                unusual = every or _request_fields(out, meta, nfields, words, word_at, got)
                if unusual:
                    st[_LAST_FIELDS] = nfields
                else:
                    pool, offs, slots = _store_request(
                        e, out, meta, nfields, got, word_at, ex, kept, st, pool, offs, slots
                    )
                if flags & _END_STREAM and ex[e, _REQUEST_END] < 0:
                    ex[e, _REQUEST_END] = end
                if unusual:
                    return _UNUSUAL, i, e, pool, offs, slots
                continue
            if e < 0:
                _pass_over(st, sid, end - pos, first)
                continue
            if not client:
                if hit >= 0:
                    status, grpc_status, ct_code = memo[hit, 2], memo[hit, 3], memo[hit, 4]
                else:
                    status, grpc_status, ct_code, pool, offs, slots = _read_response(
                        out, meta, nfields, words, word_at, st, pool, offs, slots
                    )
                    if slot >= 0 and not meta[CHANGED]:
                        memo[slot] = a, b, status, grpc_status, ct_code
                _store_response(ex, e, pos, status, grpc_status, ct_code, offs)
        elif kind == _RST:
            if e < 0:
                _pass_over(st, sid, end - pos, first)
                continue
            ex[e, _RESET] = 1
            _end(ex, e, client, end)
            continue
        elif kind == _CONTINUATION:
            return _STOPPED, pos, _OUTSIDE, pool, offs, slots
        else:
            continue  # connection control, PRIORITY, WINDOW_UPDATE, unknown types (§5.5)
        if flags & _END_STREAM:
            _end(ex, e, client, end)
    return _DONE, i, 0, pool, offs, slots


@njit(cache=True, inline="always")
def _field_block(
    data, rows, first, client, limit_time, limit_value, times, meta, ents, table, out, memo, st
):  # fmt: skip  # pragma: no cover - compiled
    """Decode the field block of the HEADERS or PUSH_PROMISE frame ``rows[first]`` and the
    CONTINUATION frames that follow it (§6.10) into ``out``, the SETTINGS limit raised first
    (:func:`_limits`), a response block in one frame looked up in ``memo`` first.

    Answers (what, value, last frame, memo slot, memo hit): ``_DONE`` with the fields decoded
    (0 on a hit, or :func:`decode_block`'s answer); ``_STOPPED`` with the reason; or
    ``_NEED_META`` with the block's size."""
    n = len(rows)
    kind, sid, a, b = rows[first, 2], rows[first, 4], rows[first, 5], rows[first, 6]
    size, k = b - a, first
    while not rows[k, 3] & _END_HEADERS:
        k += 1
        if k == n:
            return _STOPPED, _RAN_OUT, k, -1, -1
        if rows[k, 2] != _CONTINUATION or rows[k, 4] != sid:
            return _STOPPED, _INTERRUPTED, k, -1, -1
        size += rows[k, 6] - rows[k, 5]
    if len(meta) < FIELDS + 2 * size + 1:
        return _NEED_META, size, k, -1, -1
    while st[_CUR] < len(limit_time) and limit_time[st[_CUR]] <= times[first]:
        meta[LIMIT] = limit_value[st[_CUR]]
        st[_CUR] += 1
    slot = -1
    if not client and kind == _HEADERS and k == first:
        slot = np.int64(_hash(data, a, b) & np.uint64(_MEMO - 1))
        if _same(data, memo[slot, 0], memo[slot, 1], data, a, b):
            return _DONE, 0, k, slot, slot
    block = np.empty(size, np.uint8)  # a copy, also of one frame's: decode_block compiles once
    at = 0
    for f in range(first, k + 1):
        block[at : at + rows[f, 6] - rows[f, 5]] = data[rows[f, 5] : rows[f, 6]]
        at += rows[f, 6] - rows[f, 5]
    return _DONE, decode_block(block, meta, ents, table, out), k, slot, -1


@njit(cache=True, inline="always")
def _store_request(
    e, out, meta, nfields, got, word_at, ex, kept, st, pool, offs, slots
):  # fmt: skip  # pragma: no cover - compiled
    """Intern the request fields :func:`_request_fields` found (at ``got``) into exchange
    ``e``: the pseudo-header fields, the content type and the kept fields; answers the string
    buffers, grown."""
    pool, offs, slots = _room(pool, offs, slots, st, meta[FIELDS + 2 * nfields], len(word_at))
    for w in range(len(word_at) - 1):
        if w in (_WORD_STATUS, _WORD_GRPC_STATUS) or got[2 * w] < 0:
            continue
        code = _intern(out, got[2 * w], got[2 * w + 1], pool, offs, slots, st)
        if w < _PSEUDO:
            ex[e, _METHOD + w] = code
        elif w == _WORD_CONTENT_TYPE:
            ex[e, _CONTENT_TYPE] = code
        else:
            kept[e, w - _KEPT] = code
    return pool, offs, slots


@njit(cache=True, inline="always")
def _read_response(
    out, meta, nfields, words, word_at, st, pool, offs, slots
):  # fmt: skip  # pragma: no cover - compiled
    """A response block's status, grpc-status and content type (interned, or -1), and the
    string buffers, grown."""
    status, grpc_status, ct, ct_end = _response_fields(out, meta, nfields, words, word_at)
    ct_code = -1
    if ct >= 0:
        pool, offs, slots = _room(pool, offs, slots, st, ct_end - ct, 1)
        ct_code = _intern(out, ct, ct_end, pool, offs, slots, st)
    return status, grpc_status, ct_code, pool, offs, slots


@njit(cache=True, inline="always")
def _store_response(ex, e, pos, status, grpc_status, ct_code, offs):  # pragma: no cover
    """A response block's fields into exchange ``e``: the first block's start and status
    count; a later block (trailers) gives the grpc-status, and a content type where the
    request gave none or an empty one."""
    if ex[e, _RESPONSE_START] < 0:
        ex[e, _RESPONSE_START] = pos
    if ex[e, _STATUS] < 0:
        ex[e, _STATUS] = status
    if grpc_status >= 0:
        ex[e, _GRPC_STATUS] = grpc_status
    code = ex[e, _CONTENT_TYPE]
    if ct_code >= 0 and (code < 0 or offs[code + 1] == offs[code]):
        ex[e, _CONTENT_TYPE] = ct_code


@njit(cache=True, inline="always")
def _end(ex, e, client, end):  # pragma: no cover - compiled
    """The end of one side of exchange ``e``: the first frame that ended it counts."""
    col = _REQUEST_END if client else _RESPONSE_END
    if ex[e, col] < 0:
        ex[e, col] = end


@njit(cache=True, inline="always")
def _pass_over(st, sid, nbytes, frame):  # pragma: no cover - compiled
    """Count a frame that makes no exchange: streams with even numbers (and pushes, given as
    0) are the server's, opened by push (§5.1.1); the rest are streams whose request was not
    captured."""
    n, at = (_PUSHED, _PUSHED_AT) if sid % 2 == 0 else (_ORPHANED, _ORPHANED_AT)
    st[n] += nbytes
    if st[at] < 0:
        st[at] = frame


@njit(cache=True, inline="always")
def _stream(smap, sid):  # pragma: no cover - compiled
    """The slot of stream ``sid`` in the open-addressed map ``smap`` of (sid + 1, exchange):
    its own, or the empty one where it would go."""
    mask = len(smap) - 1
    j = (sid * 0x9E3779B1) & mask
    while smap[j, 0] and smap[j, 0] != sid + 1:
        j = (j + 1) & mask
    return j


@njit(cache=True, inline="always")
def _is(out, a, b, words, word_at, w, lower):  # pragma: no cover - compiled
    """Whether ``out[a:b]`` is word ``w``, compared in ASCII lower case with ``lower``."""
    at = word_at[w]
    if word_at[w + 1] - at != b - a:
        return False
    for k in range(b - a):
        c = out[a + k]
        if lower and 0x41 <= c <= 0x5A:
            c += 0x20
        if c != words[at + k]:
            return False
    return True


@njit(cache=True)
def _request_fields(out, meta, nfields, words, word_at, got):  # pragma: no cover - compiled  # noqa: C901
    """Where the values are (start, end in ``got`` per word, -1 when absent) that a request
    block's fields give to its exchange, as :func:`_request_head` reads them: the last of each
    pseudo-header field, the regular fields by lower-case name. True (unusual) when that needs
    Python: a name not ASCII, or a kept field that occurs twice (its values are joined)."""
    got[:] = -1
    for f in range(nfields):
        a, v, z = meta[FIELDS + 2 * f], meta[FIELDS + 2 * f + 1], meta[FIELDS + 2 * f + 2]
        if v > a and out[a] == 0x3A:  # ":"
            for w in range(_PSEUDO):
                if _is(out, a, v, words, word_at, w, False):
                    got[2 * w], got[2 * w + 1] = v, z
            continue
        for k in range(a, v):
            if out[k] >= 0x80:
                return True
        for w in range(_WORD_CONTENT_TYPE, len(word_at) - 1):
            if w in (_WORD_STATUS, _WORD_GRPC_STATUS):
                continue
            if _is(out, a, v, words, word_at, w, True):
                if got[2 * w] >= 0:
                    return True
                got[2 * w], got[2 * w + 1] = v, z
    return False


@njit(cache=True)
def _response_fields(out, meta, nfields, words, word_at):  # pragma: no cover - compiled
    """What a response field block (informational or final header section, or trailers, §8.1)
    gives to its exchange: its first final ``:status``, its last ``grpc-status`` (-1 where
    absent; values of ASCII digits only) and where its first ``content-type`` that is not empty
    is (-1, -1 if none)."""
    status = grpc_status = ct = ct_end = -1
    for f in range(nfields):
        a, v, z = meta[FIELDS + 2 * f], meta[FIELDS + 2 * f + 1], meta[FIELDS + 2 * f + 2]
        if _is(out, a, v, words, word_at, _WORD_STATUS, False):
            d = _digits(out, v, z)
            if d >= 0 and status < 0 and not 100 <= d < 200:
                status = d
        elif _is(out, a, v, words, word_at, _WORD_GRPC_STATUS, False):
            d = _digits(out, v, z)
            if d >= 0:
                grpc_status = d
        elif ct < 0 and z > v and _is(out, a, v, words, word_at, _WORD_CONTENT_TYPE, False):
            ct, ct_end = v, z
    return status, grpc_status, ct, ct_end


@njit(cache=True, inline="always")
def _digits(out, a, b):  # pragma: no cover - compiled
    """The number ``out[a:b]`` writes in ASCII digits, -1 if it is not one; one beyond the
    int64 columns it goes to is taken as their largest value."""
    if a == b:
        return -1
    d = np.int64(0)
    top = np.iinfo(np.int64).max
    for k in range(a, b):
        c = np.int64(out[k]) - 0x30
        if not 0 <= c <= 9:
            return -1
        d = top if d > (top - c) // 10 else d * 10 + c
    return d


@njit(cache=True, inline="always")
def _hash(src, a, b):  # pragma: no cover - compiled
    h = np.uint64(_FNV_OFFSET)
    for k in range(a, b):
        h = (h ^ np.uint64(src[k])) * np.uint64(_FNV_PRIME)
    return h


@njit(cache=True, inline="always")
def _same(x, a, b, y, c, d):  # pragma: no cover - compiled
    """Whether ``x[a:b]`` (``a`` -1: nothing) holds the bytes of ``y[c:d]``."""
    if a < 0 or b - a != d - c:
        return False
    k = 0
    while k < b - a and x[a + k] == y[c + k]:
        k += 1
    return k == b - a


@njit(cache=True)
def _intern(src, a, b, pool, offs, slots, st):  # pragma: no cover - compiled
    """The code of the string ``src[a:b]`` among the connection's distinct strings (bytes in
    ``pool``, string k at ``offs[k]:offs[k + 1]``, found through the open-addressed ``slots``),
    added if new; :func:`_room` has made room for it."""
    mask = len(slots) - 1
    j = np.int64(_hash(src, a, b) & np.uint64(mask))
    n = b - a
    while slots[j] >= 0:
        code = slots[j]
        if _same(pool, offs[code], offs[code + 1], src, a, b):
            return code
        j = (j + 1) & mask
    code = st[_STRINGS]
    at = offs[code]
    pool[at : at + n] = src[a:b]
    offs[code + 1] = at + n
    st[_STRINGS] = code + 1
    slots[j] = code
    return code


@njit(cache=True)
def _room(pool, offs, slots, st, nbytes, strings):  # pragma: no cover - compiled
    """The string buffers of :func:`_intern`, grown (at least doubled) where ``strings`` more
    strings of ``nbytes`` in all would not fit or would fill ``slots`` more than half."""
    count = st[_STRINGS]
    if offs[count] + nbytes > len(pool):
        more = np.zeros(max(2 * len(pool), offs[count] + nbytes), np.uint8)
        more[: len(pool)] = pool
        pool = more
    if count + strings + 1 > len(offs):
        wider = np.zeros(max(2 * len(offs), count + strings + 1), np.int64)
        wider[: len(offs)] = offs
        offs = wider
    if 2 * (count + strings) > len(slots):
        size = 2 * len(slots)
        while 2 * (count + strings) > size:
            size *= 2
        slots = np.full(size, -1, np.int64)
        for code in range(count):
            j = np.int64(_hash(pool, offs[code], offs[code + 1]) & np.uint64(size - 1))
            while slots[j] >= 0:
                j = (j + 1) & (size - 1)
            slots[j] = code
    return pool, offs, slots


def _skip(conn: Skipper, reason: str, nbytes: int) -> None:
    if nbytes:
        conn.skip(reason, nbytes)


_RequestHead = tuple[str, str, str, str, dict[str, str]]
"""What an exchange takes from a request's field block: method, path, authority, content-type,
and the regular fields."""


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
