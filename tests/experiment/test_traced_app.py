"""The traced app: front, geo and rate run in namespaces under load for 5 s, one tcpdump on the
bridge between them; its call logs against themselves and against the packets."""

from __future__ import annotations

import json
from collections import defaultdict

import dpkt
import pytest
import yaml

from tacit.experiment.traced_app_services import METHODS, PORTS, ROOT_ENDPOINTS

pytestmark = pytest.mark.live


@pytest.fixture(scope="module")
def run(traced_app_run):
    truth = [json.loads(line) for line in traced_app_run.truth.read_text().splitlines()]
    return traced_app_run, truth


def test_every_call_has_its_parent_and_every_root_both_children(run) -> None:
    result, truth = run
    calls = {c["rpc"]: c for c in truth}
    assert len(calls) == len(truth) == result.rpcs  # ids are unique
    assert all(c["error"] is None for c in truth)
    roots = [c for c in truth if c["parent_rpc"] is None]
    assert {c["caller"] for c in roots} == {"client"}
    assert {c["endpoint"] for c in roots} == set(ROOT_ENDPOINTS)
    children = defaultdict(list)
    for c in truth:
        if c["parent_rpc"] is not None:
            parent = calls[c["parent_rpc"]]
            assert (c["caller"], parent["callee"]) == ("front", "front")
            assert parent["start_ns"] < c["start_ns"] <= c["end_ns"] < parent["end_ns"]
            children[c["parent_rpc"]].append(c)
    overlapping = 0
    answer_ms = []  # from front's last call returning to the client reading the answer
    for root in roots:
        by_callee = {c["callee"]: c for c in children[root["rpc"]]}
        answer_ms.append((root["end_ns"] - max(c["end_ns"] for c in by_callee.values())) / 1e6)
        assert len(children[root["rpc"]]) == 2 and set(by_callee) == {"geo", "rate"}
        assert {c["endpoint"] for c in by_callee.values()} == set(METHODS.values())
        geo, rate = by_callee["geo"], by_callee["rate"]
        if root["endpoint"] == "GET /hotels":  # sequential: rate on geo's answer
            assert geo["end_ns"] < rate["start_ns"]
        else:
            overlapping += rate["start_ns"] < geo["end_ns"]
    recommend = sum(r["endpoint"] == "GET /recommend" for r in roots)
    assert overlapping > 0.8 * recommend  # parallel: rate starts before geo (~2 ms) returns
    # front answers at once: no response waits for a delayed ACK (≥ 40 ms) behind Nagle
    assert sorted(answer_ms)[int(0.9 * len(answer_ms))] < 20


def test_the_load_was_served_in_full(run, traced_app_params) -> None:
    result, truth = run
    expected = traced_app_params.rate * traced_app_params.duration_s
    assert 0.8 * expected < result.requests_scheduled < 1.2 * expected  # Poisson, ±3.5 σ
    assert result.requests_sent == result.requests_completed == result.requests_scheduled
    assert result.request_errors == result.rpc_errors == 0
    roots = result.endpoints["GET /hotels"] + result.endpoints["GET /recommend"]
    assert roots == result.requests_completed
    assert result.endpoints["/geo.Geo/Nearby"] == result.endpoints["/rate.Rate/GetRates"] == roots
    assert result.rpcs == 3 * roots == len(truth)
    assert result.lag_p99_ms < 50  # the app kept up: requests left on time
    assert json.loads(result.summary.read_text()) == result.as_dict()


def _streams(pcap) -> tuple[dict[tuple[str, int, str, int], bytes], dict[str, int]]:
    """The payload of every TCP direction in the capture, in sequence order (a segment sent
    again counted once), and how many packets each address sent."""
    segments: dict[tuple[str, int, str, int], dict[int, bytes]] = defaultdict(dict)
    first: dict[tuple[str, int, str, int], int] = {}
    sent: dict[str, int] = defaultdict(int)
    with pcap.open("rb") as f:
        for _, frame in dpkt.pcap.Reader(f):
            ip = dpkt.ethernet.Ethernet(frame).data
            tcp = ip.data
            key = (
                dpkt.utils.inet_to_str(ip.src),
                tcp.sport,
                dpkt.utils.inet_to_str(ip.dst),
                tcp.dport,
            )
            sent[key[0]] += 1
            if tcp.flags & dpkt.tcp.TH_SYN:
                first[key] = tcp.seq + 1
            elif tcp.data:
                segments[key][tcp.seq] = bytes(tcp.data)
    streams = {
        key: b"".join(
            data for _, data in sorted(parts.items(), key=lambda s: (s[0] - first[key]) % 2**32)
        )
        for key, parts in segments.items()
    }
    return streams, dict(sent)


def test_the_capture_is_complete_and_every_call_id_is_on_the_wire(run, traced_app_params) -> None:
    """Each id travels in the clear toward the callee: the HTTP header of a root request, the
    gRPC metadata of front's calls (grpc sends metadata values as HPACK literals, RFC 7541 §6.2,
    without Huffman coding); packets are checked per TCP stream, reassembled, since an id may
    straddle two segments."""
    result, truth = run
    assert result.capture is not None
    assert result.capture.dropped == 0
    # "received by filter" may count packets tcpdump had not read yet when it was stopped
    # (tcpdump(8)): 3,714 against 3,713 captured in one run. Lost ones would be "dropped by
    # kernel"; whether a call is missing is checked below, on the wire.
    assert result.capture.captured == result.packets <= result.capture.received
    assert result.duplicate_packets == 0
    addresses = yaml.safe_load(result.services.read_text())
    assert addresses == {a: role for role, a in traced_app_params.addresses().items()}
    streams, sent = _streams(result.pcap)
    assert sum(sent.values()) == result.packets
    assert set(sent) == set(addresses)
    assert {addresses[a]: n for a, n in sent.items()} == result.packets_by_service
    sent_to: dict[tuple[str, str], bytes] = defaultdict(bytes)  # caller → callee's port
    for (src, _, dst, dport), data in streams.items():
        if dport == PORTS.get(addresses[dst]):
            sent_to[addresses[src], addresses[dst]] += data
    assert set(sent_to) == {("client", "front"), ("front", "geo"), ("front", "rate")}
    for (caller, callee), data in sent_to.items():
        ids = [c["rpc"] for c in truth if (c["caller"], c["callee"]) == (caller, callee)]
        missing = [i for i in ids if i.encode() not in data]
        assert ids and not missing, (caller, callee, len(missing), len(ids))
