"""IP packets as numpy column batches: what response latency (Pirate) and one-way latency (RDA)
work on.

One row per IP packet seen at one capture point, with the fields those algorithms need: the
capture time, the 5-tuple, TCP sequence state and timestamps, and :attr:`PacketTable.ident`, a
hash of what a packet keeps along its path so that the same packet can be recognised at two
capture points (RDA, Lee et al., "Not all microseconds are equal", CoNEXT '10, §3: packets are
matched across measurement points by invariant content).

Addresses are 128-bit, split into two uint64 columns (``hi``: the first eight bytes, ``lo``: the
last eight, both as big-endian numbers). IPv4 addresses are stored IPv4-mapped (RFC 4291
§2.5.5.2, ``::ffff:a.b.c.d``) so that one representation, one comparison and one hash serve
both versions.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt
from numba import njit

from tacit.digits import ascii_digits
from tacit.errors import ConfigError
from tacit.model.columns import ColumnTable, StringPool
from tacit.model.messages import MISSING

NO_TIME = MISSING
"""The time of a packet whose record carried none (a pcapng Simple Packet Block)."""

TCP = 6
UDP = 17

FIN, SYN, RST, PSH, ACK, URG, ECE, CWR, AE = (1 << i for i in range(9))
"""TCP flag bits as stored in :attr:`PacketTable.tcp_flags` (AE, formerly NS, is bit 8)."""

V4_MAPPED = 0xFFFF_0000_0000
"""``lo`` of ``::ffff:0.0.0.0``: an IPv4 address ``a`` is ``(0, V4_MAPPED | a)``."""

IDENT_PAYLOAD = 32
"""How many leading payload bytes :attr:`PacketTable.ident` covers."""
IDENT_HEADER = 48
"""Bytes of header fields in front of the payload in the ident key (see :func:`ident_key`)."""

_COLUMNS = {
    "time": np.int64,
    "record": np.int64,
    "interface": np.int16,
    "wire_len": np.uint32,
    "cap_len": np.uint32,
    "ip_version": np.uint8,
    "src_hi": np.uint64,
    "src_lo": np.uint64,
    "dst_hi": np.uint64,
    "dst_lo": np.uint64,
    "proto": np.uint8,
    "sport": np.uint16,
    "dport": np.uint16,
    "ip_id": np.uint16,
    "ttl": np.uint8,
    "tcp_flags": np.uint16,
    "seq": np.uint32,
    "ack": np.uint32,
    "window": np.uint16,
    "ts_val": np.uint32,
    "ts_ecr": np.uint32,
    "has_ts": np.bool_,
    "payload_len": np.int32,
    "truncated": np.bool_,
    "ident": np.uint64,
}


@dataclass
class PacketTable(ColumnTable):
    """A batch of IP packets, one numpy column per field.

    - ``time``: capture time, int64 ns since the Unix epoch (:data:`NO_TIME` when the record had
      none).
    - ``record``: position of the packet's record in its file, 0-based, counting every packet
      record (IP or not, decoded or not), so ``record + 1`` is Wireshark's frame number.
    - ``interface``: the capture interface (pcapng interface, numbered across the sections of a
      file; 0 for pcap).
    - ``wire_len`` / ``cap_len``: bytes of the frame on the wire and in the capture.
    - ``ip_version``: 4 or 6. ``src_hi``, ``src_lo``, ``dst_hi``, ``dst_lo``: the addresses
      (module docstring). ``proto``: the transport protocol (IPv6: after the extension headers).
    - ``sport`` / ``dport``: TCP or UDP ports, 0 for other protocols.
    - ``ip_id``: the IPv4 identification, 0 for IPv6. ``ttl``: TTL or hop limit.
    - ``tcp_flags`` (:data:`FIN` ...), ``seq``, ``ack``, ``window`` (as sent, not scaled),
      ``ts_val`` / ``ts_ecr`` / ``has_ts`` (the TCP timestamp option, RFC 7323): 0 when absent.
    - ``payload_len``: transport payload bytes by the IP header's length, i.e. as sent even when
      the capture cut the packet; -1 when the transport header was cut before its length.
    - ``truncated``: the capture holds less of the packet than its IP length says.
    - ``ident``: xxHash64 of :func:`ident_key` — the fields a packet keeps from one capture point
      to the next (IP version, addresses, protocol, ports, IPv4 id, TCP seq/ack, and the first
      :data:`IDENT_PAYLOAD` captured payload bytes), not TTL, checksums or options a middlebox may
      rewrite. Two captures of one packet agree when both captured those payload bytes.

    ``sources`` names the input files.
    """

    strings: StringPool
    time: np.ndarray
    record: np.ndarray
    interface: np.ndarray
    wire_len: np.ndarray
    cap_len: np.ndarray
    ip_version: np.ndarray
    src_hi: np.ndarray
    src_lo: np.ndarray
    dst_hi: np.ndarray
    dst_lo: np.ndarray
    proto: np.ndarray
    sport: np.ndarray
    dport: np.ndarray
    ip_id: np.ndarray
    ttl: np.ndarray
    tcp_flags: np.ndarray
    seq: np.ndarray
    ack: np.ndarray
    window: np.ndarray
    ts_val: np.ndarray
    ts_ecr: np.ndarray
    has_ts: np.ndarray
    payload_len: np.ndarray
    truncated: np.ndarray
    ident: np.ndarray
    sources: list[str] = field(default_factory=list)
    COLUMNS: ClassVar[Mapping[str, npt.DTypeLike]] = _COLUMNS

    @classmethod
    def allocate(cls, n: int) -> PacketTable:
        """A table of ``n`` uninitialised rows, for a reader to fill in place."""
        columns: dict[str, Any] = {k: np.empty(n, v) for k, v in _COLUMNS.items()}
        return cls(StringPool(), **columns)

    def take(self, rows: np.ndarray) -> PacketTable:
        """The packets at ``rows`` (an index array or mask)."""
        rows = np.flatnonzero(rows) if rows.dtype == bool else np.asarray(rows, dtype=np.int64)
        return PacketTable(
            self.strings, **{k: v[rows] for k, v in self.columns().items()}, sources=self.sources
        )

    def src(self, row: int) -> str:
        """The source ``address:port`` of one packet."""
        return format_endpoint(self.src_hi[row], self.src_lo[row], int(self.sport[row]))

    def dst(self, row: int) -> str:
        """The destination ``address:port`` of one packet."""
        return format_endpoint(self.dst_hi[row], self.dst_lo[row], int(self.dport[row]))

    def describe(self, row: int) -> str:
        """A short human description of one packet, for errors and reports."""
        proto, record = int(self.proto[row]), int(self.record[row])
        return f"{self.src(row)} -> {self.dst(row)} proto {proto} (record {record})"


@dataclass
class PacketPayloads:
    """The captured transport payload bytes of the rows of a :class:`PacketTable`.

    Row ``i``'s bytes are ``data[offsets[i]:offsets[i + 1]]``: what the capture holds of its
    payload, so shorter than ``payload_len`` when the snap length cut the packet, and empty when
    the transport header was not decoded (``payload_len`` -1). ``data`` is one uint8 array of
    every row's bytes end to end, ``offsets`` int64 with one entry more than there are rows.
    """

    data: np.ndarray
    offsets: np.ndarray

    def __post_init__(self) -> None:
        self.data = np.asarray(self.data, dtype=np.uint8)
        self.offsets = np.asarray(self.offsets, dtype=np.int64)
        if len(self.offsets) == 0 or self.offsets[0] != 0 or self.offsets[-1] != len(self.data):
            raise ValueError("payload offsets must run from 0 to the length of the data")

    @classmethod
    def empty(cls) -> PacketPayloads:
        return cls(np.empty(0, np.uint8), np.zeros(1, np.int64))

    @classmethod
    def gather(cls, buf: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> PacketPayloads:
        """The payloads of ``lengths[i]`` bytes at ``buf[starts[i]:]``, copied out of ``buf``."""
        lengths = np.asarray(lengths, dtype=np.int64)
        offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        shift = np.repeat(np.asarray(starts, dtype=np.int64) - offsets[:-1], lengths)
        return cls(buf[np.arange(offsets[-1], dtype=np.int64) + shift], offsets)

    @classmethod
    def concat(cls, parts: Sequence[PacketPayloads]) -> PacketPayloads:
        """The payloads of concatenated tables (see :func:`concat_packets`)."""
        if not parts:
            return cls.empty()
        lengths = np.concatenate([p.lengths() for p in parts])
        offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        return cls(np.concatenate([p.data for p in parts]), offsets)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, row: int) -> bytes:
        return self.data[self.offsets[row] : self.offsets[row + 1]].tobytes()

    def lengths(self) -> np.ndarray:
        """Captured payload bytes per row."""
        return np.diff(self.offsets)

    def take(self, rows: np.ndarray) -> PacketPayloads:
        """The payloads of the rows at ``rows`` (an index array or mask), in that order."""
        rows = np.flatnonzero(rows) if rows.dtype == bool else np.asarray(rows, dtype=np.int64)
        return PacketPayloads.gather(self.data, self.offsets[rows], self.lengths()[rows])


def concat_packets(tables: Sequence[PacketTable]) -> PacketTable:
    """Concatenate tables (their ``record`` columns are kept as they are)."""
    if not tables:
        return PacketTable.empty()
    sources: list[str] = []
    for t in tables:
        sources.extend(s for s in t.sources if s not in sources)
    cols = {k: np.concatenate([getattr(t, k) for t in tables]) for k in _COLUMNS}
    return PacketTable(StringPool(), **cols, sources=sources)


def parse_address(text: str) -> tuple[int, int]:
    """``(hi, lo)`` of an IPv4 or IPv6 address (IPv4 mapped, module docstring)."""
    try:
        ip = ipaddress.ip_address(text.strip())
    except ValueError:
        raise ConfigError(f"not an IP address: {text!r}") from None
    value = int(ip) | V4_MAPPED if ip.version == 4 else int(ip)
    return value >> 64, value & 0xFFFF_FFFF_FFFF_FFFF


def parse_endpoint(text: str) -> tuple[int, int, int | None]:
    """``(hi, lo, port)`` of ``ADDR``, ``ADDR:PORT``, ``[V6]`` or ``[V6]:PORT`` (port None
    when not given). A bare IPv6 address (more than one colon) has no port."""
    s = text.strip()
    port: str | None = None
    if s.startswith("["):
        addr, sep, rest = s[1:].partition("]")
        if not sep or (rest and not rest.startswith(":")):
            raise ConfigError(f"not an endpoint: {text!r} (expected [IPv6]:PORT)")
        port = rest[1:] if rest else None
    elif s.count(":") == 1:
        addr, port = s.split(":")
    else:
        addr = s
    hi, lo = parse_address(addr)
    if port is None:
        return hi, lo, None
    if not ascii_digits(port) or int(port) > 0xFFFF:
        raise ConfigError(f"not a port number: {port!r} in {text!r}")
    return hi, lo, int(port)


def format_address(hi: int, lo: int) -> str:
    """The text form of an address: dotted quad for IPv4-mapped, RFC 5952 for IPv6."""
    hi, lo = int(hi), int(lo)
    if hi == 0 and lo >> 32 == 0xFFFF:
        return str(ipaddress.IPv4Address(lo & 0xFFFF_FFFF))
    return str(ipaddress.IPv6Address(hi << 64 | lo))


def format_endpoint(hi: int, lo: int, port: int) -> str:
    """``a.b.c.d:port`` or ``[v6]:port``."""
    addr = format_address(hi, lo)
    return f"{addr}:{port}" if ":" not in addr else f"[{addr}]:{port}"


# xxHash64 (Collet, https://github.com/Cyan4973/xxHash/blob/dev/doc/xxhash_spec.md), written
# here because it must be callable from the packet reader's compiled loop; tested against the
# reference implementation (the `xxhash` package) in tests/model/test_packets.py.
_P1 = np.uint64(0x9E3779B185EBCA87)
_P2 = np.uint64(0xC2B2AE3D27D4EB4F)
_P3 = np.uint64(0x165667B19E3779F9)
_P4 = np.uint64(0x85EBCA77C2B2AE63)
_P5 = np.uint64(0x27D4EB2F165667C5)


@njit(cache=True)
def _rotl(x: np.uint64, r: int) -> np.uint64:
    return (x << np.uint64(r)) | (x >> np.uint64(64 - r))


@njit(cache=True)
def _le64(b: np.ndarray, i: int) -> np.uint64:
    v = np.uint64(0)
    for k in range(8):
        v |= np.uint64(b[i + k]) << np.uint64(8 * k)
    return v


@njit(cache=True)
def _round(acc: np.uint64, lane: np.uint64) -> np.uint64:
    return _rotl(acc + lane * _P2, 31) * _P1


@njit(cache=True)
def _merge(acc: np.uint64, v: np.uint64) -> np.uint64:
    return (acc ^ _round(np.uint64(0), v)) * _P1 + _P4


@njit(cache=True)
def xxh64_array(data: np.ndarray, n: int, seed: np.uint64) -> np.uint64:
    """xxHash64 of the first ``n`` bytes of the uint8 array ``data``."""
    i = 0
    if n >= 32:
        v1 = seed + _P1 + _P2
        v2 = seed + _P2
        v3 = seed
        v4 = seed - _P1
        while i + 32 <= n:
            v1 = _round(v1, _le64(data, i))
            v2 = _round(v2, _le64(data, i + 8))
            v3 = _round(v3, _le64(data, i + 16))
            v4 = _round(v4, _le64(data, i + 24))
            i += 32
        h = _rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)
        h = _merge(_merge(_merge(_merge(h, v1), v2), v3), v4)
    else:
        h = seed + _P5
    h += np.uint64(n)
    while i + 8 <= n:
        h = _rotl(h ^ _round(np.uint64(0), _le64(data, i)), 27) * _P1 + _P4
        i += 8
    if i + 4 <= n:
        w = np.uint64(0)
        for k in range(4):
            w |= np.uint64(data[i + k]) << np.uint64(8 * k)
        h = _rotl(h ^ (w * _P1), 23) * _P2 + _P3
        i += 4
    while i < n:
        h = _rotl(h ^ (np.uint64(data[i]) * _P5), 11) * _P1
        i += 1
    h ^= h >> np.uint64(33)
    h *= _P2
    h ^= h >> np.uint64(29)
    h *= _P3
    h ^= h >> np.uint64(32)
    return h


def xxh64(data: bytes, seed: int = 0) -> int:
    """xxHash64 of ``data`` (the compiled :func:`xxh64_array`, for use from Python)."""
    arr = np.frombuffer(data, dtype=np.uint8)
    return int(xxh64_array(arr, len(arr), np.uint64(seed)))


@njit(cache=True)
def _put(key: np.ndarray, i: int, value: np.uint64, width: int) -> None:
    for k in range(width):
        key[i + k] = (value >> np.uint64(8 * (width - 1 - k))) & np.uint64(0xFF)


@njit(cache=True)
def ident_key(
    key: np.ndarray,
    ip_version: int,
    proto: int,
    src_hi: np.uint64,
    src_lo: np.uint64,
    dst_hi: np.uint64,
    dst_lo: np.uint64,
    sport: int,
    dport: int,
    ip_id: int,
    seq: int,
    ack: int,
) -> None:
    """Write the :data:`IDENT_HEADER` header bytes of an ident key into ``key`` (uint8, at least
    ``IDENT_HEADER + IDENT_PAYLOAD`` long); the payload prefix follows them.

    Layout (big-endian): version (1), proto (1), src (16), dst (16), sport (2), dport (2),
    IPv4 id (2), TCP seq (4), TCP ack (4).
    """
    key[0] = ip_version
    key[1] = proto
    _put(key, 2, src_hi, 8)
    _put(key, 10, src_lo, 8)
    _put(key, 18, dst_hi, 8)
    _put(key, 26, dst_lo, 8)
    _put(key, 34, np.uint64(sport), 2)
    _put(key, 36, np.uint64(dport), 2)
    _put(key, 38, np.uint64(ip_id), 2)
    _put(key, 40, np.uint64(seq), 4)
    _put(key, 44, np.uint64(ack), 4)


def packet_ident(
    src: str,
    dst: str,
    *,
    proto: int = TCP,
    sport: int = 0,
    dport: int = 0,
    ip_id: int = 0,
    seq: int = 0,
    ack: int = 0,
    payload: bytes = b"",
) -> int:
    """The :attr:`PacketTable.ident` of a packet given by its fields (for simulators and tests;
    the IP version follows from ``src``)."""
    addresses = [np.uint64(v) for v in (*parse_address(src), *parse_address(dst))]
    key = np.zeros(IDENT_HEADER + IDENT_PAYLOAD, dtype=np.uint8)
    version = ipaddress.ip_address(src).version
    ident_key(key, version, proto, *addresses, sport, dport, ip_id, seq, ack)
    head = payload[:IDENT_PAYLOAD]
    key[IDENT_HEADER : IDENT_HEADER + len(head)] = np.frombuffer(head, dtype=np.uint8)
    return int(xxh64_array(key, IDENT_HEADER + len(head), np.uint64(0)))
