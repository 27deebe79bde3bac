"""RTT baselines (tcptrace seq/ack, pping timestamps, handshake) on synthetic captures whose
round trips are known by construction, and on a real capture."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tacit.formats.pcap import read_packets
from tacit.model.packets import ACK, PSH, PacketTable
from tacit.response_latency.rtt_baselines import CLIENT, SERVER, rtt_samples
from tcp_conversations import MS, Conversation, capture

US = 1000


def exchange(server_rtt: int, client_rtt: int, retransmit: bool = False, timestamps=False):
    """Requests and responses with the capture point ``server_rtt`` from the server's round trip
    and ``client_rtt`` from the client's: each end acknowledges (or answers) after that."""
    c = Conversation(isn=(2**32 - 50, 7), timestamps=timestamps)
    t = c.handshake(0, server_rtt, client_rtt)
    for k in range(5):
        t += 20 * MS
        seq = c.packet(t, 0, flags=ACK | PSH, payload=b"q" * 100)
        if retransmit and k == 2:  # sent again before the ACK: Karn's rule drops both
            c.packet(t + 100 * US, 0, flags=ACK | PSH, payload=b"q" * 100, seq=seq)
        c.packet(t + server_rtt, 1)  # the server's ACK
        c.packet(t + server_rtt + 2 * MS, 1, flags=ACK | PSH, payload=b"r" * 300)
        c.packet(t + server_rtt + 2 * MS + client_rtt, 0)  # the client's ACK
    return c


def test_seq_ack_measures_each_side(tmp_path: Path) -> None:
    s = rtt_samples(capture(tmp_path, exchange(3 * MS, 700 * US)).packets)
    server, client = s.select("seq_ack", SERVER), s.select("seq_ack", CLIENT)
    assert len(server) == 5 and len(client) == 5
    assert np.all(s.rtt[server] == 3 * MS) and np.all(s.rtt[client] == 700 * US)
    assert s.connections[0].how == "handshake"


def test_karn_rule_drops_retransmitted_segments(tmp_path: Path) -> None:
    s = rtt_samples(capture(tmp_path, exchange(3 * MS, 700 * US, retransmit=True)).packets)
    server = s.select("seq_ack", SERVER)
    assert len(server) == 4 and np.all(s.rtt[server] == 3 * MS)


def test_handshake(tmp_path: Path) -> None:
    s = rtt_samples(capture(tmp_path, exchange(4 * MS, 2 * MS)).packets)
    assert s.rtt[s.select("handshake", SERVER)].tolist() == [4 * MS]
    assert s.rtt[s.select("handshake", CLIENT)].tolist() == [2 * MS]


def test_timestamp_echo(tmp_path: Path) -> None:
    s = rtt_samples(capture(tmp_path, exchange(3 * MS, 700 * US, timestamps=True)).packets)
    server = s.select("timestamp", SERVER)
    client = s.select("timestamp", CLIENT)
    # Each new TSval is echoed by the first packet back: the server's ACK, the client's ACK.
    assert len(server) >= 5 and len(client) >= 5
    assert set(s.rtt[server].tolist()) == {3 * MS}
    assert set(s.rtt[client].tolist()) == {700 * US}
    assert len(rtt_samples(capture(tmp_path, exchange(MS, MS)).packets).select("timestamp")) == 0


def test_nothing_to_measure() -> None:
    empty = rtt_samples(PacketTable.empty())
    assert len(empty) == 0 and empty.as_dict() == {}


def test_real_capture_methods_agree(shared_data: Path) -> None:
    read = read_packets(shared_data / "pcap" / "zeek-echo-connections.pcap.gz")
    s = rtt_samples(read.packets)
    summary = s.as_dict()
    for end in ("server", "client"):
        a, b = summary[f"seq_ack/{end}"], summary[f"timestamp/{end}"]
        assert a["samples"] > 1000 and b["samples"] > 1000
        assert abs(a["median_ms"] - b["median_ms"]) <= 0.5 * max(a["median_ms"], b["median_ms"])
    assert np.all(s.rtt >= 0)
