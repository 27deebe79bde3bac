"""WAP5-style timeline drawings (tacit.causal_paths.timeline; Reynolds et al., WWW '06,
Figs. 10–14) of hand-built patterns."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tacit.causal_paths.patterns import Hop, Pattern
from tacit.causal_paths.timeline import (
    draw_timeline,
    draw_timelines,
    event_times,
    format_ms,
    network_delay_label,
    node_delay_label,
    summary_line,
)

MS = 1_000_000
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _hop(
    position: int,
    parent: int,
    src: str,
    dst: str,
    src_traced: bool,
    dst_traced: bool,
    node_ms: float | None,
    net_ms: float | None,
) -> Hop:
    return Hop(
        position=position,
        parent=parent,
        src=src,
        dst=dst,
        src_traced=src_traced,
        dst_traced=dst_traced,
        node_delay_ns=None if node_ms is None else node_ms * MS,
        network_delay_ns=None if net_ms is None else net_ms * MS,
    )


def proxy_pattern(key: int = 0xABC) -> Pattern:
    """client → proxy → origin → proxy → client; the client and the origin are untraced, so
    the origin's reply carries the round trip the proxy saw (12 ms)."""
    return Pattern(
        key=key,
        count=42,
        expected=37.5,
        max_probability=0.91,
        mean_latency_ns=15.5 * MS,
        hops=[
            _hop(0, -1, "client", "proxy", False, True, None, None),
            _hop(1, 0, "proxy", "origin", True, False, 2.0, None),
            _hop(2, 1, "origin", "proxy", False, True, None, 12.0),
            _hop(3, 2, "proxy", "client", True, False, 1.5, None),
        ],
    )


def parallel_pattern() -> Pattern:
    """web calls auth and cache in parallel after one receipt; all traced but the client."""
    return Pattern(
        key=0x5EED,
        count=7,
        expected=6.25,
        max_probability=0.5,
        mean_latency_ns=None,
        hops=[
            _hop(0, -1, "client", "web", False, True, None, None),
            _hop(1, 0, "web", "auth", True, True, 0.8, 0.25),
            _hop(2, 0, "web", "cache", True, True, 1.1, 0.3),
            _hop(3, 1, "auth", "web", True, True, 3.0, 0.2),
            _hop(4, 2, "cache", "web", True, True, 0.4, 0.3),
        ],
    )


def _flat(pairs: list[tuple[float, float]]) -> list[float]:
    return [t for pair in pairs for t in pair]


def _texts(svg: Path) -> list[str]:
    root = ET.parse(svg).getroot()
    return ["".join(e.itertext()) for e in root.iter() if e.tag.endswith("}text")]


def test_event_times_walk_the_tree() -> None:
    times = event_times(proxy_pattern())
    expected = [(0.0, 0.0), (2.0, 2.0), (2.0, 14.0), (15.5, 15.5)]
    assert _flat(times) == pytest.approx(_flat(expected))


def test_parallel_children_start_from_the_same_receipt() -> None:
    times = event_times(parallel_pattern())
    expected = [(0.0, 0.0), (0.8, 1.05), (1.1, 1.4), (4.05, 4.25), (1.8, 2.1)]
    assert _flat(times) == pytest.approx(_flat(expected))


def test_event_times_follow_positions_not_list_order() -> None:
    p = proxy_pattern()
    p.hops = [p.hops[2], p.hops[0], p.hops[3], p.hops[1]]
    expected = [(2.0, 14.0), (0.0, 0.0), (15.5, 15.5), (2.0, 2.0)]
    assert _flat(event_times(p)) == pytest.approx(_flat(expected))


def test_labels() -> None:
    hops = proxy_pattern().hops
    assert format_ms(12 * MS) == "12.000 ms"
    assert [node_delay_label(h) for h in hops] == [None, "2.000 ms", None, "1.500 ms"]
    assert [network_delay_label(h) for h in hops] == [None, None, "rtt 12.000 ms", None]
    assert network_delay_label(parallel_pattern().hops[1]) == "0.250 ms"
    assert summary_line(proxy_pattern()) == (
        "count 42 · expected 37.50 · max probability 0.91 · mean latency 15.500 ms · 4 hops"
    )
    assert "mean latency unknown" in summary_line(parallel_pattern())


def test_draw_timeline_writes_svg_and_png(tmp_path: Path) -> None:
    written = draw_timeline(proxy_pattern(), tmp_path / "out" / "proxy", title="proxied GET")
    svg, png = tmp_path / "out" / "proxy.svg", tmp_path / "out" / "proxy.png"
    assert written == [svg, png]
    assert svg.is_file() and png.is_file()
    assert png.read_bytes().startswith(PNG_MAGIC)
    texts = _texts(svg)
    for name in ("client", "proxy", "origin"):
        assert name in texts
    assert texts.count("untraced") == 2  # client and origin
    for label in ("2.000 ms", "1.500 ms", "rtt 12.000 ms"):
        assert label in texts
    assert "proxied GET" in texts
    assert summary_line(proxy_pattern()) in texts
    for tick in ("0.000", "2.000", "14.000", "15.500"):
        assert tick in texts


def test_draw_timeline_replaces_an_image_suffix(tmp_path: Path) -> None:
    written = draw_timeline(parallel_pattern(), tmp_path / "par.svg")
    assert written == [tmp_path / "par.svg", tmp_path / "par.png"]
    texts = _texts(written[0])
    assert "pattern 0000000000005eed" in texts  # default title: the key
    for label in ("0.800 ms → auth", "1.100 ms → cache", "3.000 ms", "0.400 ms", "0.250 ms"):
        assert label in texts
    assert written[1].read_bytes().startswith(PNG_MAGIC)


def test_draw_timelines_numbers_the_top_patterns(tmp_path: Path) -> None:
    patterns = [proxy_pattern(1), parallel_pattern(), proxy_pattern(2)]
    written = draw_timelines(patterns, tmp_path / "timelines", top=2)
    names = [p.name for p in written]
    assert names == ["pattern-01.svg", "pattern-01.png", "pattern-02.svg", "pattern-02.png"]
    assert all(p.is_file() for p in written)
    assert "pattern 02 · 0000000000005eed" in _texts(written[2])
    assert draw_timelines(patterns, tmp_path / "none", top=0) == []


def test_a_pattern_without_hops_is_refused(tmp_path: Path) -> None:
    empty = Pattern(
        key=1, count=0, expected=0.0, max_probability=0.0, mean_latency_ns=None, hops=[]
    )
    with pytest.raises(ValueError):
        draw_timeline(empty, tmp_path / "empty")
