"""The wire protocol between the two agents of the RDA one-way latency service.

"Every Timestamp Counts: Accurate Tracking of Network Latencies using Reconcilable Difference
Aggregator" (RDA) has the two capture points exchange, per interval, MinHash sketches (late
binding), one synopsis, and the timestamps of the packets the decoder lists. The paper does not
specify a wire format; this one is ours:

Every message is one frame::

    magic "TRDA" | version u8 | type u8 | reserved u16 (0) | payload length u32 | sequence u64
    | payload | HMAC-SHA256(MAC key, header + payload)  (32 bytes)

all integers big-endian. A frame is refused (:class:`ProtocolError`) when its magic, version,
type or reserved field is wrong, its payload exceeds the limit (checked on the header, before
anything else is read: :data:`MAX_HANDSHAKE_PAYLOAD` until the peer has proven the key,
:data:`MAX_PAYLOAD` afterwards), its MAC does not verify (compared with
:func:`hmac.compare_digest`), or its sequence number is not the next one expected on that
connection (replay, reordering, deletion).

The handshake is a challenge-response with key confirmation; nothing but roles and random
nonces crosses the connection before the peer has proven that it holds the shared key:

1. connector → listener :attr:`MessageType.HELLO`: its role and a fresh random nonce ``Nc``;
2. listener → connector :attr:`MessageType.CHALLENGE`: its role, a fresh random nonce ``Nl``
   and its proof ``HMAC(S, "listener proof")``;
3. connector → listener :attr:`MessageType.PROOF`: its proof ``HMAC(S, "connector proof")``;
4. each way :attr:`MessageType.CONFIG`: the configuration with a SHA-256 digest of it.

``S = HMAC(key, "tacit-rda session" ‖ role_c ‖ Nc ‖ role_l ‖ Nl)`` is the session secret; the
frames' MAC keys are ``HMAC(S, "key c2l")`` and ``HMAC(S, "key l2c")`` from the proof on
(the hello and the challenge are MAC'd with the shared key itself). A frame of one session,
or of one direction, therefore does not verify in another, and a captured handshake replayed
into a new connection fails at its proof: the listener's nonce is new. The proofs use distinct
labels, so the listener's proof, which it gives to any connector, is never a connector's. The
configurations are exchanged only once both sides are proven; two agents whose configurations
differ (interval, synopsis size, k, seeds, sampling, ...) refuse each other with
:class:`ConfigMismatchError`, naming every field that differs.

Payloads are compact: arrays are numpy buffers (little-endian), scalars ``struct``; only the
configuration and the published result of an interval (a handful of named values) are JSON.
Every decoder checks the payload's exact length against what its counts announce.
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
VERSION = 2
"""2: challenge-response handshake with key confirmation, configuration after it."""
HEADER = struct.Struct("!4sBBHIQ")
MAC_BYTES = 32
NONCE_BYTES = 32
MAX_PAYLOAD = 64 * 2**20
"""Largest payload accepted (64 MiB): a synopsis of 3 banks × 1 M buckets is 60 MiB."""
MAX_HANDSHAKE_PAYLOAD = 4096
"""Largest payload accepted before the peer has proven the key (a challenge is 65 bytes)."""


class MessageType(enum.IntEnum):
    HELLO = 1
    """Connector → listener, the first frame: its role and a fresh nonce."""
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
    CHALLENGE = 11
    """Listener → connector: its role, a fresh nonce and its proof of the key."""
    PROOF = 12
    """Connector → listener: its proof of the key (the first frame under the session keys)."""
    CONFIG = 13
    """Each way, once both are proven: the configuration (JSON) and its digest."""


HANDSHAKE_TYPES = frozenset({MessageType.HELLO, MessageType.CHALLENGE, MessageType.PROOF})
"""The only frames taken before the peer has proven the key."""


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


_HELLO = struct.Struct(f"!B{NONCE_BYTES}s")  # role, nonce
_CHALLENGE = struct.Struct(f"!B{NONCE_BYTES}s{MAC_BYTES}s")  # role, nonce, listener's proof
_PROOF = struct.Struct(f"!{MAC_BYTES}s")


def _sha(key: bytes, data: bytes) -> bytes:
    return hmac.digest(key, data, "sha256")


class Channel:
    """One connection's handshake, framing, MACs and sequence numbers (no I/O: the methods make
    the bytes of frames and check what was read).

    ``connector`` is True on the side that opened the connection. The connector calls
    :meth:`hello`, :meth:`accept_challenge`, :meth:`proof`; the listener :meth:`accept_hello`,
    :meth:`challenge`, :meth:`accept_proof`; then both :meth:`config_frame` and
    :meth:`accept_config`. :attr:`authenticated` turns True once the peer has proven the key;
    until then only handshake frames of at most :data:`MAX_HANDSHAKE_PAYLOAD` bytes are taken.
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
        self.authenticated = False
        """The peer has proven that it holds the key, in this session."""
        self._send_key = key
        self._recv_key = key
        self._role: Role | None = None
        self._peer_hello: tuple[Role, bytes] | None = None
        self._session_keys = (key, key)
        self._connector_proof: bytes | None = None

    def error(self, message: str, sequence: int | None = None) -> ProtocolError:
        return ProtocolError(
            message, path=self.peer, record=None if sequence is None else f"frame {sequence}"
        )

    def _expect(self, frame: Frame, mtype: MessageType, st: struct.Struct) -> tuple:
        if frame.type != mtype:
            raise self.error(f"expected a {mtype.name}, got {frame.type.name}", frame.sequence)
        if len(frame.payload) != st.size:
            raise self.error(f"{mtype.name}: payload of {len(frame.payload)} bytes", frame.sequence)
        return st.unpack(frame.payload)

    def _role_of(self, value: int, expected: Role, frame: Frame) -> Role:
        try:
            role = Role(value)
        except ValueError:
            raise self.error(f"unknown role {value}", frame.sequence) from None
        if role != expected:
            raise self.error(f"peer is a {role.name.lower()}, expected a {expected.name.lower()}")
        return role

    def _derive(self, connector: tuple[Role, bytes], listener: tuple[Role, bytes]) -> bytes:
        """The session secret (from the shared key and both sides' roles and nonces) and the
        listener's proof; the connector's proof and the frames' MAC keys come from it too."""
        transcript = b"".join(_HELLO.pack(*side) for side in (connector, listener))
        session = _sha(self.key, b"tacit-rda session" + transcript)
        self._connector_proof = _sha(session, b"connector proof")
        c2l, l2c = (_sha(session, label) for label in (b"key c2l", b"key l2c"))
        self._session_keys = (c2l, l2c) if self.connector else (l2c, c2l)
        return _sha(session, b"listener proof")

    def _use_session_keys(self) -> None:
        self._send_key, self._recv_key = self._session_keys

    # connector
    def hello(self, role: Role) -> bytes:
        """Connector: the first frame."""
        self._role = role
        return self.seal(MessageType.HELLO, _HELLO.pack(role, self.nonce))

    def accept_challenge(self, frame: Frame, expected: Role) -> None:
        """Connector: check the listener's role and proof; switch to the session keys."""
        role, nonce, proof = self._expect(frame, MessageType.CHALLENGE, _CHALLENGE)
        peer = self._role_of(role, expected, frame)
        if self._role is None:
            raise self.error("a challenge before our hello", frame.sequence)
        if not hmac.compare_digest(proof, self._derive((self._role, self.nonce), (peer, nonce))):
            raise self.error("the listener's proof does not verify (wrong key)", frame.sequence)
        self.authenticated = True
        self._use_session_keys()

    def proof(self) -> bytes:
        """Connector: its proof of the key, once the listener's has verified."""
        if not self.authenticated or self._connector_proof is None:
            raise self.error("no proof before the listener has proven the key")
        return self.seal(MessageType.PROOF, _PROOF.pack(self._connector_proof))

    # listener
    def accept_hello(self, frame: Frame, expected: Role) -> None:
        """Listener: take the connector's role and nonce."""
        role, nonce = self._expect(frame, MessageType.HELLO, _HELLO)
        self._peer_hello = (self._role_of(role, expected, frame), nonce)

    def challenge(self, role: Role) -> bytes:
        """Listener: its nonce and proof; later frames use the session keys."""
        if self._peer_hello is None:
            raise self.error("no challenge before the connector's hello")
        proof = self._derive(self._peer_hello, (role, self.nonce))
        frame = self.seal(MessageType.CHALLENGE, _CHALLENGE.pack(role, self.nonce, proof))
        self._use_session_keys()
        return frame

    def accept_proof(self, frame: Frame) -> None:
        """Listener: check the connector's proof (its frame's MAC already used the session key)."""
        (proof,) = self._expect(frame, MessageType.PROOF, _PROOF)
        if self._connector_proof is None:
            raise self.error("a proof before our challenge", frame.sequence)
        if not hmac.compare_digest(proof, self._connector_proof):
            raise self.error("the connector's proof does not verify", frame.sequence)
        self.authenticated = True

    # both
    def config_frame(self, config: dict[str, Any]) -> bytes:
        """Our configuration: only to a peer that has proven the key."""
        if not self.authenticated:
            raise self.error("configuration withheld: the peer has not proven the key")
        return self.seal(MessageType.CONFIG, config_digest(config) + _canonical(config))

    def accept_config(self, frame: Frame, config: dict[str, Any]) -> dict[str, Any]:
        """The peer's configuration, checked against its digest and against ours."""
        if frame.type != MessageType.CONFIG:
            raise self.error(f"expected a CONFIG, got {frame.type.name}", frame.sequence)
        digest, body = frame.payload[:32], frame.payload[32:]
        try:
            theirs = json.loads(body)
        except (ValueError, UnicodeDecodeError) as e:
            raise self.error(f"malformed configuration: {e}", frame.sequence) from None
        if not isinstance(theirs, dict) or config_digest(theirs) != digest:
            raise self.error("configuration does not match its digest", frame.sequence)
        if digest != config_digest(config):
            diff = "; ".join(config_differences(config, theirs))
            raise ConfigMismatchError(f"{self.peer}: agent configurations differ: {diff}")
        return theirs

    def seal(self, mtype: MessageType, payload: bytes) -> bytes:
        """The bytes of one frame; advances our sequence number."""
        if len(payload) > MAX_PAYLOAD:
            raise ConfigError(f"{mtype.name} payload of {len(payload)} bytes exceeds the limit")
        header = HEADER.pack(MAGIC, VERSION, mtype, 0, len(payload), self.send_seq)
        self.send_seq += 1
        return header + payload + _sha(self._send_key, header + payload)

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
        limit = MAX_PAYLOAD if self.authenticated else MAX_HANDSHAKE_PAYLOAD
        if length > limit:
            before = "" if self.authenticated else " before authentication"
            raise self.error(f"payload of {length} bytes exceeds the {limit} limit{before}", seq)
        try:
            kind = MessageType(mtype)
        except ValueError:
            raise self.error(f"unknown message type {mtype}", seq) from None
        if not self.authenticated and kind not in HANDSHAKE_TYPES:
            raise self.error(f"a {kind.name} frame before authentication", seq)
        return kind, length, seq

    def open(self, header: bytes, rest: bytes) -> Frame:
        """Check a whole frame (``rest``: payload and MAC) and advance the expected sequence."""
        mtype, length, seq = self.check_header(header)
        if len(rest) != length + MAC_BYTES:
            raise self.error(f"frame cut: {len(rest)} of {length + MAC_BYTES} bytes", seq)
        payload, mac = rest[:length], rest[length:]
        if not hmac.compare_digest(mac, _sha(self._recv_key, header + payload)):
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
