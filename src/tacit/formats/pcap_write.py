"""Writing pcap and pcapng files, and building the frames that go in them.

Tests write captures with every link type and option the reader supports, and packet simulators
write what they simulate, so that both go through the same reader as real captures. The file
formats follow the pcap draft (draft-ietf-opsawg-pcap) and the pcapng draft
(draft-ietf-opsawg-pcapng); link types are numbered as in the LINKTYPE registry
(https://www.tcpdump.org/linktypes.html). Frames are built with :mod:`struct`, one at a time:
fast enough for millions of packets, and simpler than a vectorised builder.
"""

from __future__ import annotations

import ipaddress
import struct
import sys
from array import array
from collections.abc import Iterable, Sequence
from pathlib import Path

from tacit.model.packets import ACK, TCP, UDP, PacketTable, format_address
from tacit.outputs import atomic_output

NULL = 0
ETHERNET = 1
RAW = 101
LOOP = 108
LINUX_SLL = 113
IPV4 = 228
IPV6 = 229
LINUX_SLL2 = 276

ETHERTYPE_IPV4 = 0x0800
ETHERTYPE_IPV6 = 0x86DD
ETHERTYPE_ARP = 0x0806
ETHERTYPE_VLAN = 0x8100
ETHERTYPE_QINQ = 0x88A8

AF_INET = 2
AF_INET6_BSD = (24, 28, 30)
"""AF_INET6 on NetBSD/OpenBSD, FreeBSD and macOS: a loopback header may hold any of them."""

HOP_BY_HOP, ROUTING, FRAGMENT, AUTH, DEST_OPTS = 0, 43, 44, 51, 60
"""IPv6 extension header types (the Next Header values that announce them)."""

PCAPNG_SHB, PCAPNG_IDB, PCAPNG_OPB, PCAPNG_SPB, PCAPNG_EPB = 0x0A0D0D0A, 1, 2, 3, 6

_MAC_DST = bytes.fromhex("020000000002")
_MAC_SRC = bytes.fromhex("020000000001")


def checksum(data: bytes) -> int:
    """The Internet checksum (RFC 1071) of ``data``."""
    if len(data) % 2:
        data += b"\0"
    words = array("H", data)
    if sys.byteorder == "little":
        words.byteswap()
    total = sum(words)
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def tcp_options(
    *,
    ts: tuple[int, int] | None = None,
    mss: int | None = None,
    wscale: int | None = None,
    sack_ok: bool = False,
) -> bytes:
    """TCP options (RFC 9293 §3.2, RFC 7323), NOP-padded to a multiple of four bytes."""
    out = b""
    if mss is not None:
        out += struct.pack("!BBH", 2, 4, mss)
    if wscale is not None:
        out += struct.pack("!BBB", 3, 3, wscale)
    if sack_ok:
        out += b"\x04\x02"
    if ts is not None:
        out += b"\x01\x01" + struct.pack("!BBII", 8, 10, *ts)
    return out + b"\x01" * (-len(out) % 4)


def ipv6_fragment(offset: int = 0, more: bool = False, ident: int = 0) -> tuple[int, bytes]:
    """An IPv6 fragment extension header for :func:`ip_packet` (``offset`` in 8-byte units)."""
    return FRAGMENT, struct.pack("!HI", offset << 3 | more, ident)


def ip_packet(
    src: str,
    dst: str,
    *,
    proto: int = TCP,
    sport: int = 0,
    dport: int = 0,
    payload: bytes = b"",
    ttl: int = 64,
    ip_id: int = 0,
    seq: int = 0,
    ack: int = 0,
    flags: int = ACK,
    window: int = 65535,
    options: bytes = b"",
    ip_options: bytes = b"",
    ext_headers: Sequence[tuple[int, bytes]] = (),
    frag_offset: int = 0,
    more_fragments: bool = False,
) -> bytes:
    """One IPv4 or IPv6 packet (the version follows from ``src``) with checksums filled in.

    ``proto`` TCP or UDP gets its header (TCP ``options``, e.g. from :func:`tcp_options`); any
    other protocol carries ``payload`` bare. IPv4 ``ip_options`` are zero-padded to a multiple of
    four bytes. ``ext_headers`` are IPv6 extension headers as ``(type, body)``, body being what
    follows the Next Header and length bytes (padded here); see :func:`ipv6_fragment`. A
    non-first fragment (``frag_offset`` > 0, or an IPv6 fragment header with an offset) carries
    ``payload`` without a transport header.
    """
    s, d = ipaddress.ip_address(src), ipaddress.ip_address(dst)
    if s.version != d.version:
        raise ValueError(f"{src} and {dst} are of different IP versions")
    first = frag_offset == 0 and not any(
        k == FRAGMENT and struct.unpack("!H", b[:2])[0] >> 3 for k, b in ext_headers
    )
    if not first:
        segment = payload
    elif proto == TCP:
        offset_flags = ((20 + len(options)) // 4) << 12 | flags
        header = struct.pack("!HHIIHHHH", sport, dport, seq, ack, offset_flags, window, 0, 0)
        segment = header + options + payload
    elif proto == UDP:
        segment = struct.pack("!HHHH", sport, dport, 8 + len(payload), 0) + payload
    else:
        segment = payload
    if first and proto in (TCP, UDP):
        pseudo = s.packed + d.packed + struct.pack("!IxxxB", len(segment), proto)
        at = 16 if proto == TCP else 6
        csum = checksum(pseudo + segment) or (0xFFFF if proto == UDP else 0)
        segment = segment[:at] + struct.pack("!H", csum) + segment[at + 2 :]
    if s.version == 4:
        opts = ip_options + b"\0" * (-len(ip_options) % 4)
        frag = frag_offset | (0x2000 if more_fragments else 0)
        head = struct.pack(
            "!BBHHHBBH4s4s",
            0x40 | (5 + len(opts) // 4),
            0,
            20 + len(opts) + len(segment),
            ip_id,
            frag,
            ttl,
            proto,
            0,
            s.packed,
            d.packed,
        )
        head += opts
        head = head[:10] + struct.pack("!H", checksum(head)) + head[12:]
        return head + segment
    exts = b""
    kinds = [k for k, _ in ext_headers] + [proto]
    for (kind, body), nxt in zip(ext_headers, kinds[1:], strict=True):
        exts += _ipv6_extension(kind, body, nxt)
    head = struct.pack("!IHBB", 6 << 28, len(exts) + len(segment), kinds[0], ttl)
    return head + s.packed + d.packed + exts + segment


def _ipv6_extension(kind: int, body: bytes, nxt: int) -> bytes:
    if kind == FRAGMENT:
        return bytes([nxt, 0]) + body
    if kind == AUTH:  # length in 4-byte units minus 2 (RFC 4302 §2.2)
        body += b"\0" * (-(2 + len(body)) % 8)
        return bytes([nxt, (2 + len(body)) // 4 - 2]) + body
    body += b"\0" * (-(2 + len(body)) % 8)  # length in 8-byte units minus 1 (RFC 8200 §4.3)
    return bytes([nxt, (2 + len(body)) // 8 - 1]) + body


def link_frame(
    packet: bytes,
    linktype: int = ETHERNET,
    *,
    vlans: Sequence[int] = (),
    ethertype: int | None = None,
    family: int | None = None,
) -> bytes:
    """``packet`` behind the link-layer header of ``linktype``.

    ``ethertype`` defaults to the packet's IP version (set it to wrap ARP and other non-IP
    payloads); ``vlans`` adds 802.1Q tags, outermost first (802.1ad QinQ: the outer tags get TPID
    0x88a8). ``family`` is the address family of a NULL/LOOP header (AF_INET or one of
    :data:`AF_INET6_BSD`; by default AF_INET or 30).
    """
    version = packet[0] >> 4 if packet else 0
    if ethertype is None:
        ethertype = ETHERTYPE_IPV6 if version == 6 else ETHERTYPE_IPV4
    if linktype == ETHERNET:
        tags = b"".join(
            struct.pack("!HH", ETHERTYPE_QINQ if i < len(vlans) - 1 else ETHERTYPE_VLAN, vid)
            for i, vid in enumerate(vlans)
        )
        return _MAC_DST + _MAC_SRC + tags + struct.pack("!H", ethertype) + packet
    if linktype == LINUX_SLL:
        return struct.pack("!HHH8sH", 0, 1, 6, _MAC_SRC, ethertype) + packet
    if linktype == LINUX_SLL2:
        return struct.pack("!HHIHBB8s", ethertype, 0, 1, 1, 0, 6, _MAC_SRC) + packet
    if linktype in (NULL, LOOP):
        if family is None:
            family = 30 if version == 6 else AF_INET
        return struct.pack("<I" if linktype == NULL else "!I", family) + packet
    if linktype in (RAW, IPV4, IPV6):
        return packet
    raise ValueError(f"cannot build frames for link type {linktype}")


def build_frame(
    src: str, dst: str, *, linktype: int = ETHERNET, vlans: Sequence[int] = (), **fields
) -> bytes:
    """An IP packet (:func:`ip_packet` ``fields``) behind the link header of ``linktype``."""
    return link_frame(ip_packet(src, dst, **fields), linktype, vlans=vlans)


def write_pcap(
    path: str | Path,
    frames: Iterable[bytes],
    times_ns: Iterable[int],
    linktype: int = ETHERNET,
    nanosecond: bool = True,
    snaplen: int = 65535,
    *,
    big_endian: bool = False,
) -> int:
    """Write a classic pcap file (gzip when the name ends in ``.gz``); frames longer than
    ``snaplen`` are cut to it, their original length kept. Returns the number of records."""
    e = ">" if big_endian else "<"
    magic = 0xA1B23C4D if nanosecond else 0xA1B2C3D4
    record = struct.Struct(e + "IIII")
    unit = 1 if nanosecond else 1000
    n = 0
    with atomic_output(path) as f:
        f.write(struct.pack(e + "IHHiIII", magic, 2, 4, 0, 0, snaplen, linktype))
        for frame, t in zip(frames, times_ns, strict=True):
            sec, frac = divmod(int(t), 1_000_000_000)
            cut = frame[:snaplen]
            f.write(record.pack(sec, frac // unit, len(cut), len(frame)))
            f.write(cut)
            n += 1
    return n


def write_packets(path: str | Path, packets: PacketTable, snaplen: int = 65535) -> int:
    """The rows of ``packets`` (a simulator's, say) as a pcap of Ethernet frames: addresses,
    ports, TCP sequence state, flags and IP ids as in the table, payloads of zero bytes of each
    row's ``payload_len``. Returns the number of records."""
    names: dict[tuple[int, int], str] = {}

    def name(hi: int, lo: int) -> str:
        if (hi, lo) not in names:
            names[hi, lo] = format_address(hi, lo)
        return names[hi, lo]

    c = {k: v.tolist() for k, v in packets.columns().items()}
    frames = (
        build_frame(
            name(c["src_hi"][i], c["src_lo"][i]),
            name(c["dst_hi"][i], c["dst_lo"][i]),
            proto=c["proto"][i],
            sport=c["sport"][i],
            dport=c["dport"][i],
            seq=c["seq"][i],
            ack=c["ack"][i],
            flags=c["tcp_flags"][i],
            ip_id=c["ip_id"][i],
            payload=bytes(c["payload_len"][i]),
        )
        for i in range(len(packets))
    )
    return write_pcap(path, frames, c["time"], snaplen=snaplen)


def write_pcapng(
    path: str | Path,
    frames: Iterable[bytes],
    times_ns: Iterable[int],
    linktype: int = ETHERNET,
    *,
    tsresol: int = 9,
    tsoffset: int = 0,
    snaplen: int = 65535,
    big_endian: bool = False,
) -> int:
    """Write a pcapng file of one section with one interface and one Enhanced Packet Block per
    frame (gzip when the name ends in ``.gz``). ``tsresol`` is the raw ``if_tsresol`` byte
    (9: nanoseconds; 0x80 | n: 2^-n s), ``tsoffset`` the ``if_tsoffset`` seconds."""
    e = ">" if big_endian else "<"
    n = 0
    with atomic_output(path) as f:
        f.write(pcapng_section(e))
        f.write(pcapng_interface(linktype, snaplen, tsresol=tsresol, tsoffset=tsoffset, e=e))
        for frame, t in zip(frames, times_ns, strict=True):
            units = pcapng_units(int(t), tsresol, tsoffset)
            f.write(pcapng_packet(frame[:snaplen], units, wire_len=len(frame), e=e))
            n += 1
    return n


def pcapng_block(block_type: int, body: bytes, e: str = "<") -> bytes:
    """One pcapng block: type, total length, ``body`` zero-padded to 32 bits, total length."""
    body += b"\0" * (-len(body) % 4)
    total = struct.pack(e + "I", 12 + len(body))
    return struct.pack(e + "I", block_type) + total + body + total


def pcapng_option(code: int, value: bytes, e: str = "<") -> bytes:
    """One option (code, length, value padded to 32 bits)."""
    return struct.pack(e + "HH", code, len(value)) + value + b"\0" * (-len(value) % 4)


def pcapng_section(e: str = "<") -> bytes:
    """A Section Header Block (version 1.0, section length unknown) in byte order ``e``."""
    return pcapng_block(PCAPNG_SHB, struct.pack(e + "IHHq", 0x1A2B3C4D, 1, 0, -1), e)


def pcapng_interface(
    linktype: int,
    snaplen: int = 0,
    *,
    tsresol: int | None = 9,
    tsoffset: int = 0,
    e: str = "<",
) -> bytes:
    """An Interface Description Block; ``tsresol`` None leaves the default (microseconds)."""
    opts = b""
    if tsresol is not None:
        opts += pcapng_option(9, bytes([tsresol]), e)
    if tsoffset:
        opts += pcapng_option(14, struct.pack(e + "q", tsoffset), e)
    if opts:
        opts += pcapng_option(0, b"", e)
    return pcapng_block(PCAPNG_IDB, struct.pack(e + "HHI", linktype, 0, snaplen) + opts, e)


def pcapng_packet(
    frame: bytes, units: int, *, interface: int = 0, wire_len: int | None = None, e: str = "<"
) -> bytes:
    """An Enhanced Packet Block; ``units`` is the timestamp in the interface's resolution."""
    wire = len(frame) if wire_len is None else wire_len
    head = struct.pack(e + "IIIII", interface, units >> 32, units & 0xFFFFFFFF, len(frame), wire)
    return pcapng_block(PCAPNG_EPB, head + frame, e)


def pcapng_simple_packet(frame: bytes, wire_len: int | None = None, e: str = "<") -> bytes:
    """A Simple Packet Block (no timestamp, interface 0)."""
    wire = len(frame) if wire_len is None else wire_len
    return pcapng_block(PCAPNG_SPB, struct.pack(e + "I", wire) + frame, e)


def pcapng_units(time_ns: int, tsresol: int = 9, tsoffset: int = 0) -> int:
    """``time_ns`` in the units of ``if_tsresol`` = ``tsresol`` after ``if_tsoffset`` seconds
    (rounded down)."""
    t = time_ns - tsoffset * 1_000_000_000
    if tsresol & 0x80:
        return (t << (tsresol & 0x7F)) // 1_000_000_000
    return t * 10**tsresol // 1_000_000_000
