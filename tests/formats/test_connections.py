"""Connections and client-to-server direction (Pirate §3; tacit.formats.connections)."""

from __future__ import annotations

import numpy as np
import pytest

from pirate_packets import T0, packet_table
from tacit.errors import ConfigError
from tacit.formats.connections import ConnectionRegistry, connections, parse_server
from tacit.formats.pcap import read_packets
from tacit.model.packets import ACK, FIN, SYN, UDP, parse_endpoint


def handshake(client: str, server: str, t: int = T0) -> list[dict]:
    return [
        {"t": t, "src": client, "dst": server, "flags": SYN},
        {"t": t + 10, "src": server, "dst": client, "flags": SYN | ACK},
        {"t": t + 20, "src": client, "dst": server, "flags": ACK},
    ]


def test_handshake_decides_even_against_the_port_rule():
    # The client uses port 80, the server 50000: the port rule would get it wrong.
    rows = handshake("10.0.0.2:80", "10.0.0.1:50000")
    rows.append({"t": T0 + 30, "src": "10.0.0.1:50000", "dst": "10.0.0.2:80", "payload": 9})
    c = connections(packet_table(rows))
    assert c.row_connection.tolist() == [0, 0, 0, 0]
    assert c.to_server.tolist() == [True, False, True, False]
    assert c.table.client(0) == "10.0.0.2:80"
    assert c.table.decided_counts()["handshake"] == 1


def test_syn_ack_alone_decides():
    rows = handshake("10.0.0.2:80", "10.0.0.1:50000")[1:]
    c = connections(packet_table(rows))
    assert c.to_server.tolist() == [False, True]


def test_port_rule_and_first_packet_without_handshake():
    rows = [
        {"t": T0, "src": "10.0.0.1:443", "dst": "10.0.0.2:51000", "payload": 5},
        {"t": T0 + 1, "src": "10.0.0.2:51000", "dst": "10.0.0.1:443", "payload": 5},
        {"t": T0 + 2, "src": "10.0.0.5:7000", "dst": "10.0.0.6:7000", "payload": 5},
        {"t": T0 + 3, "src": "10.0.0.6:7000", "dst": "10.0.0.5:7000", "payload": 5},
    ]
    c = connections(packet_table(rows))
    assert c.row_connection.tolist() == [0, 0, 1, 1]
    assert c.to_server.tolist() == [False, True, True, False]
    assert c.table.server(0) == "10.0.0.1:443"
    assert c.table.client(1) == "10.0.0.5:7000"
    counts = c.table.decided_counts()
    assert counts["port"] == 1 and counts["first_packet"] == 1


def test_a_service_port_names_the_server_even_above_the_client_port():
    # An old stack's ephemeral port 1234 against Redis on 6379: the lower port is the client.
    rows = [
        {"t": T0, "src": "10.0.0.7:1234", "dst": "10.0.0.8:6379", "payload": 14},
        {"t": T0 + 1, "src": "10.0.0.8:6379", "dst": "10.0.0.7:1234", "payload": 7},
    ]
    c = connections(packet_table(rows))
    assert c.table.server(0) == "10.0.0.8:6379"
    assert c.to_server.tolist() == [True, False]
    assert c.table.decided_counts()["port"] == 1


@pytest.mark.parametrize("server", ["10.0.0.2:51000", "51000", "10.0.0.2"])
def test_given_server_overrides_and_excludes_others(server):
    rows = handshake("10.0.0.1:443", "10.0.0.2:51000")  # odd, but the user says so
    rows.append({"t": T0 + 50, "src": "10.0.0.7:1234", "dst": "10.0.0.8:80", "payload": 3})
    reg = ConnectionRegistry(server)
    c = reg.assign(packet_table(rows))
    assert c.to_server[:3].tolist() == [True, False, True]
    assert c.table.decided_counts() == {
        "server": 1,
        "handshake": 0,
        "port": 0,
        "first_packet": 0,
        "not_server": 1,
    }
    assert reg.excluded().tolist() == [False, True]


def test_ipv6_udp_and_other_protocols():
    rows = [
        {"t": T0, "src": "[2001:db8::2]:50000", "dst": "[2001:db8::1]:443", "proto": UDP},
        {"t": T0 + 1, "src": "[2001:db8::1]:443", "dst": "[2001:db8::2]:50000", "proto": UDP},
        {"t": T0 + 2, "src": "[2001:db8::1]:443", "dst": "[2001:db8::2]:50000"},  # TCP: another
        {"t": T0 + 3, "src": "10.0.0.1:0", "dst": "10.0.0.2:0", "proto": 1},  # ICMP
    ]
    c = connections(packet_table(rows))
    assert c.row_connection.tolist() == [0, 0, 1, -1]
    assert c.to_server.tolist() == [True, False, False, False]
    assert c.table.client(0) == "[2001:db8::2]:50000"


def test_registry_keeps_indices_across_batches_in_first_appearance_order():
    a = [{"t": T0 + i, "src": f"10.0.0.{i + 2}:5000{i}", "dst": "10.0.0.1:80"} for i in range(5)]
    whole = connections(packet_table(a + a[::-1]))
    reg = ConnectionRegistry()
    first = reg.assign(packet_table(a[:2]))
    second = reg.assign(packet_table(a[2:] + a[::-1]))
    assert np.array_equal(
        np.concatenate([first.row_connection, second.row_connection]), whole.row_connection
    )


def test_many_connections_grow_the_table():
    rows = [
        {
            "t": T0 + i,
            "src": f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}:40000",
            "dst": "10.255.0.1:80",
        }
        for i in range(5000)
    ]
    c = connections(packet_table(rows + rows))
    assert len(c.table) == 5000
    assert np.array_equal(c.row_connection, np.tile(np.arange(5000), 2))
    found = c.table.find_clients(c.table.client_hi, c.table.client_lo, c.table.client_port)
    assert np.array_equal(found, np.arange(5000))
    assert (
        c.table.find_clients(np.array([0], np.uint64), np.array([1], np.uint64), np.array([1]))[0]
        == -1
    )


def test_parse_server():
    assert parse_server("443") == (None, None, 443)
    assert parse_server("10.0.0.1:80")[2] == 80
    assert parse_server("10.0.0.1")[:2] == parse_endpoint("10.0.0.1")[:2]
    with pytest.raises(ConfigError):
        parse_server("70000")
    with pytest.raises(ConfigError):
        parse_server("0")  # no TCP connection has it
    with pytest.raises(ConfigError):
        parse_server("not-an-address")


def test_real_capture_directions(shared_data):
    packets = read_packets(shared_data / "pcap" / "zeek-http-bro.org.pcap.gz").packets
    c = connections(packets)
    assert set(c.table.decided_counts()) and c.table.decided_counts()["handshake"] == len(c.table)
    # Every client-to-server packet goes to port 80, every other one comes from it.
    assert np.all(packets.dport[c.to_server] == 80)
    assert np.all(packets.sport[~c.to_server & (c.row_connection >= 0)] == 80)
    # SYNs without ACK all travel to the server.
    syn = (packets.tcp_flags & (SYN | ACK)) == SYN
    assert syn.any() and np.all(c.to_server[syn])
    fin = (packets.tcp_flags & FIN) != 0
    assert fin.any()
