"""Packet tables: the address representation, the endpoint parser, and the ident hash."""

from __future__ import annotations

import ipaddress

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tacit.errors import ConfigError
from tacit.model.packets import (
    IDENT_PAYLOAD,
    TCP,
    UDP,
    V4_MAPPED,
    PacketTable,
    concat_packets,
    format_address,
    format_endpoint,
    packet_ident,
    parse_address,
    parse_endpoint,
    xxh64,
)

# Published xxHash64 values (seed 0), from the reference implementation's test suite.
KNOWN = {b"": 0xEF46DB3751D8E999, b"a": 0xD24EC4F1A98C6E5B, b"abc": 0x44BC2CF5AD770999}


@pytest.mark.parametrize(("data", "expected"), KNOWN.items())
def test_xxh64_known_values(data: bytes, expected: int) -> None:
    assert xxh64(data) == expected


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200), st.integers(0, 2**64 - 1))
def test_xxh64_matches_reference(data: bytes, seed: int) -> None:
    xxhash = pytest.importorskip("xxhash", reason="the reference xxHash is a test-only extra")
    assert xxh64(data, seed) == xxhash.xxh64_intdigest(data, seed=seed)


def test_ipv4_is_stored_mapped() -> None:
    assert parse_address("10.1.2.3") == (0, V4_MAPPED | 0x0A010203)
    assert parse_address("::ffff:10.1.2.3") == parse_address("10.1.2.3")
    assert format_address(0, V4_MAPPED | 0x0A010203) == "10.1.2.3"


@given(st.integers(0, 2**32 - 1))
def test_ipv4_round_trip(value: int) -> None:
    text = str(ipaddress.IPv4Address(value))
    assert format_address(*parse_address(text)) == text


@given(st.integers(0, 2**128 - 1))
def test_ipv6_round_trip(value: int) -> None:
    addr = ipaddress.IPv6Address(value)
    hi, lo = parse_address(str(addr))
    assert hi << 64 | lo == value
    shown = format_address(np.uint64(hi), np.uint64(lo))
    expected = str(addr.ipv4_mapped) if addr.ipv4_mapped else str(addr)
    assert shown == expected


@pytest.mark.parametrize(
    ("text", "port"),
    [
        ("10.0.0.1", None),
        ("10.0.0.1:80", 80),
        ("2001:db8::1", None),
        ("[2001:db8::1]", None),
        ("[2001:db8::1]:443", 443),
        (" 10.0.0.1:0 ", 0),
    ],
)
def test_parse_endpoint(text: str, port: int | None) -> None:
    hi, lo, p = parse_endpoint(text)
    addr = text.strip().split("]")[0].lstrip("[")
    if "." in addr:
        addr = addr.split(":")[0]
    assert (hi, lo) == parse_address(addr)
    assert p == port


@pytest.mark.parametrize(
    "text",
    ["10.0.0.1:http", "10.0.0.1:70000", "10.0.0.1:²", "[::1", "[::1]80", "nonsense", "10.0.0.256"],
)
def test_parse_endpoint_rejects(text: str) -> None:
    with pytest.raises(ConfigError):
        parse_endpoint(text)


def test_format_endpoint() -> None:
    assert format_endpoint(*parse_address("10.0.0.1"), 80) == "10.0.0.1:80"
    assert format_endpoint(*parse_address("2001:db8::1"), 443) == "[2001:db8::1]:443"


def test_ident_covers_invariant_fields_only() -> None:
    base = dict(proto=TCP, sport=1234, dport=80, ip_id=7, seq=1, ack=2, payload=b"GET / HTTP/1.1")
    ident = packet_ident("10.0.0.1", "10.0.0.2", **base)
    assert ident == packet_ident("10.0.0.1", "10.0.0.2", **base)
    for change in (
        dict(sport=1235),
        dict(dport=81),
        dict(ip_id=8),
        dict(seq=2),
        dict(ack=3),
        dict(proto=UDP),
        dict(payload=b"GET / HTTP/1.0"),
    ):
        assert packet_ident("10.0.0.1", "10.0.0.2", **{**base, **change}) != ident, change
    assert packet_ident("10.0.0.2", "10.0.0.1", **base) != ident
    assert packet_ident("::ffff:10.0.0.1", "::ffff:10.0.0.2", **base) != ident  # version differs
    long = b"x" * IDENT_PAYLOAD
    assert packet_ident("::1", "::2", payload=long) == packet_ident(
        "::1", "::2", payload=long + b"y"
    )


def test_table_basics() -> None:
    empty = PacketTable.empty()
    assert len(empty) == 0
    t = PacketTable.allocate(3)
    for k, v in t.columns().items():
        v[:] = 0 if k != "ip_version" else 4
    t.src_lo[:] = parse_address("10.0.0.1")[1]
    t.dst_lo[:] = parse_address("10.0.0.2")[1]
    t.sport[:] = [1, 2, 3]
    t.dport[:] = 80
    t.record[:] = [5, 6, 7]
    t.sources = ["a.pcap"]
    assert t.src(1) == "10.0.0.1:2"
    assert t.describe(2) == "10.0.0.1:3 -> 10.0.0.2:80 proto 0 (record 7)"
    part = t.take(np.array([False, True, True]))
    assert part.sport.tolist() == [2, 3]
    both = concat_packets([t, part])
    assert len(both) == 5 and both.sources == ["a.pcap"]
    assert both.sport.dtype == np.uint16
    assert len(concat_packets([])) == 0
