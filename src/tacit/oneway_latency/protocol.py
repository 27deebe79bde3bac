"""The wire protocol between the two agents of the RDA one-way latency service.

"Every Timestamp Counts: Accurate Tracking of Network Latencies using Reconcilable Difference
Aggregator" (RDA) has the two capture points exchange, per interval, MinHash sketches (late
binding), one synopsis, and the timestamps of the packets the decoder lists. The paper does not
specify a wire format; this one is ours:

Every message is one frame::

    magic "TRDA" | version u8 | type u8 | reserved u16 (0) | payload length u32 | sequence u64
    | payload | HMAC-SHA256(key, header + payload)  (32 bytes)

all integers big-endian. A frame is refused (:class:`ProtocolError`) when its magic, version,
type or reserved field is wrong, its payload exceeds :data:`MAX_PAYLOAD` (checked on the header,
before anything is read), its MAC does not verify (compared with :func:`hmac.compare_digest`),
or its sequence number is not the next one expected on that connection (replay, reordering,
deletion). The first frame each way is a :attr:`MessageType.HELLO` (sequence 0, MAC'd with the
shared key) carrying a fresh random nonce, the agent's role, and its configuration with a
SHA-256 digest of it; every later frame is MAC'd with a key of that connection and direction,
``HMAC(key, direction ‖ nonce_connector ‖ nonce_listener)``, so that frames of one connection,
or of one direction, cannot be replayed on another. Two agents whose configurations differ
(interval, synopsis size, k, seeds, sampling, ...) refuse each other with
:class:`ConfigMismatchError`, naming every field that differs.

Payloads are compact: arrays are numpy buffers (little-endian), scalars ``struct``; only the
hello's configuration and the published result of an interval (a handful of named values) are
JSON. Every decoder checks the payload's exact length against what its counts announce.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import hashlib
import hmac
import json
import os
import struct
from dataclasses import dataclass
from typing import Any

import numpy as np

from tacit.errors import ConfigError, InputError

MAGIC = b"TRDA"
VERSION = 1
HEADER = struct.Struct("!4sBBHIQ")
MAC_BYTES = 32
NONCE_BYTES = 16
MAX_PAYLOAD = 64 * 2**20
"""Largest payload accepted (64 MiB): a synopsis of 3 banks × 1 M buckets is 60 MiB."""


class MessageType(enum.IntEnum):
    HELLO = 1
    """Role, nonce, configuration (JSON) and its digest; the first frame each way."""
    SKETCH = 2
    """Sender → receiver: an interval is closed; its MinHash sketch (late binding)."""
    SYNOPSIS_REQUEST = 3
    """Receiver → sender: send the synopsis of an interval with this many buckets per bank."""
    SYNOPSIS = 4
    """Sender → receiver: the synopsis of an interval (ID xor, TS sum and Δ per bucket)."""
    TIMESTAMP_REQUEST = 5
    """Receiver → sender: look these decoded identifiers up in your cache of the interval."""
    TIMESTAMPS = 6
    """Sender → receiver: per requested identifier, whether it was sent and its timestamp."""
    RESULT = 7
    """Receiver → sender: the published result of an interval (acknowledges it)."""
    END = 8
    """Sender → receiver: the sender's source has ended; its last interval."""
    BYE = 9
    """Sender → receiver: every interval has its result; the sender is leaving."""
    EXPIRED = 10
    """Sender → receiver: an interval asked for is no longer held (it was given up)."""


class Role(enum.IntEnum):
    SENDER = 1
    RECEIVER = 2


class ProtocolError(InputError):
    """A frame that is corrupt, forged, oversized, replayed, of another version, or a message
    that makes no sense: the agent logs it, drops that connection and keeps its state."""


class ConfigMismatchError(ConfigError):
    """The two agents' configurations differ: they cannot measure together."""


@dataclass(frozen=True)
class Frame:
    type: MessageType
    sequence: int
    payload: bytes


def config_digest(config: dict[str, Any]) -> bytes:
    """SHA-256 of the configuration's canonical JSON (sorted keys, no spaces)."""
    return hashlib.sha256(_canonical(config)).digest()


def _canonical(config: dict[str, Any]) -> bytes:
    return json.dumps(config, sort_keys=True, separators=(",", ":")).encode()


def config_differences(mine: dict[str, Any], theirs: dict[str, Any]) -> list[str]:
    """``name: here X, peer Y`` for every field that differs."""
    names = sorted(set(mine) | set(theirs))
    return [
        f"{n}: here {mine.get(n)!r}, peer {theirs.get(n)!r}"
        for n in names
        if mine.get(n) != theirs.get(n)
    ]


@dataclass(frozen=True)
class Hello:
    role: Role
    nonce: bytes
    config: dict[str, Any]
    digest: bytes


_HELLO = struct.Struct(f"!B{NONCE_BYTES}s32s")


def encode_hello(role: Role, nonce: bytes, config: dict[str, Any]) -> bytes:
    return _HELLO.pack(role, nonce, config_digest(config)) + _canonical(config)


class Channel:
    """One connection's framing, MACs and sequence numbers (no I/O: :meth:`seal` makes the bytes
    of a frame, :meth:`check_header` and :meth:`open` check what was read).

    ``connector`` is True on the side that opened the connection. Until both hellos have been
    seen, frames are MAC'd with the shared key; afterwards with the connection's direction keys.
    """

    def __init__(self, key: bytes, connector: bool, peer: str = "peer") -> None:
        if not key:
            raise ConfigError("the agents' shared key is empty")
        self.key = key
        self.connector = connector
        self.peer = peer
        self.nonce = os.urandom(NONCE_BYTES)
        self.send_seq = 0
        self.recv_seq = 0
        self._send_key = key
        self._recv_key = key
        self._peer_nonce: bytes | None = None

    def error(self, message: str, sequence: int | None = None) -> ProtocolError:
        return ProtocolError(
            message, path=self.peer, record=None if sequence is None else f"frame {sequence}"
        )

    def hello(self, role: Role, config: dict[str, Any]) -> bytes:
        """Our hello frame (the first frame we send)."""
        return self.seal(MessageType.HELLO, encode_hello(role, self.nonce, config))

    def accept_hello(self, frame: Frame, expected: Role, config: dict[str, Any]) -> Hello:
        """Check the peer's hello (role and configuration) and switch to the connection keys."""
        if frame.type != MessageType.HELLO:
            raise self.error(f"expected a hello, got {frame.type.name}", frame.sequence)
        body = frame.payload
        if len(body) < _HELLO.size:
            raise self.error("hello too short", frame.sequence)
        role, nonce, digest = _HELLO.unpack_from(body)
        try:
            theirs = json.loads(body[_HELLO.size :])
            peer_role = Role(role)
        except (ValueError, UnicodeDecodeError) as e:
            raise self.error(f"malformed hello: {e}", frame.sequence) from None
        if not isinstance(theirs, dict) or config_digest(theirs) != digest:
            raise self.error("hello configuration does not match its digest", frame.sequence)
        if peer_role != expected:
            raise self.error(
                f"peer is a {peer_role.name.lower()}, expected a {expected.name.lower()}"
            )
        if digest != config_digest(config):
            diff = "; ".join(config_differences(config, theirs))
            raise ConfigMismatchError(f"{self.peer}: agent configurations differ: {diff}")
        first, second = (self.nonce, nonce) if self.connector else (nonce, self.nonce)
        out, back = (b"c2l", b"l2c") if self.connector else (b"l2c", b"c2l")
        self._send_key = hmac.digest(self.key, out + first + second, "sha256")
        self._recv_key = hmac.digest(self.key, back + first + second, "sha256")
        self._peer_nonce = nonce
        return Hello(peer_role, nonce, theirs, digest)

    def seal(self, mtype: MessageType, payload: bytes) -> bytes:
        """The bytes of one frame; advances our sequence number."""
        if len(payload) > MAX_PAYLOAD:
            raise ConfigError(f"{mtype.name} payload of {len(payload)} bytes exceeds the limit")
        header = HEADER.pack(MAGIC, VERSION, mtype, 0, len(payload), self.send_seq)
        self.send_seq += 1
        return header + payload + hmac.digest(self._send_key, header + payload, "sha256")

    def check_header(self, header: bytes) -> tuple[MessageType, int, int]:
        """``(type, payload length, sequence)`` of a frame header, or :class:`ProtocolError`."""
        if len(header) != HEADER.size:
            raise self.error(f"frame header cut after {len(header)} bytes")
        magic, version, mtype, reserved, length, seq = HEADER.unpack(header)
        if magic != MAGIC:
            raise self.error(f"bad magic {magic!r}: not a tacit agent frame")
        if version != VERSION:
            raise self.error(f"protocol version {version}, this agent speaks {VERSION}", seq)
        if reserved:
            raise self.error(f"reserved header field is {reserved}, not 0", seq)
        if length > MAX_PAYLOAD:
            raise self.error(f"payload of {length} bytes exceeds the {MAX_PAYLOAD} limit", seq)
        try:
            kind = MessageType(mtype)
        except ValueError:
            raise self.error(f"unknown message type {mtype}", seq) from None
        return kind, length, seq

    def open(self, header: bytes, rest: bytes) -> Frame:
        """Check a whole frame (``rest``: payload and MAC) and advance the expected sequence."""
        mtype, length, seq = self.check_header(header)
        if len(rest) != length + MAC_BYTES:
            raise self.error(f"frame cut: {len(rest)} of {length + MAC_BYTES} bytes", seq)
        payload, mac = rest[:length], rest[length:]
        expected = hmac.digest(self._recv_key, header + payload, "sha256")
        if not hmac.compare_digest(mac, expected):
            raise self.error("MAC does not verify (wrong key, or forged or corrupt frame)", seq)
        if seq != self.recv_seq:
            raise self.error(f"sequence number {seq}, expected {self.recv_seq} (replay?)", seq)
        self.recv_seq += 1
        return Frame(mtype, seq, payload)

    def decode(self, data: bytes) -> Frame:
        """One whole frame held in memory."""
        return self.open(data[: HEADER.size], data[HEADER.size :])

    async def read(self, reader: asyncio.StreamReader) -> Frame:
        """The next frame from a stream (:class:`ProtocolError` on a cut or bad frame;
        :class:`asyncio.IncompleteReadError` when the peer closed between frames)."""
        try:
            header = await reader.readexactly(HEADER.size)
        except asyncio.IncompleteReadError as e:
            if not e.partial:
                raise
            cut = f"connection closed inside a frame header ({len(e.partial)} bytes)"
            raise self.error(cut) from None
        _, length, seq = self.check_header(header)
        try:
            rest = await reader.readexactly(length + MAC_BYTES)
        except asyncio.IncompleteReadError as e:
            cut = f"connection closed inside a frame ({len(e.partial)} bytes)"
            raise self.error(cut, seq) from None
        return self.open(header, rest)


# Payloads. Each decoder takes the channel only to name the peer in its errors.

_IV = struct.Struct("!qI")  # interval index, a count
_SKETCH = struct.Struct("!qQI")  # interval, set size, sketch values
_END = struct.Struct("!q")


def _array(ch: Channel, data: bytes, offset: int, dtype: str, n: int, what: str) -> np.ndarray:
    size = np.dtype(dtype).itemsize * n
    if len(data) < offset + size:
        raise ch.error(f"{what}: payload too short for {n} values")
    return np.frombuffer(data, dtype=dtype, count=n, offset=offset).astype(dtype[1:])


def _exact(ch: Channel, data: bytes, size: int, what: str) -> None:
    if len(data) != size:
        raise ch.error(f"{what}: payload of {len(data)} bytes, expected {size}")


def _head(ch: Channel, st: struct.Struct, data: bytes, what: str) -> tuple:
    if len(data) < st.size:
        raise ch.error(f"{what}: payload too short")
    return st.unpack_from(data)


@dataclass(frozen=True)
class Sketch:
    interval: int
    size: int
    values: np.ndarray


def encode_sketch(interval: int, size: int, values: np.ndarray) -> bytes:
    return _SKETCH.pack(interval, size, len(values)) + values.astype("<u8").tobytes()


def decode_sketch(ch: Channel, data: bytes) -> Sketch:
    interval, size, n = _head(ch, _SKETCH, data, "sketch")
    _exact(ch, data, _SKETCH.size + 8 * n, "sketch")
    return Sketch(interval, size, _array(ch, data, _SKETCH.size, "<u8", n, "sketch"))


def encode_interval_count(interval: int, count: int) -> bytes:
    """A synopsis request: interval and buckets per bank."""
    return _IV.pack(interval, count)


def decode_interval_count(ch: Channel, data: bytes) -> tuple[int, int]:
    _exact(ch, data, _IV.size, "synopsis request")
    return _IV.unpack(data)


@dataclass(frozen=True)
class SynopsisArrays:
    interval: int
    buckets_per_bank: int
    idx: np.ndarray
    ts: np.ndarray
    count: np.ndarray


def encode_synopsis(interval: int, buckets_per_bank: int, idx, ts, count) -> bytes:
    return b"".join(
        [
            _IV.pack(interval, buckets_per_bank),
            idx.astype("<u8").tobytes(),
            ts.astype("<u8").tobytes(),
            count.astype("<i4").tobytes(),
        ]
    )


def decode_synopsis(ch: Channel, data: bytes, k: int) -> SynopsisArrays:
    """A synopsis of ``k`` banks (k comes from the agreed configuration)."""
    interval, m = _head(ch, _IV, data, "synopsis")
    n = k * m
    _exact(ch, data, _IV.size + 20 * n, "synopsis")
    o = _IV.size
    return SynopsisArrays(
        interval,
        m,
        _array(ch, data, o, "<u8", n, "synopsis"),
        _array(ch, data, o + 8 * n, "<u8", n, "synopsis"),
        _array(ch, data, o + 16 * n, "<i4", n, "synopsis"),
    )


def encode_ids(interval: int, ids: np.ndarray) -> bytes:
    return _IV.pack(interval, len(ids)) + ids.astype("<u8").tobytes()


def decode_ids(ch: Channel, data: bytes) -> tuple[int, np.ndarray]:
    interval, n = _head(ch, _IV, data, "timestamp request")
    _exact(ch, data, _IV.size + 8 * n, "timestamp request")
    return interval, _array(ch, data, _IV.size, "<u8", n, "timestamp request")


def encode_timestamps(interval: int, found: np.ndarray, ts: np.ndarray) -> bytes:
    return b"".join(
        [_IV.pack(interval, len(ts)), ts.astype("<i8").tobytes(), found.astype("u1").tobytes()]
    )


def decode_timestamps(ch: Channel, data: bytes) -> tuple[int, np.ndarray, np.ndarray]:
    """``(interval, found, timestamps)``."""
    interval, n = _head(ch, _IV, data, "timestamps")
    _exact(ch, data, _IV.size + 9 * n, "timestamps")
    ts = _array(ch, data, _IV.size, "<i8", n, "timestamps")
    found = _array(ch, data, _IV.size + 8 * n, "|u1", n, "timestamps")
    if np.any(found > 1):
        raise ch.error("timestamps: found flags must be 0 or 1")
    return interval, found.astype(bool), ts


def encode_json(record: dict[str, Any]) -> bytes:
    return json.dumps(record, separators=(",", ":")).encode()


def decode_result(ch: Channel, data: bytes) -> dict[str, Any]:
    """An interval's published result: a JSON object with an integer ``interval``."""
    try:
        record = json.loads(data)
    except (ValueError, UnicodeDecodeError) as e:
        raise ch.error(f"result is not JSON: {e}") from None
    if not isinstance(record, dict) or not isinstance(record.get("interval"), int):
        raise ch.error("result has no integer interval")
    return record


def encode_end(last_interval: int) -> bytes:
    return _END.pack(last_interval)


def decode_end(ch: Channel, data: bytes) -> int:
    _exact(ch, data, _END.size, "end")
    return _END.unpack(data)[0]


def params_config(*objs: Any) -> dict[str, Any]:
    """A flat configuration dict from parameter dataclasses (``Class.field`` keys), plus the
    protocol version: what two agents must agree on."""
    out: dict[str, Any] = {"protocol_version": VERSION}
    for obj in objs:
        for f in dataclasses.fields(obj):
            out[f"{type(obj).__name__}.{f.name}"] = getattr(obj, f.name)
    return out
