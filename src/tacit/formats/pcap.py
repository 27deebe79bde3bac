"""Reading pcap and pcapng captures into a :class:`~tacit.model.packets.PacketTable`.

Formats: classic pcap (draft-ietf-opsawg-pcap: either byte order, microsecond and nanosecond
magic) and pcapng (draft-ietf-opsawg-pcapng: sections of either byte order, Interface Description
Blocks with ``if_tsresol`` as a power of 10 or of 2 and ``if_tsoffset``, Enhanced, Simple and
obsolete Packet Blocks; other blocks are counted and skipped), gzip-compressed or not (told by
the magic bytes, not the name). Link types (numbered as in the LINKTYPE registry,
https://www.tcpdump.org/linktypes.html): NULL (0), ETHERNET (1, with 802.1Q and 802.1ad QinQ
tags), RAW (101), LOOP (108), LINUX_SLL (113), IPV4 (228), IPV6 (229), LINUX_SLL2 (276). IPv4
with options and IPv6 with hop-by-hop, routing, fragment, destination options and AH extension
headers are walked to TCP or UDP; TCP options to the timestamp option (RFC 7323).

Every packet record is accounted for (:class:`~tacit.model.captures.PacketAccounting`): a row
of the table, or a count with its reason (not IP, unsupported link type, cut before the end of
the IP header, a non-first fragment, malformed, or cut by the end of the file). A capture killed
mid-write ends in a cut record: that is counted (``truncated_file``), not an error. A length
that cannot be right (a record longer than any snap length, a pcapng block of impossible size,
a timestamp beyond int64 nanoseconds) is garbage: an :class:`~tacit.errors.InputError` naming the
file, record and byte offset, raised after the records before it are delivered. A file of which
no record decodes, or no packet has a time, is refused too, rather than read as no traffic.

Why hand-written rather than dpkt: dpkt builds a Python object per header, far too slow for
the at least 500,000 packets/s end to end on one core that the latency features need
(bench/bench_pcap.py measures both). Here one compiled loop (numba)
walks the records over the file's bytes and writes straight into preallocated numpy columns; no
Python object is made per packet. pcap's ``thiszone`` is ignored: the draft says it is 0 in
practice, and the timestamps are UTC.
"""

from __future__ import annotations

import mmap
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO, Literal

import numpy as np
from numba import njit

from tacit.errors import InputError
from tacit.formats.textio import GZIP_MAGIC, open_input, read_bytes, read_head
from tacit.model.captures import PacketAccounting, PacketRead
from tacit.model.packets import (
    IDENT_HEADER,
    IDENT_PAYLOAD,
    NO_TIME,
    V4_MAPPED,
    PacketPayloads,
    PacketTable,
    concat_packets,
    ident_key,
    xxh64_array,
)

PCAP_MAGIC = {  # the first four bytes read little-endian: (big-endian file, ns per fraction unit)
    0xA1B2C3D4: (False, 1000),
    0xD4C3B2A1: (True, 1000),
    0xA1B23C4D: (False, 1),
    0x4D3CB2A1: (True, 1),
}
PCAPNG_MAGIC = 0x0A0D0D0A
"""The Section Header Block type, which every pcapng file starts with."""

MAX_SNAPLEN = 262144
"""libpcap's largest snap length: a pcap record longer than this (and the file's own snap
length) is garbage, not a packet."""
MAX_BLOCK = 16 * 2**20
"""libpcap's largest pcapng block: a longer block length is garbage."""
MAX_INTERFACES = 4096
"""pcapng interfaces per file (over all sections) that one walk can keep."""

LINKTYPE_NAMES = {
    0: "NULL",
    1: "ETHERNET",
    101: "RAW",
    108: "LOOP",
    113: "LINUX_SLL",
    228: "IPV4",
    229: "IPV6",
    276: "LINUX_SLL2",
}
"""The supported link types (LINKTYPE registry names)."""

_C = {name: i for i, name in enumerate(PacketTable.COLUMNS)}
_TIME, _RECORD, _IFACE = _C["time"], _C["record"], _C["interface"]
_WIRE, _CAP, _VER = _C["wire_len"], _C["cap_len"], _C["ip_version"]
_SRC_HI, _SRC_LO, _DST_HI, _DST_LO = _C["src_hi"], _C["src_lo"], _C["dst_hi"], _C["dst_lo"]
_PROTO, _SPORT, _DPORT, _IPID, _TTL = _C["proto"], _C["sport"], _C["dport"], _C["ip_id"], _C["ttl"]
_FLAGS, _SEQ, _ACK, _WIN = _C["tcp_flags"], _C["seq"], _C["ack"], _C["window"]
_TSVAL, _TSECR, _HASTS = _C["ts_val"], _C["ts_ecr"], _C["has_ts"]
_PAYLEN, _TRUNC, _IDENT = _C["payload_len"], _C["truncated"], _C["ident"]
# Beside the columns in the scratch row: where the transport payload starts in the buffer and
# how many of its bytes the capture holds (kept per row only when payloads are asked for).
_PAYLOAD_AT, _PAYLOAD_HELD = len(_C), len(_C) + 1

# What became of a record (index into the counters) and the accounting bucket of each.
_IP, _NON_IP, _NOT_IP_FAMILY, _UNSUPPORTED_LINK, _LINK_CUT, _IP_CUT = range(6)
_FRAG4, _FRAG6, _BAD_VERSION, _BAD_IHL, _BAD_IP_LENGTH, _BAD_TCP_OFFSET = range(6, 12)
_BAD_TRANSPORT_LENGTH = 12
# Counted beside the buckets: rows cut by the snap length, rows without a timestamp, first
# fragments (decoded as packets).
_CUT_ROW, _NO_TIME_ROW, _FIRST_FRAGMENT = 13, 14, 15
_N_COUNTS = 16
_REASONS = {
    _NOT_IP_FAMILY: ("non_ip", "loopback address family not IP"),
    _LINK_CUT: ("truncated", "cut in the link-layer header"),
    _IP_CUT: ("truncated", "cut in the IP header"),
    _FRAG4: ("fragments", "IPv4 non-first fragment"),
    _FRAG6: ("fragments", "IPv6 non-first fragment"),
    _BAD_VERSION: ("malformed", "IP version does not match the link layer"),
    _BAD_IHL: ("malformed", "IPv4 header length below 20"),
    _BAD_IP_LENGTH: ("malformed", "IP length shorter than its headers"),
    _BAD_TCP_OFFSET: ("malformed", "TCP data offset below 5"),
    _BAD_TRANSPORT_LENGTH: ("malformed", "transport header longer than the IP length"),
}
_ETHERTYPE_NAMES = {
    0x0806: "ARP",
    0x8035: "RARP",
    0x8809: "slow protocols",
    0x8847: "MPLS",
    0x8848: "MPLS multicast",
    0x8863: "PPPoE discovery",
    0x8864: "PPPoE session",
    0x888E: "EAPOL",
    0x88CC: "LLDP",
    0x88E5: "MACsec",
    0x88F7: "PTP",
    0x9000: "loopback",
}
_BLOCK_NAMES = {
    0: "section header",
    1: "interface description",
    4: "name resolution",
    5: "interface statistics",
    9: "systemd journal export",
    10: "decryption secrets",
    16: "custom",
    17: "other",
}

# How a walk stopped.
_END, _LIMIT = 0, 1  # out of whole records (the rest is a cut one); record limit reached
_ERR_RECORD_LEN, _ERR_BLOCK_LEN, _ERR_TRAILER, _ERR_BYTE_ORDER = 2, 3, 4, 5
_ERR_INTERFACE, _ERR_TSRESOL, _ERR_INTERFACES, _ERR_PACKET_LEN = 6, 7, 8, 9
_ERR_TIME = 10
_ERRORS = {
    _ERR_RECORD_LEN: "impossible record length {info}",
    _ERR_BLOCK_LEN: "impossible block length {info}",
    _ERR_TRAILER: "block length trailer does not match its header",
    _ERR_BYTE_ORDER: "section header has no byte-order magic",
    _ERR_INTERFACE: "packet block names interface {info}, which its section does not describe",
    _ERR_TSRESOL: "unsupported if_tsresol 0x{info:02x}",
    _ERR_INTERFACES: f"more than {MAX_INTERFACES} interfaces",
    _ERR_PACKET_LEN: "packet block captured length {info} exceeds the block",
    _ERR_TIME: "timestamp before 1970 or past 2262 (beyond int64 nanoseconds)",
}

# Walk state (int64 array): the number of the next record, the byte order, the pcap time unit,
# link type and largest record, and for pcapng the current section's first interface and
# interface count, and the interfaces so far.
_NEXT_RECORD, _BIG, _UNIT, _LINK, _MAXCAP, _SECTION_BASE, _SECTION_IFS, _N_IFS = range(8)
# Interface table columns (int64 array, MAX_INTERFACES rows).
_IF_LINK, _IF_SNAP, _IF_RESOL, _IF_OFFSET = range(4)

_POW10 = np.array([10**k for k in range(19)], dtype=np.int64)
_SEC = 1_000_000_000
_SHB, _IDB, _OPB, _SPB, _EPB = PCAPNG_MAGIC, 1, 2, 3, 6
_READ_BLOCK = 8 * 2**20


def read_packets(
    path: str | Path, *, chunk_records: int | None = None, payloads: bool = False
) -> PacketRead:
    """Every IP packet of a pcap or pcapng file (gzip or not) as one table, and with
    ``payloads`` the captured payload bytes of every row (:attr:`PacketRead.payloads`).

    The whole file is walked at once (mapped into memory, or decompressed); with
    ``chunk_records`` it is read in pieces of that many records instead
    (:func:`iter_packet_chunks`) and the pieces joined, so that a compressed file is never held
    whole.
    """
    if chunk_records is not None:
        return join_reads(list(iter_packet_chunks(path, chunk_records, payloads=payloads)), path)
    read = read_packet_buffer(_file_array(str(path)), str(path), payloads=payloads)
    _refuse_undecodable(read.accounting, str(path))
    return read


def _refuse_undecodable(accounting: PacketAccounting, path: str) -> None:
    """Raise when a capture file held packet records but not one decoded, all of them broken
    (malformed or cut before the IP header's end), or when no packet has a time: what it holds
    is not what it claims, and reading it as no traffic (or as packets no use can time) would
    drop every record silently. (A live capture's batch is not held to this: one batch of bad
    frames does not end a capture.)"""
    if accounting.ip_packets and accounting.no_timestamp == accounting.ip_packets:
        raise InputError(
            f"none of its {accounting.ip_packets} packets has a time: pcapng Simple Packet "
            "Blocks carry none",
            path=path,
        )
    broken = accounting.malformed + accounting.truncated
    if (
        accounting.ip_packets
        or not broken
        or broken < accounting.records - accounting.truncated_file
    ):
        return
    kinds = ", ".join(f"{n} {k}" for k, n in sorted(accounting.reasons.items()) if n)
    raise InputError(f"no packet decoded: {accounting.records} records, {kinds}", path=path)


def join_reads(parts: list[PacketRead], source: str | Path) -> PacketRead:
    """Pieces of one capture (in order, at least one) read as one: their rows, accounting and,
    when every piece has them, payloads."""
    accounting = sum((p.accounting for p in parts), PacketAccounting())
    table = concat_packets([p.packets for p in parts])
    table.sources = [str(source)]
    held = None
    if all(p.payloads is not None for p in parts):
        held = PacketPayloads.concat([p.payloads for p in parts if p.payloads is not None])
    return PacketRead(table, accounting, parts[0].format, held)


def read_packet_buffer(
    buf: np.ndarray | bytes, source: str, *, payloads: bool = False
) -> PacketRead:
    """Every IP packet of a whole pcap or pcapng capture held in memory (``buf``: its bytes, not
    compressed); ``source`` names it in errors and in :attr:`PacketTable.sources`. With
    ``payloads``, the captured payload bytes of every row as well.

    This is what :func:`read_packets` does after opening the file, and what a live capture
    (:mod:`tacit.formats.live`) does with each batch of frames it wraps as a pcap.
    """
    if isinstance(buf, bytes | bytearray | memoryview):
        buf = np.frombuffer(buf, dtype=np.uint8)
    walk = _Walk(source, bytes(buf[:24]))
    capacity = walk.count(buf) + 1  # one more: the walk then stops at a cut or bad record itself
    table, rows, records, pos = PacketTable.allocate(capacity), 0, 0, walk.start
    spans = _spans(capacity if payloads else 0)
    counters = _Counters()
    while True:
        status, pos, rows, done, failure = walk.walk(
            buf, pos, table, spans, rows, capacity - records, counters
        )
        if failure is not None:
            raise failure
        records += done
        if status == _END:
            break
        capacity *= 2  # only when the count fell short of the walk
        table = _grow(table, capacity)
        if payloads:
            spans = np.concatenate([spans, _spans(capacity - len(spans))])
    cut = int(pos < len(buf))
    accounting = counters.accounting(records + cut, cut)
    walk.check_decoded(accounting)
    held = _gather(buf, spans, 0, rows) if payloads else None
    return PacketRead(_rows(table, rows, source), accounting, walk.format, held)


def capture_format(path: str | Path) -> str:
    """The format of a capture file (``pcap`` or ``pcapng``, gzip or not), read from its
    header alone: a check before a long-running reader starts. Raises
    :class:`~tacit.errors.InputError` for a file that is not a capture."""
    name = str(path)
    with _open_in(name) as f:
        return _Walk(name, _read(f, name, 24)).format


def iter_packet_chunks(
    path: str | Path, chunk_records: int, *, payloads: bool = False
) -> Iterator[PacketRead]:
    """The packets of a capture in pieces of at most ``chunk_records`` records, reading the file
    (gzip or not) a block at a time, so that files larger than memory can be processed; with
    ``payloads``, each piece carries its rows' captured payload bytes.

    Each piece carries the accounting of its own records; their sum is the file's. A record
    that cannot be right raises its :class:`~tacit.errors.InputError` after the piece holding
    the records before it: a reader of the stream keeps everything the capture held up to it.
    """
    if chunk_records < 1:
        raise ValueError("chunk_records must be at least 1")
    name = str(path)
    with _open_in(name) as f:
        data = _read(f, name, max(_READ_BLOCK, 24))
        walk = _Walk(name, data[:24])
        pos, eof, finished, total = walk.start, False, False, PacketAccounting()
        while not finished:
            table, counters = PacketTable.allocate(chunk_records), _Counters()
            spans = _spans(chunk_records if payloads else 0)
            pieces: list[PacketPayloads] = []
            rows = records = 0
            while records < chunk_records:
                buf = np.frombuffer(data, dtype=np.uint8)
                room = chunk_records - records
                first = rows
                status, pos, rows, done, failure = walk.walk(
                    buf, pos, table, spans, rows, room, counters
                )
                records += done
                if payloads:  # gathered now: the next buffer replaces this one
                    pieces.append(_gather(buf, spans, first, rows))
                if failure is not None or status == _LIMIT:
                    break
                if eof:
                    finished = True
                    break
                more = _read(f, name, _READ_BLOCK)
                walk.offset += pos
                data, pos, eof = data[pos:] + more, 0, not more
            cut = int(finished and pos < len(data))
            accounting = counters.accounting(records + cut, cut)
            total = total + accounting
            if finished:
                walk.check_decoded(total)
                _refuse_undecodable(total, name)
            if records + cut or (finished and not total.records):
                held = PacketPayloads.concat(pieces) if payloads else None
                yield PacketRead(_rows(table, rows, name), accounting, walk.format, held)
            if failure is not None:  # after the records before it, delivered above
                raise failure


def _rows(table: PacketTable, rows: int, source: str) -> PacketTable:
    columns: dict[str, Any] = {k: v[:rows] for k, v in table.columns().items()}
    out = PacketTable(table.strings, **columns)
    out.sources = [source]
    return out


def _spans(rows: int) -> np.ndarray:
    """Per row, where its payload starts in the walked buffer and how many bytes it holds
    (no rows when payloads are not wanted: the walk then keeps none)."""
    return np.empty((rows, 2), dtype=np.int64)


def _gather(buf: np.ndarray, spans: np.ndarray, first: int, end: int) -> PacketPayloads:
    return PacketPayloads.gather(buf, spans[first:end, 0], spans[first:end, 1])


def _grow(table: PacketTable, capacity: int) -> PacketTable:
    bigger = PacketTable.allocate(capacity)
    for k, v in table.columns().items():
        getattr(bigger, k)[: len(v)] = v
    return bigger


def _open_raw(path: str) -> BinaryIO:
    try:
        return open(path, "rb")
    except FileNotFoundError:
        raise InputError("no such file", path=path) from None
    except IsADirectoryError:
        raise InputError("is a directory, expected a file", path=path) from None
    except OSError as e:
        raise InputError(f"cannot read: {e.strerror}", path=path) from None


def _open_in(path: str) -> BinaryIO:
    """``path`` opened for reading, inflated within bounds when it is gzip
    (:func:`.textio.open_input`)."""
    return open_input(_open_raw(path), Path(path))


def _file_array(path: str) -> np.ndarray:
    """The bytes of ``path`` as a uint8 array: decompressed when gzip, else mapped into memory
    (read straight from the page cache: faster than copying the file onto the heap, and no
    memory of its own)."""
    with _open_raw(path) as f:
        if f.read(2) == GZIP_MAGIC:
            _Walk(path, read_head(path, 24))  # no capture is refused from its first bytes
            return np.frombuffer(read_bytes(path), dtype=np.uint8)
        flags = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
        try:
            mapped = mmap.mmap(f.fileno(), 0, flags=flags, prot=mmap.PROT_READ)
        except (OSError, ValueError):  # an empty file, or one that cannot be mapped
            f.seek(0)
            return np.frombuffer(f.read(), dtype=np.uint8)
    return np.frombuffer(mapped, dtype=np.uint8)  # the mapping lives as long as the array


def _read(f: BinaryIO, path: str, size: int) -> bytes:
    try:
        return f.read(size)
    except (EOFError, OSError, zlib.error) as e:
        raise InputError(f"corrupt or truncated gzip stream ({e})", path=path) from None


class _Counters:
    """What one walk counts: record outcomes, non-IP ethertypes, unsupported link types, and
    pcapng blocks without packets."""

    def __init__(self) -> None:
        self.counts = np.zeros(_N_COUNTS, dtype=np.int64)
        self.ethertypes = np.zeros(65536, dtype=np.int64)
        self.linktypes = np.zeros(65536, dtype=np.int64)
        self.blocks = np.zeros(18, dtype=np.int64)
        self.arrays = (self.counts, self.ethertypes, self.linktypes, self.blocks)

    def accounting(self, records: int, cut: int) -> PacketAccounting:
        c = self.counts.tolist()
        a = PacketAccounting(records=records, ip_packets=c[_IP], truncated_file=cut)
        a.truncated_packets = c[_CUT_ROW]
        a.no_timestamp = c[_NO_TIME_ROW]
        a.first_fragments = c[_FIRST_FRAGMENT]
        reasons: dict[str, int] = {}
        ethertypes = np.flatnonzero(self.ethertypes).tolist() if c[_NON_IP] else []
        linktypes = np.flatnonzero(self.linktypes).tolist() if c[_UNSUPPORTED_LINK] else []
        for et in ethertypes:
            key = f"ethertype 0x{et:04x} {_ETHERTYPE_NAMES.get(et, '')}".rstrip()
            if et < 0x600:  # Ethernet II types start at 0x600; below is an 802.3 length
                key = "no ethertype (802.3 length or LLC)"
            reasons[key] = reasons.get(key, 0) + int(self.ethertypes[et])
        a.non_ip = c[_NON_IP]
        for lt in linktypes:
            a.unsupported_link[lt] = int(self.linktypes[lt])
            reasons[f"unsupported link type {lt}"] = int(self.linktypes[lt])
        for code, (bucket, reason) in _REASONS.items():
            if c[code]:
                setattr(a, bucket, getattr(a, bucket) + c[code])
                reasons[reason] = c[code]
        if cut:
            reasons["last record cut by the end of the file"] = cut
        a.reasons = reasons
        a.blocks = {
            _BLOCK_NAMES.get(i, f"type {i}"): int(n)
            for i, n in enumerate(self.blocks.tolist())
            if n
        }
        return a


class _Walk:
    """One walk over a file: its format, byte order and (pcapng) interfaces, carried from one
    buffer to the next."""

    def __init__(self, path: str, head: bytes) -> None:
        self.path = path
        self.offset = 0  # file offset of the current buffer's first byte
        self.state = np.zeros(8, dtype=np.int64)
        self.ifaces = np.zeros((MAX_INTERFACES, 4), dtype=np.int64)
        self.key = np.zeros(IDENT_HEADER + IDENT_PAYLOAD, dtype=np.uint8)
        magic = int.from_bytes(head[:4], "little") if len(head) >= 4 else None
        if magic == PCAPNG_MAGIC:
            self.format, self.start = "pcapng", 0
        elif magic in PCAP_MAGIC:
            if len(head) < 24:
                raise InputError("pcap file header cut short", path=path)
            big, unit = PCAP_MAGIC[magic]
            order: Literal["big", "little"] = "big" if big else "little"
            snaplen = int.from_bytes(head[16:20], order)
            linktype = int.from_bytes(head[20:24], order) & 0xFFFF  # upper bits: FCS length
            self.state[_BIG], self.state[_UNIT], self.state[_LINK] = big, unit, linktype
            self.state[_MAXCAP] = max(snaplen, MAX_SNAPLEN)
            self.format, self.start = "pcap", 24
        elif magic == 0xA1B2CD34:
            raise InputError("modified (Kuznetzov) pcap is not supported", path=path)
        else:
            raise InputError(
                f"not a pcap or pcapng file (starts with {head[:4].hex() or 'nothing'})", path=path
            )

    def count(self, buf: np.ndarray) -> int:
        """The whole packet records in ``buf``, up to the first cut or bad one."""
        if self.format == "pcap":
            return _count_pcap(buf, self.start, self.state[_BIG] != 0, self.state[_MAXCAP])
        return _count_pcapng(buf, self.start)

    def walk(
        self,
        buf: np.ndarray,
        pos: int,
        table: PacketTable,
        spans: np.ndarray,
        row: int,
        max_records: int,
        counters: _Counters,
    ) -> tuple[int, int, int, int, InputError | None]:
        """Decode up to ``max_records`` records of ``buf`` from ``pos`` into ``table`` (and the
        payload spans into ``spans`` unless it has no rows) from ``row`` on; returns (how it
        stopped, position, next row, records walked, the error naming the first bad record or
        None). The records before a bad one are decoded: a caller may deliver them before it
        raises the error."""
        cols = tuple(table.columns().values())
        args = (self.state, cols, spans, counters.arrays, self.key)
        if self.format == "pcap":
            status, end, rows, records, info = _walk_pcap(buf, pos, row, max_records, *args)
        else:
            status, end, rows, records, info = _walk_pcapng(
                buf, pos, row, max_records, self.ifaces, *args
            )
        if status in (_END, _LIMIT):
            return status, end, rows, records, None
        message = _ERRORS[status].format(info=info)
        failure = InputError(
            f"{message} at byte {self.offset + end}: not a valid {self.format} file from here",
            path=self.path,
            record=int(self.state[_NEXT_RECORD]),
        )
        return status, end, rows, records, failure

    def check_decoded(self, accounting: PacketAccounting) -> None:
        """Raise when no packet decoded because the link types are all unsupported."""
        if accounting.ip_packets or not accounting.unsupported_link:
            return
        kinds = ", ".join(f"{k} ({n} records)" for k, n in accounting.unsupported_link.items())
        raise InputError(
            f"no packet decoded: unsupported link type {kinds}; supported: "
            + ", ".join(f"{k} {v}" for k, v in LINKTYPE_NAMES.items()),
            path=self.path,
        )


# The compiled walk. Reads of file-order fields take ``big`` (the file's byte order); packet
# headers are always big-endian (network order).


@njit(cache=True)
def _u16(b, i, big):
    if big:
        return (np.int64(b[i]) << 8) | np.int64(b[i + 1])
    return np.int64(b[i]) | (np.int64(b[i + 1]) << 8)


@njit(cache=True)
def _u32(b, i, big):
    if big:
        return (_u16(b, i, True) << 16) | _u16(b, i + 2, True)
    return _u16(b, i, False) | (_u16(b, i + 2, False) << 16)


@njit(cache=True)
def _i64(b, i, big):
    if big:
        return (_u32(b, i, True) << 32) | _u32(b, i + 4, True)
    return _u32(b, i, False) | (_u32(b, i + 4, False) << 32)


@njit(cache=True)
def _be16(b, i):
    return (np.int64(b[i]) << 8) | np.int64(b[i + 1])


@njit(cache=True)
def _be32(b, i):
    return (_be16(b, i) << 16) | _be16(b, i + 2)


@njit(cache=True)
def _be64(b, i):
    return (np.uint64(_be32(b, i)) << np.uint64(32)) | np.uint64(_be32(b, i + 4))


@njit(cache=True)
def _count_pcap(buf, pos, big, maxcap):
    n = 0
    while pos + 16 <= buf.size:
        incl = _u32(buf, pos + 8, big)
        if incl > maxcap or pos + 16 + incl > buf.size:
            break
        pos += 16 + incl
        n += 1
    return n


@njit(cache=True)
def _count_pcapng(buf, pos):
    n = 0
    big = False
    while pos + 12 <= buf.size:
        if _u32(buf, pos, False) == _SHB:
            bom = _u32(buf, pos + 8, False)
            big = bom == 0x4D3C2B1A
        btype = _u32(buf, pos, big)
        blen = _u32(buf, pos + 4, big)
        if blen < 12 or blen % 4 or pos + blen > buf.size:
            break
        n += btype in (_EPB, _SPB, _OPB)
        pos += blen
    return n


@njit(cache=True)
def _walk_pcap(buf, pos, row, max_records, state, cols, spans, tallies, key):
    counts, ethertypes, linktypes, _ = tallies
    out = np.zeros(len(cols) + 2, dtype=np.int64)
    big = state[_BIG] != 0
    unit = state[_UNIT]
    linktype = state[_LINK]
    maxcap = state[_MAXCAP]
    records = 0
    while records < max_records:
        if pos + 16 > buf.size:
            return _END, pos, row, records, 0
        incl = _u32(buf, pos + 8, big)
        if incl > maxcap:
            return _ERR_RECORD_LEN, pos, row, records, incl
        if pos + 16 + incl > buf.size:
            return _END, pos, row, records, 0
        wire = _u32(buf, pos + 12, big)
        r = _decode(buf, pos + 16, incl, wire, linktype, out, counts, ethertypes, linktypes, key)
        counts[r] += 1
        if r == _IP:
            out[_TIME] = _u32(buf, pos, big) * _SEC + _u32(buf, pos + 4, big) * unit
            out[_RECORD] = state[_NEXT_RECORD]
            out[_IFACE] = 0
            _store(cols, row, out)
            if spans.shape[0]:
                _keep_span(spans, row, out)
            row += 1
        pos += 16 + incl
        records += 1
        state[_NEXT_RECORD] += 1
    return _LIMIT, pos, row, records, 0


_MAX_SEC = (2**63 - 1) // _SEC
"""The last whole second int64 nanoseconds hold (in 2262)."""


@njit(cache=True)
def _ts_ns(ts, resol, offset):
    """A pcapng timestamp (64 unsigned bits) in units of ``if_tsresol`` = ``resol``, moved by
    ``if_tsoffset`` = ``offset`` seconds, as ns since the epoch; -1 when that is before the
    epoch or past int64 nanoseconds (computed so that nothing wraps on the way)."""
    u = np.uint64(ts)
    if offset < -_MAX_SEC or offset > _MAX_SEC:
        return -1
    if resol & 0x80:
        r = np.uint64(resol & 0x7F)
        if (u >> r) > np.uint64(_MAX_SEC):
            return -1
        sec = np.int64(u >> r)
        frac = u & ((np.uint64(1) << r) - np.uint64(1))
        if r > 32:  # keep frac * 10^9 within 64 bits
            frac >>= r - np.uint64(32)
            r = np.uint64(32)
        ns = sec * _SEC + np.int64((frac * np.uint64(_SEC)) >> r)
    elif resol <= 9:
        if u > np.uint64((2**63 - 1) // _POW10[9 - resol]):
            return -1
        ns = np.int64(u) * _POW10[9 - resol]
    else:
        ns = np.int64(u // np.uint64(_POW10[resol - 9]))
    shift = offset * _SEC
    if (shift > 0 and ns > 2**63 - 1 - shift) or ns + shift < 0:
        return -1
    return ns + shift


@njit(cache=True)
def _interface(buf, body, bend, big, state, ifaces):
    """Record an Interface Description Block; returns an error code or 0."""
    k = state[_N_IFS]
    if k == ifaces.shape[0]:
        return _ERR_INTERFACES, k
    if bend - body < 8:
        return _ERR_BLOCK_LEN, bend - body + 12
    ifaces[k, _IF_LINK] = _u16(buf, body, big)
    ifaces[k, _IF_SNAP] = _u32(buf, body + 4, big)
    ifaces[k, _IF_RESOL] = 6
    ifaces[k, _IF_OFFSET] = 0
    i = body + 8
    while i + 4 <= bend:
        code = _u16(buf, i, big)
        length = _u16(buf, i + 2, big)
        if code == 0 or i + 4 + length > bend:
            break
        if code == 9 and length >= 1:
            ifaces[k, _IF_RESOL] = buf[i + 4]
        elif code == 14 and length == 8:
            ifaces[k, _IF_OFFSET] = _i64(buf, i + 4, big)
        i += 4 + ((length + 3) & ~3)
    resol = ifaces[k, _IF_RESOL]
    if (resol & 0x80 and resol & 0x7F > 62) or (not resol & 0x80 and resol > 18):
        return _ERR_TSRESOL, resol
    state[_N_IFS] += 1
    state[_SECTION_IFS] += 1
    return 0, 0


@njit(cache=True)
def _walk_pcapng(buf, pos, row, max_records, ifaces, state, cols, spans, tallies, key):  # noqa: C901, PLR0912, PLR0915
    counts, ethertypes, linktypes, blocks = tallies
    out = np.zeros(len(cols) + 2, dtype=np.int64)
    records = 0
    while records < max_records:
        if pos + 12 > buf.size:
            return _END, pos, row, records, 0
        big = state[_BIG] != 0
        shb = _u32(buf, pos, False) == _SHB
        if shb:
            bom = _u32(buf, pos + 8, False)
            if bom != 0x1A2B3C4D and bom != 0x4D3C2B1A:
                return _ERR_BYTE_ORDER, pos, row, records, 0
            big = bom == 0x4D3C2B1A
        btype = _u32(buf, pos, big)
        blen = _u32(buf, pos + 4, big)
        if blen < 12 or blen % 4 or blen > MAX_BLOCK:
            return _ERR_BLOCK_LEN, pos, row, records, blen
        if pos + blen > buf.size:
            return _END, pos, row, records, 0
        if _u32(buf, pos + blen - 4, big) != blen:
            return _ERR_TRAILER, pos, row, records, 0
        body = pos + 8
        bend = pos + blen - 4
        if shb:
            state[_BIG] = big
            state[_SECTION_BASE] = state[_N_IFS]
            state[_SECTION_IFS] = 0
            blocks[0] += 1
        elif btype == _IDB:
            err, info = _interface(buf, body, bend, big, state, ifaces)
            if err:
                return err, pos, row, records, info
            blocks[1] += 1
        elif btype in (_EPB, _OPB, _SPB):
            ts = 0
            if btype == _SPB:
                ifid, t, data = 0, NO_TIME, body + 4
                if bend - body < 4:
                    return _ERR_BLOCK_LEN, pos, row, records, blen
                wire = _u32(buf, body, big)
                cap = min(wire, bend - data)
            else:
                if bend - body < 20:
                    return _ERR_BLOCK_LEN, pos, row, records, blen
                ifid = _u32(buf, body, big) if btype == _EPB else _u16(buf, body, big)
                ts = (_u32(buf, body + 4, big) << 32) | _u32(buf, body + 8, big)
                cap = _u32(buf, body + 12, big)
                wire = _u32(buf, body + 16, big)
                data = body + 20
                if data + cap > bend:
                    return _ERR_PACKET_LEN, pos, row, records, cap
            if ifid >= state[_SECTION_IFS]:
                return _ERR_INTERFACE, pos, row, records, ifid
            k = state[_SECTION_BASE] + ifid
            if btype == _SPB:
                if ifaces[k, _IF_SNAP] > 0:
                    cap = min(cap, ifaces[k, _IF_SNAP])
            else:
                t = _ts_ns(ts, ifaces[k, _IF_RESOL], ifaces[k, _IF_OFFSET])
                if t < 0:
                    return _ERR_TIME, pos, row, records, 0
            link = ifaces[k, _IF_LINK]
            r = _decode(buf, data, cap, wire, link, out, counts, ethertypes, linktypes, key)
            counts[r] += 1
            if r == _IP:
                out[_TIME] = t
                out[_RECORD] = state[_NEXT_RECORD]
                out[_IFACE] = k
                _store(cols, row, out)
                if spans.shape[0]:
                    _keep_span(spans, row, out)
                counts[_NO_TIME_ROW] += btype == _SPB
                row += 1
            records += 1
            state[_NEXT_RECORD] += 1
        elif btype < 16:
            blocks[btype] += 1
        else:
            blocks[16 if btype == 0xBAD or btype == 0x40000BAD else 17] += 1
        pos += blen
    return _LIMIT, pos, row, records, 0


@njit(cache=True, _nrt=False)
def _decode(buf, o, caplen, wire, linktype, out, counts, ethertypes, linktypes, key):
    """Decode the frame of ``caplen`` bytes at ``o`` into ``out`` (a row's fields by column
    index, all but time, record and interface); returns what became of it (``_IP``: a packet).

    Single arrays rather than tuples of them come in, and one scratch row goes out, because
    numba counts references to every array taken out of a tuple on every path through a
    function: with the 25 columns here that cost more than the decoding itself. The helpers each
    decode one layer into ``out`` and return what became of the frame (``_IP``: go on) with
    what the next layer needs; they are inlined, so the loop stays one compiled function.

    Compiled without numba's reference counting (``_nrt=False``): nothing here allocates and
    every array is the caller's for the whole call, so counting the references that each
    inlined helper takes to them would only slow the walk down.
    """
    end = o + caplen
    r, ethertype, ip = _link_layer(buf, o, caplen, linktype)
    if r == _UNSUPPORTED_LINK:
        linktypes[linktype] += 1
    if r == _IP:
        r, ethertype, ip = _vlan_tags(buf, ethertype, ip, end)
    if r != _IP:
        return r
    if ethertype != 0x0800 and ethertype != 0x86DD:
        ethertypes[ethertype] += 1
        return _NON_IP
    on_wire = wire - (ip - o)  # the IP length the link layer saw, for lengths left as 0 (TSO)
    if ethertype == 0x0800:
        r, proto, th, ip_end, known, first_fragment = _ipv4(buf, ip, end, on_wire, out)
    else:
        r, proto, th, ip_end, known, first_fragment = _ipv6(buf, ip, end, on_wire, out)
    if r != _IP:
        return r
    cap_end = min(end, ip_end)
    r, header = _transport(buf, proto, th, ip_end, cap_end, known, out)
    if r != _IP:
        return r
    payload = -1
    start = held = 0
    if header >= 0:
        payload = ip_end - th - header
        if payload < 0:
            return _BAD_TRANSPORT_LENGTH
        start = th + header
        held = max(0, min(cap_end - start, payload))
    truncated = end < ip_end
    counts[_CUT_ROW] += truncated
    counts[_FIRST_FRAGMENT] += first_fragment
    out[_WIRE] = wire
    out[_CAP] = caplen
    out[_PAYLEN] = payload
    out[_TRUNC] = truncated
    out[_IDENT] = _ident(buf, start, held, out, key)
    out[_PAYLOAD_AT] = start
    out[_PAYLOAD_HELD] = held
    return _IP


@njit(cache=True, inline="always")
def _link_layer(buf, o, caplen, linktype):
    """The link-layer header of a frame: (what became of it, its ethertype, where the network
    header starts)."""
    if linktype == 1:  # ETHERNET: dst, src, ethertype
        return _fixed_link(buf, o, caplen, 14, 12)
    if linktype == 113:  # LINUX_SLL: packet type, ARPHRD, address length, address, protocol
        return _fixed_link(buf, o, caplen, 16, 14)
    if linktype == 276:  # LINUX_SLL2: protocol first, 20 bytes in all
        return _fixed_link(buf, o, caplen, 20, 0)
    if linktype == 101 or linktype == 228 or linktype == 229:  # RAW, IPV4, IPV6
        return _raw_ip(buf, o, caplen, linktype)
    if linktype == 0 or linktype == 108:  # NULL (host byte order), LOOP (network order)
        return _loopback(buf, o, caplen, linktype)
    return _UNSUPPORTED_LINK, 0, o


@njit(cache=True, inline="always")
def _fixed_link(buf, o, caplen, size, at):
    """A link-layer header of ``size`` bytes with the ethertype at offset ``at``."""
    if caplen < size:
        return _LINK_CUT, 0, o
    return _IP, _be16(buf, o + at), o + size


@njit(cache=True, inline="always")
def _raw_ip(buf, o, caplen, linktype):
    """A frame that is an IP packet (RAW: either version; IPV4, IPV6: that version only); its
    version stands for the ethertype."""
    if caplen < 1:
        return _IP_CUT, 0, o
    version = buf[o] >> 4
    if (
        (version != 4 and version != 6)
        or (linktype == 228 and version != 4)
        or (linktype == 229 and version != 6)
    ):
        return _BAD_VERSION, 0, o
    return _IP, 0x0800 if version == 4 else 0x86DD, o


@njit(cache=True, inline="always")
def _loopback(buf, o, caplen, linktype):
    """A NULL or LOOP frame: a 4-byte address family (NULL: in the capturing host's byte order)
    stands for the ethertype."""
    if caplen < 4:
        return _LINK_CUT, 0, o
    family = _be32(buf, o)
    if linktype == 0 and family > 0xFFFF:
        family = _u32(buf, o, False)
    if family == 2:
        return _IP, 0x0800, o + 4
    if family == 24 or family == 28 or family == 30:  # AF_INET6 on the BSDs and macOS
        return _IP, 0x86DD, o + 4
    return _NOT_IP_FAMILY, 0, o


@njit(cache=True, inline="always")
def _vlan_tags(buf, ethertype, ip, end):
    """Skip 802.1Q, 802.1ad and QinQ tags: (what became of the frame, the ethertype after
    them, where the network header starts)."""
    while ethertype == 0x8100 or ethertype == 0x88A8 or ethertype == 0x9100:
        if ip + 4 > end:
            return _LINK_CUT, ethertype, ip
        ethertype = _be16(buf, ip + 2)
        ip += 4
    return _IP, ethertype, ip


@njit(cache=True, inline="always")
def _ipv4(buf, ip, end, on_wire, out):
    """The IPv4 header (RFC 791, options skipped) at ``ip`` into ``out``: (what became of the
    packet, its protocol, where the transport header starts, where the packet ends, True: the
    transport header is reached, whether it is a first fragment)."""
    if end - ip < 20:
        return _IP_CUT, 0, 0, 0, False, False
    if buf[ip] >> 4 != 4:
        return _BAD_VERSION, 0, 0, 0, False, False
    ihl = (buf[ip] & 15) * 4
    if ihl < 20:
        return _BAD_IHL, 0, 0, 0, False, False
    total = _be16(buf, ip + 2)
    if total == 0:
        total = on_wire
    if total < ihl:
        return _BAD_IP_LENGTH, 0, 0, 0, False, False
    frag = _be16(buf, ip + 6)
    if frag & 0x1FFF:
        return _FRAG4, 0, 0, 0, False, False
    out[_VER] = 4
    out[_IPID] = _be16(buf, ip + 4)
    out[_TTL] = buf[ip + 8]
    out[_SRC_HI] = 0
    out[_DST_HI] = 0
    out[_SRC_LO] = V4_MAPPED | _be32(buf, ip + 12)
    out[_DST_LO] = V4_MAPPED | _be32(buf, ip + 16)
    return _IP, np.int64(buf[ip + 9]), ip + ihl, ip + total, True, (frag & 0x2000) != 0


@njit(cache=True, inline="always")
def _ipv6(buf, ip, end, on_wire, out):
    """The IPv6 header (RFC 8200) at ``ip`` and its extension headers into ``out``; returns what
    :func:`_ipv4` does."""
    if end - ip < 40:
        return _IP_CUT, 0, 0, 0, False, False
    if buf[ip] >> 4 != 6:
        return _BAD_VERSION, 0, 0, 0, False, False
    length = _be16(buf, ip + 4)
    ip_end = ip + max(40 + length if length else on_wire, 40)  # 0: jumbogram or TSO
    out[_VER] = 6
    out[_IPID] = 0
    out[_TTL] = buf[ip + 7]
    out[_SRC_HI] = _be64(buf, ip + 8)
    out[_SRC_LO] = _be64(buf, ip + 16)
    out[_DST_HI] = _be64(buf, ip + 24)
    out[_DST_LO] = _be64(buf, ip + 32)
    r, proto, th, known, first_fragment = _extension_headers(
        buf, np.int64(buf[ip + 6]), ip + 40, ip_end, end
    )
    return r, proto, th, ip_end, known, first_fragment


@njit(cache=True, inline="always")
def _extension_headers(buf, proto, th, ip_end, end):
    """Walk IPv6 hop-by-hop, routing, fragment, destination options and authentication headers
    from ``th``: (what became of the packet, the protocol after them, where it starts, False
    when the capture ends within them, whether the packet is a first fragment)."""
    first_fragment = False
    while proto == 0 or proto == 43 or proto == 44 or proto == 60 or proto == 51:
        if th + 8 > ip_end:
            return _BAD_IP_LENGTH, proto, th, False, first_fragment
        if th + 8 > end:
            return _IP, proto, th, False, first_fragment
        if proto == 44:
            frag = _be16(buf, th + 2)
            if frag >> 3:
                return _FRAG6, proto, th, False, first_fragment
            first_fragment = (frag & 1) != 0
            size = 8
        elif proto == 51:
            size = (np.int64(buf[th + 1]) + 2) * 4
        else:
            size = (np.int64(buf[th + 1]) + 1) * 8
        proto = np.int64(buf[th])
        th += size
    if th > ip_end:
        return _BAD_IP_LENGTH, proto, th, False, first_fragment
    return _IP, proto, th, True, first_fragment


@njit(cache=True, inline="always")
def _transport(buf, proto, th, ip_end, cap_end, known, out):
    """The transport header at ``th`` into ``out`` (zeros for what is not there): (what became
    of the packet, the header's length: -1 while unknown, 0 for a protocol other than TCP and
    UDP)."""
    out[_PROTO] = proto
    out[_SPORT] = out[_DPORT] = out[_FLAGS] = out[_WIN] = 0
    out[_SEQ] = out[_ACK] = out[_TSVAL] = out[_TSECR] = out[_HASTS] = 0
    if not known:
        return _IP, -1
    if proto == 6:
        return _tcp(buf, th, ip_end, cap_end, out)
    if proto == 17:
        if cap_end - th >= 4:
            out[_SPORT], out[_DPORT] = _be16(buf, th), _be16(buf, th + 2)
        return _IP, 8
    return _IP, 0


@njit(cache=True, inline="always")
def _tcp(buf, th, ip_end, cap_end, out):
    """The TCP header (RFC 9293 §3.1) at ``th``, as far as the capture holds it; returns what
    :func:`_transport` does."""
    if ip_end - th < 20:
        return _BAD_TRANSPORT_LENGTH, -1
    have = cap_end - th
    header = -1
    if have >= 4:
        out[_SPORT], out[_DPORT] = _be16(buf, th), _be16(buf, th + 2)
    if have >= 8:
        out[_SEQ] = _be32(buf, th + 4)
    if have >= 12:
        out[_ACK] = _be32(buf, th + 8)
    if have >= 14:
        header = (buf[th + 12] >> 4) * 4
        if header < 20:
            return _BAD_TCP_OFFSET, -1
        out[_FLAGS] = ((np.int64(buf[th + 12]) & 1) << 8) | buf[th + 13]
    if have >= 16:
        out[_WIN] = _be16(buf, th + 14)
    _tcp_timestamp(buf, th + 20, min(th + header, cap_end), out)
    return _IP, header


@njit(cache=True, inline="always")
def _tcp_timestamp(buf, i, opt_end, out):
    """The timestamp option (RFC 7323) among the TCP options from ``i`` to ``opt_end`` into
    ``out``; options are end, no-op, or kind-length-value (RFC 9293 §3.1)."""
    while i < opt_end:
        kind = buf[i]
        if kind == 0:
            break
        if kind == 1:
            i += 1
            continue
        if i + 2 > opt_end or buf[i + 1] < 2 or i + buf[i + 1] > opt_end:
            break
        if kind == 8 and buf[i + 1] == 10:
            out[_TSVAL], out[_TSECR], out[_HASTS] = _be32(buf, i + 2), _be32(buf, i + 6), 1
        i += buf[i + 1]


@njit(cache=True, inline="always")
def _ident(buf, start, held, out, key):
    """The row's ident (:func:`~tacit.model.packets.packet_ident`): the xxHash64 of its header
    fields and of the first of the ``held`` payload bytes at ``start``."""
    src_hi, src_lo = np.uint64(out[_SRC_HI]), np.uint64(out[_SRC_LO])
    dst_hi, dst_lo = np.uint64(out[_DST_HI]), np.uint64(out[_DST_LO])
    ident_key(
        key,
        out[_VER],
        out[_PROTO],
        src_hi,
        src_lo,
        dst_hi,
        dst_lo,
        out[_SPORT],
        out[_DPORT],
        out[_IPID],
        out[_SEQ],
        out[_ACK],
    )
    n = IDENT_HEADER
    for k in range(min(IDENT_PAYLOAD, held)):
        key[n] = buf[start + k]
        n += 1
    return xxh64_array(key, n, np.uint64(0))


@njit(cache=True)
def _keep_span(spans, row, out):
    """Keep the payload span of the scratch row ``out`` as ``row`` of ``spans``."""
    spans[row, 0] = out[_PAYLOAD_AT]
    spans[row, 1] = out[_PAYLOAD_HELD]


@njit(cache=True)
def _store(cols, row, out):
    """Copy the scratch row ``out`` into ``row`` of the columns, casting to their types."""
    cols[_TIME][row] = out[_TIME]
    cols[_RECORD][row] = out[_RECORD]
    cols[_IFACE][row] = out[_IFACE]
    cols[_WIRE][row] = out[_WIRE]
    cols[_CAP][row] = out[_CAP]
    cols[_VER][row] = out[_VER]
    cols[_SRC_HI][row] = out[_SRC_HI]
    cols[_SRC_LO][row] = out[_SRC_LO]
    cols[_DST_HI][row] = out[_DST_HI]
    cols[_DST_LO][row] = out[_DST_LO]
    cols[_PROTO][row] = out[_PROTO]
    cols[_SPORT][row] = out[_SPORT]
    cols[_DPORT][row] = out[_DPORT]
    cols[_IPID][row] = out[_IPID]
    cols[_TTL][row] = out[_TTL]
    cols[_FLAGS][row] = out[_FLAGS]
    cols[_SEQ][row] = out[_SEQ]
    cols[_ACK][row] = out[_ACK]
    cols[_WIN][row] = out[_WIN]
    cols[_TSVAL][row] = out[_TSVAL]
    cols[_TSECR][row] = out[_TSECR]
    cols[_HASTS][row] = out[_HASTS]
    cols[_PAYLEN][row] = out[_PAYLEN]
    cols[_TRUNC][row] = out[_TRUNC]
    cols[_IDENT][row] = out[_IDENT]
