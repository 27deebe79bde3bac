"""Spans from packets: a client and a server span per exchange, named by the service map, and
test traces woven from requests sent one at a time (TraceWeaver §5.1, §5.2.1)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from app_captures import BACK, FRONT, LOADGEN, NAMES, three_tier
from tacit.errors import ConfigError
from tacit.formats.blind import read_blind, write_blind
from tacit.formats.capture_spans import (
    NO_RESPONSE,
    ServiceMap,
    read_service_map,
    spans_from_exchanges,
)
from tacit.formats.exchanges import ENCRYPTED, ExchangeParams, read_exchanges
from tacit.model.spans import CLIENT, NONE, SERVER
from tacit.reconstruct.isolated import NOT_ISOLATED, callgraph_from_isolated, weave_isolated
from tcp_conversations import MS, T0, Conversation, capture_all


def test_every_exchange_becomes_a_named_pair_of_spans(tmp_path: Path) -> None:
    read = capture_all(tmp_path, three_tier([10, 30], answer_last=False))
    ex = read_exchanges(read, params=ExchangeParams(keep_headers=("X-Request-Id",)))
    got = spans_from_exchanges(ex, NAMES, "app.pcap")
    a = got.accounting
    assert (a.exchanges, a.paired, a.spans, a.left_out) == (4, 3, 6, {NO_RESPONSE: 1})
    s = got.spans
    rows = [
        (
            *(s.name(k, r) for k in ("service", "instance", "endpoint")),
            int(s.kind[r]),
            s.name("peer", r),
            int(s.start[r] - T0) // MS,
            int(s.end[r] - T0) // MS,
        )
        for r in range(len(s))
    ]
    outer = [
        ("loadgen", LOADGEN, "GET /hotels", CLIENT, "front", 10, 17),
        ("front", FRONT, "GET /hotels", SERVER, "loadgen", 10, 17),
    ]
    inner = [
        ("front", FRONT, "GET /near", CLIENT, "geo", 12, 15),
        ("geo", BACK, "GET /near", SERVER, "front", 12, 15),
    ]
    assert sorted(rows) == sorted(outer + inner + [(*r[:5], r[5] + 20, r[6] + 20) for r in inner])
    assert (s.link == np.arange(len(s)) ^ 1).all() and (s.parent == NONE).all()
    # The kept header labels each span with its exchange's request id.
    ids = [ex.strings[ex.kept["x-request-id"][e]] for e in got.exchange]
    assert sorted(set(ids)) == ["c0", "c1", "r0"] and ids[0::2] == ids[1::2]
    # What the capture saw, as OpenTelemetry attributes shared by the two spans of an exchange.
    outer_detail = s.detail(int(np.flatnonzero(s.endpoint == s.strings.code("GET /hotels"))[0]))
    assert outer_detail.attributes == {
        "network.protocol.name": "http",
        "server.address": FRONT,
        "server.port": 8080,
        "client.address": LOADGEN,
        "client.port": 40000,
        "http.request.method": "GET",
        "url.path": "/hotels",
        "url.query": "city=a",
        "http.response.status_code": 200,
        "http.request.header.x-request-id": "r0",
    }
    # As blind spans: read back with the two sides of each RPC paired.
    write_blind(tmp_path / "spans.jsonl", s)
    back = read_blind(tmp_path / "spans.jsonl")
    assert len(back) == 6 and (back.link[back.link >= 0] >= 0).sum() == 6


def test_unnamed_ends_are_addresses() -> None:
    assert ServiceMap().name("10.0.0.3:80", server=True) == ("10.0.0.3:80", "10.0.0.3")
    assert ServiceMap().name("10.0.0.1:40000", server=False) == ("10.0.0.1", "10.0.0.1")
    named = ServiceMap(endpoints={"[fe80::1]:443": "api"}, addresses={"fe80::1": "other"})
    assert named.name("[fe80::1]:443", True) == ("api", "fe80::1")


def test_isolated_requests_weave_into_test_traces_and_a_call_graph(tmp_path: Path) -> None:
    got = spans_from_exchanges(read_exchanges(capture_all(tmp_path, three_tier([10, 30]))), NAMES)
    s = got.spans
    rec = weave_isolated(s)
    front_calls = np.flatnonzero((s.kind == CLIENT) & (s.instance == s.strings.code(FRONT)))
    for c in front_calls:  # each call's parent is front's request that encloses it
        p = rec.parent[c]
        assert s.name("endpoint", p) == "GET /hotels" and s.start[p] < s.start[c] < s.end[p]
    cg, _ = callgraph_from_isolated(s)
    g = cg.get("front", "GET /hotels")
    assert g is not None and [sl.callee for sl in g.slots] == [("geo", "GET /near")]


def test_overlapping_requests_are_not_woven(tmp_path: Path) -> None:
    first = three_tier([10])
    second = three_tier([11], ports=(40001, 50001))  # in flight at the same time
    s = spans_from_exchanges(read_exchanges(capture_all(tmp_path, first + second)), NAMES).spans
    rec = weave_isolated(s)
    front_calls = np.flatnonzero((s.kind == CLIENT) & (s.service == s.strings.code("front")))
    assert [rec.unmapped[int(c)] for c in front_calls] == [NOT_ISOLATED, NOT_ISOLATED]


def test_service_map_files(tmp_path: Path) -> None:
    flat = tmp_path / "services.yaml"
    flat.write_text('"10.0.0.2": front\n"10.0.0.3:80": geo\n":6379": cache\n"[::1]:8080": api\n')
    m = read_service_map(flat)
    assert m.name("10.0.0.2:8080", True) == ("front", "10.0.0.2")
    assert m.name("10.0.0.3:80", True) == ("geo", "10.0.0.3")
    assert m.name("10.0.0.9:6379", True) == ("cache", "10.0.0.9")
    assert m.name("10.0.0.9:6379", False) == ("10.0.0.9", "10.0.0.9")  # a client's port
    assert m.name("[::1]:8080", True) == ("api", "::1")
    pods = tmp_path / "pods.json"
    pod = {
        "metadata": {"name": "geo-7b9f-x2", "labels": {"app": "geo"}},
        "status": {"podIP": "10.1.0.5", "podIPs": [{"ip": "10.1.0.5"}]},
    }
    pods.write_text(json.dumps({"kind": "List", "items": [pod]}))
    assert read_service_map(pods).name("10.1.0.5:5000", True) == ("geo", "geo-7b9f-x2")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('"10.0.0.2": [a]\n', "non-empty string"),
        ('"10.0.0.x": a\n', "10.0.0.x"),
        ('":99999": a\n', "not a port"),
        ("- a\n", "expected a mapping"),
        ('items: [{"metadata": {}}]\n', "metadata.name"),
    ],
)
def test_bad_service_maps_name_the_entry(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message) as e:
        read_service_map(path)
    assert str(path) in str(e.value)


def test_encrypted_connections_are_counted_as_such(tmp_path: Path) -> None:
    tls = Conversation((LOADGEN, 40000), (FRONT, 443))
    tls.handshake(0)
    hello = b"\x16\x03\x01\x00\x05\x01\x00\x00\x01\x00"
    tls.send(MS, 0, hello)
    tls.send(2 * MS, 1, b"\x16\x03\x03\x00\x02\x02\x00")
    ex = read_exchanges(capture_all(tmp_path, [tls]))
    assert len(ex) == 0 and ex.accounting.connections == {"unknown": 1}
    assert ex.accounting.unparsed == {ENCRYPTED: len(hello) + 7}
