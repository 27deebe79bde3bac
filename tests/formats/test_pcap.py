"""pcap and pcapng reading: round trips through the writer for every link type, option and
extension header; truncation, garbage, accounting; and real captures checked against dpkt."""

from __future__ import annotations

import gzip
import ipaddress
import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tacit.errors import InputError
from tacit.formats import pcap
from tacit.formats.pcap import iter_packet_chunks, read_packets
from tacit.formats.pcap_write import (
    AUTH,
    DEST_OPTS,
    ETHERNET,
    ETHERTYPE_ARP,
    HOP_BY_HOP,
    IPV4,
    IPV6,
    LINUX_SLL,
    LINUX_SLL2,
    LOOP,
    NULL,
    RAW,
    ROUTING,
    build_frame,
    checksum,
    ip_packet,
    ipv6_fragment,
    link_frame,
    pcapng_block,
    pcapng_interface,
    pcapng_packet,
    pcapng_section,
    pcapng_simple_packet,
    pcapng_units,
    tcp_options,
    write_pcap,
    write_pcapng,
)
from tacit.model.captures import PacketAccounting, PacketRead
from tacit.model.packets import (
    ACK,
    FIN,
    NO_TIME,
    PSH,
    SYN,
    TCP,
    UDP,
    format_address,
    packet_ident,
    parse_address,
)

T0 = 1_714_521_600_123_456_789  # 2024-05-01T00:00:00.123456789Z
V4 = ("10.0.0.1", "10.0.0.2")
V6 = ("2001:db8::1", "2001:db8:ffff::2")
ARP = link_frame(b"\x00\x01\x08\x00\x06\x04\x00\x01" + bytes(20), ethertype=ETHERTYPE_ARP)


def read(path: Path, **kw) -> PacketRead:
    """Read and check the accounting invariants that every read must keep."""
    r = read_packets(path, **kw)
    a = r.accounting
    assert a.unaccounted == 0, a
    assert a.ip_packets == len(r.packets)
    assert sum(a.reasons.values()) == a.records - a.ip_packets, a
    assert a.truncated_packets == int(r.packets.truncated.sum())
    assert np.all(np.diff(r.packets.record) > 0)
    return r


def pcap_file(tmp_path: Path, frames: list[bytes], name: str = "t.pcap", **kw) -> Path:
    path = tmp_path / name
    write_pcap(path, frames, [T0 + 1000 * i for i in range(len(frames))], **kw)
    return path


def row(r: PacketRead, i: int = 0) -> dict:
    return {k: v[i].item() for k, v in r.packets.columns().items()}


def tcp_frames(src: str, dst: str, linktype: int = ETHERNET, n: int = 4) -> list[bytes]:
    return [
        build_frame(
            src,
            dst,
            linktype=linktype,
            sport=40000 + i,
            dport=80,
            seq=1000 * i,
            ack=7 + i,
            flags=ACK | PSH,
            window=500 + i,
            ip_id=i,
            ttl=60,
            payload=b"x" * (10 * i),
            options=tcp_options(ts=(100 + i, 200 + i)),
        )
        for i in range(n)
    ]


def check_tcp_rows(r: PacketRead, src: str, dst: str, n: int = 4) -> None:
    p = r.packets
    assert len(p) == n
    v6 = ":" in src
    for i in range(n):
        assert p.src(i) == (f"[{src}]:{40000 + i}" if v6 else f"{src}:{40000 + i}")
        assert format_address(p.dst_hi[i], p.dst_lo[i]) == dst
        got = row(r, i)
        assert got["time"] == T0 + 1000 * i
        assert got["record"] == i
        assert got["ip_version"] == (6 if v6 else 4)
        assert got["proto"] == TCP and got["dport"] == 80
        assert (got["seq"], got["ack"], got["window"]) == (1000 * i, 7 + i, 500 + i)
        assert got["tcp_flags"] == ACK | PSH
        assert (got["has_ts"], got["ts_val"], got["ts_ecr"]) == (True, 100 + i, 200 + i)
        assert got["payload_len"] == 10 * i and not got["truncated"]
        assert got["ip_id"] == (0 if v6 else i) and got["ttl"] == 60
        assert got["ident"] == packet_ident(
            src,
            dst,
            sport=40000 + i,
            dport=80,
            seq=1000 * i,
            ack=7 + i,
            ip_id=0 if v6 else i,
            payload=b"x" * (10 * i),
        )


LINKS = [ETHERNET, LINUX_SLL, LINUX_SLL2, RAW, NULL, LOOP]


@pytest.mark.parametrize(
    ("linktype", "addrs"),
    [(lt, a) for lt in LINKS for a in (V4, V6)] + [(IPV4, V4), (IPV6, V6)],
)
def test_link_types_round_trip(tmp_path: Path, linktype: int, addrs: tuple[str, str]) -> None:
    path = pcap_file(tmp_path, tcp_frames(*addrs, linktype), linktype=linktype)
    r = read(path)
    assert r.format == "pcap"
    check_tcp_rows(r, *addrs)
    assert r.packets.sources == [str(path)]


@pytest.mark.parametrize("family", [2, 24, 28, 30])
@pytest.mark.parametrize("order", ["<", "!"])
def test_null_loopback_any_family_and_host_order(tmp_path: Path, family: int, order: str) -> None:
    packet = ip_packet(*(V4 if family == 2 else V6), sport=1, dport=2)
    frame = struct.pack(order + "I", family) + packet
    assert read(pcap_file(tmp_path, [frame], linktype=NULL)).packets.sport.tolist() == [1]
    loop = pcap_file(tmp_path, [link_frame(packet, LOOP, family=family)], "l.pcap", linktype=LOOP)
    assert len(read(loop).packets) == 1


def test_null_loopback_other_family_is_not_ip(tmp_path: Path) -> None:
    frame = struct.pack("<I", 7) + ip_packet(*V4)
    a = read(pcap_file(tmp_path, [frame, build_frame(*V4, linktype=NULL)], linktype=NULL))
    assert a.accounting.non_ip == 1
    assert a.accounting.reasons == {"loopback address family not IP": 1}


@pytest.mark.parametrize("vlans", [(), (5,), (100, 200), (1, 2, 3)])
def test_vlan_tags(tmp_path: Path, vlans: tuple[int, ...]) -> None:
    frames = [
        build_frame(*V4, vlans=vlans, sport=9, dport=10),
        link_frame(ARP[14:], vlans=vlans, ethertype=ETHERTYPE_ARP),
    ]
    r = read(pcap_file(tmp_path, frames))
    assert r.packets.sport.tolist() == [9]
    assert r.accounting.non_ip == 1


@pytest.mark.parametrize("big_endian", [False, True])
@pytest.mark.parametrize("nanosecond", [False, True])
def test_pcap_byte_orders_and_resolutions(tmp_path: Path, big_endian: bool, nanosecond: bool):
    path = pcap_file(tmp_path, tcp_frames(*V4), nanosecond=nanosecond, big_endian=big_endian)
    r = read(path)
    expected = [T0 + 1000 * i for i in range(4)]
    if not nanosecond:
        expected = [t // 1000 * 1000 for t in expected]
    assert r.packets.time.tolist() == expected
    assert r.packets.seq.tolist() == [0, 1000, 2000, 3000]


OFFSET = 1_700_000_000  # if_tsoffset: keeps picosecond and 2^-40 s timestamps within 64 bits


@pytest.mark.parametrize(
    ("tsresol", "tsoffset", "seconds"),
    [
        (9, 2**40, 0),  # the offset alone is past 2262: it wrapped to a negative time
        (9, 2**62, 0),  # it wrapped to exactly 0 added
        (9, -(2**40), 1_700_000_000),  # before 1970
        (0, 0, 2**62),  # seconds past 2262: wrapped by the multiplication to ns
        (0x80 | 10, 0, 2**52),  # 2^-10 s units: 2^52 s
    ],
)
def test_pcapng_times_beyond_int64_nanoseconds_are_refused(tmp_path, tsresol, tsoffset, seconds):
    path = tmp_path / "t.pcapng"
    units = seconds * (2 ** (tsresol & 0x7F) if tsresol & 0x80 else 10**tsresol)
    data = pcapng_section() + pcapng_interface(ETHERNET, 65535, tsresol=tsresol, tsoffset=tsoffset)
    path.write_bytes(data + pcapng_packet(tcp_frames(*V4)[0], units))
    with pytest.raises(InputError, match="timestamp before 1970 or past 2262") as e:
        read_packets(path)
    assert e.value.record == 0


@pytest.mark.parametrize("big_endian", [False, True])
@pytest.mark.parametrize(
    ("tsresol", "tsoffset"),
    [(r, 0) for r in (9, 6, 3, 0, 0x80 | 10, 0x80 | 30)]
    + [(r, OFFSET) for r in (9, 6, 12, 0x80 | 30, 0x80 | 40)],
)
def test_pcapng_resolutions(tmp_path: Path, big_endian: bool, tsresol: int, tsoffset: int):
    path = tmp_path / "t.pcapng"
    times = [T0 + 123_457 * i for i in range(4)]
    write_pcapng(
        path, tcp_frames(*V4), times, tsresol=tsresol, tsoffset=tsoffset, big_endian=big_endian
    )
    r = read(path)
    assert r.format == "pcapng"
    for got, t in zip(r.packets.time.tolist(), times, strict=True):
        units = pcapng_units(t, tsresol, tsoffset)
        if tsresol & 0x80:
            exact = units * 10**9 >> (tsresol & 0x7F)
        else:
            exact = units * 10**9 // 10**tsresol
        assert abs(got - exact - tsoffset * 10**9) <= (1 if tsresol & 0x7F > 32 else 0)
        scale = 10**tsresol if tsresol < 0x80 else 2 ** (tsresol & 0x7F)
        assert abs(got - t) <= max(10**9 / scale, 1)  # the resolution, or one nanosecond
    assert r.packets.ack.tolist() == [7, 8, 9, 10]


def obsolete_packet(frame: bytes, units: int, interface: int = 0, e: str = "<") -> bytes:
    head = struct.pack(
        e + "HHIIII", interface, 0, units >> 32, units & 0xFFFFFFFF, len(frame), len(frame)
    )
    return pcapng_block(2, head + frame, e)


def multi_section(e2: str = ">") -> bytes:
    """Two sections: LE with Ethernet (ns) and RAW (µs default) interfaces; then ``e2`` with an
    unsupported interface, a LINUX_SLL one (2^-20 s), and blocks that hold no packet."""
    eth, raw, sll = (tcp_frames(*V4, lt, 1)[0] for lt in (ETHERNET, RAW, LINUX_SLL))
    return b"".join(
        [
            pcapng_section(),
            pcapng_interface(ETHERNET, 0, tsresol=9),
            pcapng_interface(RAW, 0, tsresol=None),
            pcapng_packet(eth, T0),  # record 0, iface 0
            pcapng_packet(raw, T0 // 1000, interface=1),  # record 1, iface 1
            pcapng_block(4, b"\0\0\0\0"),  # name resolution
            pcapng_section(e2),
            pcapng_interface(147, 0, e=e2),
            pcapng_interface(LINUX_SLL, 128, tsresol=0x80 | 20, e=e2),
            pcapng_block(5, struct.pack(e2 + "III", 1, 0, 0), e2),  # interface statistics
            pcapng_block(0xBAD, b"\0\0\0\1", e2),  # custom
            pcapng_packet(eth, 5, interface=0, e=e2),  # record 2: link 147
            obsolete_packet(sll, (T0 << 20) // 10**9, 1, e2),  # record 3, iface 3
            pcapng_simple_packet(ip_packet(*V4, payload=b"z" * 200), e=e2),  # record 4: link 147
        ]
    )


@pytest.mark.parametrize("e2", ["<", ">"])
def test_pcapng_sections_interfaces_and_block_kinds(tmp_path: Path, e2: str) -> None:
    path = tmp_path / "multi.pcapng"
    path.write_bytes(multi_section(e2))
    r = read(path)
    a = r.accounting
    assert a.records == 5 and a.ip_packets == 3
    assert a.unsupported_link == {147: 2}  # the EPB and the SPB, both on the 147 interface
    assert a.blocks == {
        "section header": 2,
        "interface description": 4,
        "name resolution": 1,
        "interface statistics": 1,
        "custom": 1,
    }
    p = r.packets
    assert p.record.tolist() == [0, 1, 3]
    assert p.interface.tolist() == [0, 1, 3]
    assert p.time.tolist()[:2] == [T0, T0 // 1000 * 1000]
    assert abs(int(p.time[2]) - T0) < 1000
    assert a.no_timestamp == 0


def test_unsupported_time_resolution(tmp_path: Path) -> None:
    path = tmp_path / "t.pcapng"
    path.write_bytes(pcapng_section() + pcapng_interface(ETHERNET, tsresol=0x80 | 100))
    with pytest.raises(InputError, match="unsupported if_tsresol 0xe4"):
        read_packets(path)


def test_pcapng_simple_packet_block(tmp_path: Path) -> None:
    frame = build_frame(*V4, sport=5, payload=b"y" * 300)
    path = tmp_path / "spb.pcapng"
    blocks = [pcapng_section(), pcapng_interface(ETHERNET, 100), pcapng_simple_packet(frame)]
    path.write_bytes(b"".join(blocks))
    with pytest.raises(InputError, match="none of its 1 packets has a time"):
        read(path)  # a file of such packets alone is refused: no use of them can time them
    r = pcap.read_packet_buffer(path.read_bytes(), str(path))
    got = row(r)
    assert got["time"] == NO_TIME and r.accounting.no_timestamp == 1
    assert got["cap_len"] == 100 and got["wire_len"] == len(frame)  # cut to the snap length
    assert got["truncated"] and got["payload_len"] == 300 and got["sport"] == 5


def test_gzip_by_magic_not_name(tmp_path: Path) -> None:
    frames = tcp_frames(*V6)
    gz = pcap_file(tmp_path, frames, "t.pcap.gz")
    assert gz.read_bytes()[:2] == b"\x1f\x8b"
    check_tcp_rows(read(gz), *V6)
    disguised = tmp_path / "t.cap"
    disguised.write_bytes(gz.read_bytes())
    check_tcp_rows(read(disguised), *V6)
    plain = tmp_path / "plain.gz"
    plain.write_bytes(gzip.decompress(gz.read_bytes()))
    check_tcp_rows(read(plain), *V6)
    ng = tmp_path / "t.pcapng.gz"
    write_pcapng(ng, frames, [T0 + 1000 * i for i in range(4)])
    check_tcp_rows(read(ng), *V6)


def test_ipv4_options_and_udp(tmp_path: Path) -> None:
    frames = [
        build_frame(*V4, ip_options=b"\x94\x04\x00\x00", sport=1, dport=2, payload=b"abc"),
        build_frame(*V4, proto=UDP, sport=53, dport=5353, payload=b"q" * 33, ip_id=9),
        build_frame(*V4, proto=1, payload=b"\x08\x00" + bytes(30)),  # ICMP: kept, no ports
    ]
    r = read(pcap_file(tmp_path, frames))
    p = r.packets
    assert p.proto.tolist() == [TCP, UDP, 1]
    assert p.sport.tolist() == [1, 53, 0] and p.dport.tolist() == [2, 5353, 0]
    assert p.payload_len.tolist() == [3, 33, 32]
    assert not p.has_ts.any()
    assert p.ident[1] == packet_ident(
        *V4, proto=UDP, sport=53, dport=5353, ip_id=9, payload=b"q" * 33
    )


@pytest.mark.parametrize("addrs", [V4, V6], ids=["v4", "v6"])
@pytest.mark.parametrize("proto", [TCP, UDP])
def test_writer_fills_in_checksums(addrs: tuple[str, str], proto: int) -> None:
    packet = ip_packet(*addrs, proto=proto, sport=1, dport=2, payload=b"odd")
    s, d = (ipaddress.ip_address(a).packed for a in addrs)
    segment = packet[20 if len(s) == 4 else 40 :]
    pseudo = s + d + struct.pack("!IxxxB", len(segment), proto)
    assert checksum(pseudo + segment) == 0  # a right checksum makes the sum all ones
    assert len(s) == 16 or checksum(packet[:20]) == 0


def test_tcp_flags_and_options(tmp_path: Path) -> None:
    opts = tcp_options(mss=1460, wscale=7, sack_ok=True, ts=(0xFFFFFFFF, 1))
    frames = [build_frame(*V6, flags=SYN, options=opts), build_frame(*V6, flags=FIN | ACK | 0x100)]
    p = read(pcap_file(tmp_path, frames)).packets
    assert p.tcp_flags.tolist() == [SYN, FIN | ACK | 0x100]
    assert p.has_ts.tolist() == [True, False]
    assert p.ts_val.tolist() == [0xFFFFFFFF, 0] and p.ts_ecr.tolist() == [1, 0]


def test_ipv6_extension_headers(tmp_path: Path) -> None:
    exts = [
        (HOP_BY_HOP, b"\x05\x02\x00\x00"),  # router alert
        (ROUTING, b"\x00\x00" + bytes(4) + bytes(16)),
        (DEST_OPTS, b""),
        (AUTH, b"\0\0" + struct.pack("!II", 1, 2) + bytes(12)),
        ipv6_fragment(0, more=True, ident=77),
    ]
    frames = [
        build_frame(*V6, ext_headers=exts, sport=1, dport=2, payload=b"p" * 40),
        build_frame(*V6, ext_headers=exts[:1], proto=UDP, sport=3, dport=4, payload=b"u"),
        build_frame(*V6, ext_headers=[ipv6_fragment(100, ident=77)], payload=b"rest"),
        build_frame(*V4, ip_id=5, frag_offset=0, more_fragments=True, sport=6, payload=b"a" * 8),
        build_frame(*V4, ip_id=5, frag_offset=2, payload=b"tail"),
    ]
    r = read(pcap_file(tmp_path, frames))
    p, a = r.packets, r.accounting
    assert p.proto.tolist() == [TCP, UDP, TCP]
    assert p.sport.tolist() == [1, 3, 6]
    assert p.payload_len.tolist() == [40, 1, 8]
    assert a.fragments == 2 and a.first_fragments == 2
    assert a.reasons == {"IPv6 non-first fragment": 1, "IPv4 non-first fragment": 1}
    assert p.record.tolist() == [0, 1, 3]


def test_ipv6_extension_header_cut_by_the_snap_length(tmp_path: Path) -> None:
    frame = build_frame(*V6, ext_headers=[(HOP_BY_HOP, bytes(30))], sport=1, payload=b"x")
    got = row(read(pcap_file(tmp_path, [frame], snaplen=14 + 40 + 7)))
    assert got["truncated"] and got["proto"] == HOP_BY_HOP
    assert (got["sport"], got["payload_len"]) == (0, -1)


def test_non_ip_frames(tmp_path: Path) -> None:
    lldp = link_frame(bytes(20), ethertype=0x88CC)
    llc = link_frame(b"\x42\x42\x03" + bytes(35), ethertype=38)  # 802.3: a length, not a type
    sll_other = link_frame(bytes(20), LINUX_SLL, ethertype=0x0004)
    r = read(pcap_file(tmp_path, [ARP, lldp, llc, build_frame(*V4), ARP]))
    assert r.accounting.non_ip == 4 and len(r.packets) == 1
    assert r.accounting.reasons == {
        "no ethertype (802.3 length or LLC)": 1,
        "ethertype 0x0806 ARP": 2,
        "ethertype 0x88cc LLDP": 1,
    }
    assert r.packets.record.tolist() == [3]
    r = read(pcap_file(tmp_path, [sll_other], "sll.pcap", linktype=LINUX_SLL))
    assert r.accounting.non_ip == 1 and len(r.packets) == 0


def test_snap_length_cuts(tmp_path: Path) -> None:
    frame = build_frame(
        *V4, sport=1, dport=2, seq=3, payload=b"d" * 100, options=tcp_options(ts=(5, 6))
    )
    # Ethernet 14 + IPv4 20 + TCP 32 = 66 bytes of headers.
    cases = {100: (True, 3, 100), 60: (False, 3, 100), 40: (False, 0, -1)}
    for snaplen, (has_ts, seq, payload) in cases.items():
        r = read(pcap_file(tmp_path, [frame], f"s{snaplen}.pcap", snaplen=snaplen))
        got = row(r)
        assert got["truncated"] and r.accounting.truncated_packets == 1
        assert (got["has_ts"], got["seq"], got["payload_len"]) == (has_ts, seq, payload)
        assert (got["sport"], got["dport"]) == (1, 2)
        assert (got["cap_len"], got["wire_len"]) == (snaplen, len(frame))
    for snaplen, reason in ((30, "cut in the IP header"), (10, "cut in the link-layer header")):
        path = pcap_file(tmp_path, [frame], f"s{snaplen}.pcap", snaplen=snaplen)
        # A file of which no record decodes is refused; a live capture's batch is accounted.
        with pytest.raises(InputError, match=f"no packet decoded: 1 records, 1 {reason}$"):
            read(path)
        r = pcap.read_packet_buffer(path.read_bytes(), str(path))
        assert r.accounting.truncated == 1 and r.accounting.reasons == {reason: 1}


def test_ethernet_padding_is_not_payload(tmp_path: Path) -> None:
    frame = build_frame(*V4, flags=ACK) + bytes(6)  # padded to the 60-byte minimum
    got = row(read(pcap_file(tmp_path, [frame])))
    assert got["payload_len"] == 0 and not got["truncated"]
    assert got["ident"] == packet_ident(*V4)


def test_zero_ip_length_takes_the_wire_length(tmp_path: Path) -> None:
    frame = bytearray(build_frame(*V4, payload=b"s" * 3000))  # as captured before TSO split it
    frame[16:18] = b"\0\0"
    assert row(read(pcap_file(tmp_path, [bytes(frame)])))["payload_len"] == 3000


def test_ident_ignores_ttl_link_and_vlan(tmp_path: Path) -> None:
    fields = dict(sport=1, dport=2, seq=3, ack=4, ip_id=5, payload=b"hello")
    frames = [
        build_frame(*V4, ttl=64, **fields),
        build_frame(*V4, ttl=3, vlans=(7,), **fields),
        build_frame(*V4, ttl=3, options=tcp_options(ts=(1, 2)), **fields),
    ]
    p = read(pcap_file(tmp_path, frames)).packets
    raw = read(pcap_file(tmp_path, [ip_packet(*V4, **fields)], "raw.pcap", linktype=RAW)).packets
    assert len({*p.ident.tolist(), *raw.ident.tolist()}) == 1


def corrupt(path: Path, at: int, value: bytes) -> Path:
    data = bytearray(path.read_bytes())
    data[at : at + len(value)] = value
    path.write_bytes(bytes(data))
    return path


def test_malformed_packets(tmp_path: Path) -> None:
    good = build_frame(*V4)
    bad_ihl = bytearray(good)
    bad_ihl[14] = 0x44
    v6_in_v4 = link_frame(ip_packet(*V6), ethertype=0x0800)
    short_total = bytearray(good)
    short_total[16:18] = struct.pack("!H", 10)
    bad_offset = bytearray(good)
    bad_offset[14 + 20 + 12] = 0x40
    long_tcp = bytearray(build_frame(*V4, options=tcp_options(mss=1)))
    long_tcp[16:18] = struct.pack("!H", 40)  # IP says 40, TCP header says 24
    frames = [bytes(f) for f in (bad_ihl, v6_in_v4, short_total, bad_offset, long_tcp, good)]
    r = read(pcap_file(tmp_path, frames))
    assert r.accounting.malformed == 5 and len(r.packets) == 1
    assert set(r.accounting.reasons) == {
        "IPv4 header length below 20",
        "IP version does not match the link layer",
        "IP length shorter than its headers",
        "TCP data offset below 5",
        "transport header longer than the IP length",
    }
    mislabelled = pcap_file(tmp_path, [ip_packet(*V6)], "v4.pcap", linktype=IPV4)
    with pytest.raises(InputError, match="1 IP version does not match the link layer"):
        read(mislabelled)  # nothing decodes: refused, not read as no traffic
    raw = pcap.read_packet_buffer(mislabelled.read_bytes(), str(mislabelled))
    assert raw.accounting.malformed == 1


@pytest.mark.parametrize("cut", [1, 5, 16 + 3])
def test_truncated_file_is_counted(tmp_path: Path, cut: int) -> None:
    path = pcap_file(tmp_path, tcp_frames(*V4, n=3))
    size = path.stat().st_size
    last = len(tcp_frames(*V4, n=3)[2])
    path.write_bytes(path.read_bytes()[: size - last - 16 + cut])  # inside the last record
    for r in (read(path), read(path, chunk_records=2)):
        assert r.accounting.records == 3 and r.accounting.truncated_file == 1
        assert len(r.packets) == 2
        assert r.accounting.reasons == {"last record cut by the end of the file": 1}


def test_truncated_pcapng_is_counted(tmp_path: Path) -> None:
    path = tmp_path / "t.pcapng"
    write_pcapng(path, tcp_frames(*V4), [T0] * 4)
    path.write_bytes(path.read_bytes()[:-7])
    r = read(path)
    assert (r.accounting.records, r.accounting.truncated_file, len(r.packets)) == (4, 1, 3)


def test_garbage_in_the_middle_of_a_pcap(tmp_path: Path) -> None:
    path = pcap_file(tmp_path, tcp_frames(*V4))
    first = len(tcp_frames(*V4)[0])
    corrupt(path, 24 + 16 + first + 8, struct.pack("<I", 0x7FFF0000))
    for kw in ({}, {"chunk_records": 1}):
        with pytest.raises(InputError) as e:
            read_packets(path, **kw)
        assert e.value.path == str(path) and e.value.record == 1
        assert "impossible record length" in str(e.value)
        assert f"at byte {24 + 16 + first}" in str(e.value)


def test_a_stream_of_chunks_delivers_the_records_before_garbage(tmp_path: Path) -> None:
    frames = tcp_frames(*V4, n=5)
    path = pcap_file(tmp_path, frames)
    before = 24 + sum(16 + len(f) for f in frames[:3])
    corrupt(path, before + 8, struct.pack("<I", 0x7FFF0000))
    delivered = []
    with pytest.raises(InputError) as e:
        for chunk in iter_packet_chunks(path, 1000):
            delivered.append(chunk)
    assert e.value.record == 3
    assert [len(c.packets) for c in delivered] == [3]
    assert delivered[0].accounting.records == 3


@pytest.mark.parametrize(
    ("at", "value", "message"),
    [
        (4, struct.pack("<I", 13), "impossible block length"),
        (4, struct.pack("<I", 2**30), "impossible block length"),
        (-4, struct.pack("<I", 999), "block length trailer"),
        (8, struct.pack("<I", 3), "names interface 3"),
        (20, struct.pack("<I", 10**6), "captured length 1000000 exceeds the block"),
    ],
)
def test_garbage_in_a_pcapng(tmp_path: Path, at: int, value: bytes, message: str) -> None:
    path = tmp_path / "t.pcapng"
    write_pcapng(path, tcp_frames(*V4, n=3), [T0] * 3)
    data = path.read_bytes()
    shb_idb = len(pcapng_section()) + len(pcapng_interface(ETHERNET, 65535))
    second = shb_idb + int.from_bytes(data[shb_idb + 4 : shb_idb + 8], "little")
    end = second + int.from_bytes(data[second + 4 : second + 8], "little")
    corrupt(path, (end if at < 0 else second) + at, value)
    with pytest.raises(InputError, match=message) as e:
        read_packets(path)
    assert e.value.record == 1


def test_bad_byte_order_magic(tmp_path: Path) -> None:
    path = tmp_path / "t.pcapng"
    path.write_bytes(pcapng_section()[:8] + b"ABCD" + pcapng_section()[12:])
    with pytest.raises(InputError, match="byte-order magic"):
        read_packets(path)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "not a pcap or pcapng file"),
        (b"hello world, this is text\n", "not a pcap or pcapng file"),
        (struct.pack("<I", 0xA1B2C3D4) + bytes(10), "header cut short"),
        (struct.pack("<I", 0xA1B2CD34) + bytes(20), "Kuznetzov"),
        (gzip.compress(b"x" * 100, mtime=0)[:-10], "gzip"),
    ],
)
def test_not_a_capture(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "x.pcap"
    path.write_bytes(content)
    for kw in ({}, {"chunk_records": 10}):
        with pytest.raises(InputError, match=message) as e:
            read_packets(path, **kw)
        assert e.value.path == str(path)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file"):
        read_packets(tmp_path / "absent.pcap")
    with pytest.raises(InputError, match="no such file"):
        read_packets(tmp_path / "absent.pcap", chunk_records=5)


def test_empty_capture(tmp_path: Path) -> None:
    for r in (read(pcap_file(tmp_path, [])), read(pcap_file(tmp_path, []), chunk_records=3)):
        assert len(r.packets) == 0 and r.accounting.records == 0


def test_unsupported_link_type(tmp_path: Path) -> None:
    path = pcap_file(tmp_path, [b"\0" * 40] * 3, linktype=147)
    for kw in ({}, {"chunk_records": 2}):
        with pytest.raises(InputError, match="unsupported link type 147 \\(3 records\\)"):
            read_packets(path, **kw)


@pytest.mark.parametrize("chunk", [1, 2, 3, 1000])
@pytest.mark.parametrize("block", [7, 100, 10**6])
def test_chunks_equal_whole_read(tmp_path: Path, monkeypatch, chunk: int, block: int) -> None:
    monkeypatch.setattr(pcap, "_READ_BLOCK", block)
    frames = [*tcp_frames(*V4, n=3), ARP, *tcp_frames(*V6, n=3)]
    files = [pcap_file(tmp_path, frames), tmp_path / "m.pcapng"]
    files[1].write_bytes(multi_section())
    cut = tmp_path / "cut.pcap"
    cut.write_bytes(files[0].read_bytes()[:-9])
    for path in [*files, cut]:
        whole = read(path)
        parts = list(iter_packet_chunks(path, chunk))
        assert all(p.accounting.records <= chunk for p in parts)
        assert sum((p.accounting for p in parts), PacketAccounting()) == whole.accounting
        joined = read(path, chunk_records=chunk)
        assert joined.accounting == whole.accounting
        for k, v in whole.packets.columns().items():
            assert np.array_equal(getattr(joined.packets, k), v), k


def payload_frames() -> tuple[list[bytes], list[bytes]]:
    """Frames of every kind that has a payload, and the payload each IP one carries."""
    bodies = [bytes(range(i, i + 37 * i % 251)) for i in range(1, 9)] + [b"", b"z" * 300]
    frames, payloads = [], []
    for i, body in enumerate(bodies):
        src, dst = V6 if i % 3 == 2 else V4
        proto = UDP if i % 4 == 3 else TCP
        opts = tcp_options(ts=(i, i)) if proto == TCP and i % 2 else b""
        frames.append(
            build_frame(src, dst, proto=proto, sport=i, dport=80, payload=body, options=opts)
        )
        payloads.append(body)
        if i == 4:
            frames.append(ARP)
    frames.append(build_frame(*V4, flags=ACK, payload=b"ab") + bytes(4))  # Ethernet padding
    payloads.append(b"ab")
    return frames, payloads


@pytest.mark.parametrize("ng", [False, True])
@pytest.mark.parametrize("snaplen", [65535, 120])
def test_payloads_are_the_captured_bytes(tmp_path: Path, ng: bool, snaplen: int) -> None:
    frames, payloads = payload_frames()
    path = tmp_path / ("p.pcapng" if ng else "p.pcap")
    times = [T0 + i for i in range(len(frames))]
    (write_pcapng if ng else write_pcap)(path, frames, times, snaplen=snaplen)
    whole = read(path, payloads=True)
    p = whole.packets
    # What the capture holds of each payload: the frame cut at the snap length, less its headers
    # (and less the Ethernet padding, which is not payload).
    ip_frames = [f for f in frames if f is not ARP]
    expected = []
    for frame, body, plen in zip(ip_frames, payloads, p.payload_len.tolist(), strict=True):
        assert plen == len(body)
        padding = 4 if frame is frames[-1] else 0
        lost = max(0, len(frame) - padding - snaplen)
        expected.append(body[: max(0, len(body) - lost)])
    assert [whole.payloads[i] for i in range(len(p))] == expected
    assert whole.payloads.lengths().tolist() == [len(e) for e in expected]
    if snaplen < 65535:
        cut = p.truncated & (whole.payloads.lengths() < p.payload_len)
        assert cut.sum() >= 3  # several payloads end early where the snap length cut them
    assert whole.payloads.take(np.array([3, 0])).data.tobytes() == expected[3] + expected[0]
    for chunk in (1, 3, 100):
        joined = read(path, chunk_records=chunk, payloads=True)
        assert np.array_equal(joined.payloads.offsets, whole.payloads.offsets)
        assert np.array_equal(joined.payloads.data, whole.payloads.data)
    assert read(path).payloads is None


def test_payloads_across_read_blocks(tmp_path: Path, monkeypatch) -> None:
    """A chunk whose records span several read blocks gathers each block's payloads before the
    next block replaces it."""
    monkeypatch.setattr(pcap, "_READ_BLOCK", 50)
    frames, payloads = payload_frames()
    path = pcap_file(tmp_path, frames)
    joined = read(path, chunk_records=1000, payloads=True)
    assert [joined.payloads[i] for i in range(len(joined.packets))] == payloads


def test_accounting_adds_and_serialises() -> None:
    a = PacketAccounting(records=2, ip_packets=1, unsupported_link={9: 1})
    b = PacketAccounting(records=1, non_ip=1, reasons={"ethertype 0x0806 ARP": 1})
    s = a + b
    assert s.records == 3 and s.unaccounted == 0 and s.unsupported_link == {9: 1}
    assert s.as_dict()["unsupported_link"] == {"9": 1}


IDENT_FIELDS = ("proto", "sport", "dport", "ip_id", "seq", "ack", "payload")


@st.composite
def packets(draw):
    v6 = draw(st.booleans())
    addr = st.ip_addresses(v=6 if v6 else 4).map(str)
    proto = draw(st.sampled_from([TCP, UDP]))
    fields = dict(
        proto=proto,
        sport=draw(st.integers(0, 65535)),
        dport=draw(st.integers(0, 65535)),
        payload=draw(st.binary(max_size=80)),
        ttl=draw(st.integers(0, 255)),
        ip_id=0 if v6 else draw(st.integers(0, 65535)),
    )
    if proto == TCP:
        fields |= dict(
            seq=draw(st.integers(0, 2**32 - 1)),
            ack=draw(st.integers(0, 2**32 - 1)),
            flags=draw(st.integers(0, 0x1FF)),
            window=draw(st.integers(0, 65535)),
        )
        ts = draw(st.none() | st.tuples(st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1)))
        fields["options"] = tcp_options(ts=ts, mss=draw(st.none() | st.integers(0, 65535)))
        fields["ts"] = ts
    return draw(addr), draw(addr), fields


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(packets(), min_size=1, max_size=8),
    st.sampled_from([ETHERNET, LINUX_SLL, LINUX_SLL2, RAW, NULL, LOOP]),
    st.booleans(),
)
def test_random_packets_round_trip(tmp_path: Path, pkts, linktype: int, ng: bool) -> None:
    frames, times = [], []
    for i, (src, dst, f) in enumerate(pkts):
        f = {k: v for k, v in f.items() if k != "ts"}
        frames.append(build_frame(src, dst, linktype=linktype, **f))
        times.append(T0 + 17 * i)
    path = tmp_path / ("r.pcapng" if ng else "r.pcap")
    (write_pcapng if ng else write_pcap)(path, frames, times, linktype)
    r = read(path)
    assert r.packets.time.tolist() == times
    for i, (src, dst, f) in enumerate(pkts):
        got = row(r, i)
        assert (got["src_hi"], got["src_lo"]) == parse_address(src)
        assert (got["dst_hi"], got["dst_lo"]) == parse_address(dst)
        assert got["ip_version"] == ipaddress.ip_address(src).version
        assert got["payload_len"] == len(f["payload"])
        for k in ("proto", "sport", "dport", "ttl", "ip_id", "seq", "ack", "window"):
            assert got[k] == f.get(k, 0), k
        assert got["tcp_flags"] == f.get("flags", 0)
        ts = f.get("ts")
        assert (got["has_ts"], got["ts_val"], got["ts_ecr"]) == (
            (True, *ts) if ts else (False, 0, 0)
        )
        ident = packet_ident(src, dst, **{k: v for k, v in f.items() if k in IDENT_FIELDS})
        assert got["ident"] == ident


# Real captures, decoded again by dpkt, packet by packet.


def dpkt_packets(path: Path, limit: int) -> tuple[list[dict | None], int]:
    """What dpkt makes of the first ``limit`` records (the fields compared, or None for no IP
    packet), and how many records it counts in all."""
    import dpkt

    out: list[dict | None] = []
    records = 0
    with gzip.open(path) if path.suffix == ".gz" else path.open("rb") as f:
        reader = dpkt.pcapng.Reader(f) if ".pcapng" in path.name else dpkt.pcap.Reader(f)
        for ts, frame in reader:
            records += 1
            if records > limit:
                continue
            ip = dpkt.ethernet.Ethernet(frame).data
            if not isinstance(ip, dpkt.ip.IP | dpkt.ip6.IP6):
                out.append(None)
                continue
            t = ip.data
            v6 = isinstance(ip, dpkt.ip6.IP6)
            rec = dict(
                time=float(ts),
                src=ip.src,
                dst=ip.dst,
                proto=ip.p,
                ttl=ip.hlim if v6 else ip.ttl,
                ip_id=0 if v6 else ip.id,
                sport=0,
                dport=0,
                tcp_flags=0,
                seq=0,
                ack=0,
                ts=None,
                payload=bytes(t),
            )
            if isinstance(t, dpkt.tcp.TCP | dpkt.udp.UDP):
                rec |= dict(sport=t.sport, dport=t.dport, payload=bytes(t.data))
            if isinstance(t, dpkt.tcp.TCP):
                rec |= dict(tcp_flags=t.flags, seq=t.seq, ack=t.ack, window=t.win)
                for kind, value in dpkt.tcp.parse_opts(t.opts):
                    if kind == dpkt.tcp.TCP_OPT_TIMESTAMP:
                        rec["ts"] = struct.unpack("!II", value)
            out.append(rec)
    return out, records


def address_bytes(hi: int, lo: int, version: int) -> bytes:
    value = (int(hi) << 64 | int(lo)).to_bytes(16, "big")
    return value[12:] if version == 4 else value


@pytest.mark.realdata
def test_real_captures_match_dpkt(shared_data: Path) -> None:
    pytest.importorskip("dpkt")
    files = sorted((shared_data / "pcap").glob("*.pcap*"))
    assert files, "no captures in shared data"
    for path in files:
        r = read(path)
        expected, records = dpkt_packets(path, limit=20_000)
        assert r.accounting.records == records, path.name
        p = r.packets
        rows = {rec: i for i, rec in enumerate(p.record.tolist())}
        for n, want in enumerate(expected):
            if want is None:
                assert n not in rows, (path.name, n)
                continue
            i = rows[n]
            got = row(r, i)
            where = (path.name, n)
            assert abs(got["time"] - want["time"] * 1e9) < 2000, where
            assert address_bytes(got["src_hi"], got["src_lo"], got["ip_version"]) == want["src"]
            assert address_bytes(got["dst_hi"], got["dst_lo"], got["ip_version"]) == want["dst"]
            for k in ("proto", "ttl", "ip_id", "sport", "dport", "seq", "ack"):
                assert got[k] == want[k], (*where, k)
            assert got["tcp_flags"] & 0xFF == want["tcp_flags"] & 0xFF, where
            ts = want["ts"]
            assert (got["has_ts"], got["ts_val"], got["ts_ecr"]) == (
                (True, *ts) if ts else (False, 0, 0)
            ), where
            if not got["truncated"]:
                assert got["payload_len"] == len(want["payload"]), where
            if n < 300:
                ident = packet_ident(
                    str(_ip(want["src"])),
                    str(_ip(want["dst"])),
                    proto=want["proto"],
                    sport=want["sport"],
                    dport=want["dport"],
                    ip_id=want["ip_id"],
                    seq=want["seq"],
                    ack=want["ack"],
                    payload=want["payload"],
                )
                assert got["ident"] == ident, where


def _ip(raw: bytes) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    return ipaddress.ip_address(raw)
