"""The client / Internet path split: constructed cases with known answers, and a live server."""

from __future__ import annotations

import shutil
import socket
import subprocess
import threading
import time

import numpy as np
import pytest

from tacit.diagnosis.tcpinfo import PathSplitParams, _latest, rpc_tcp_stats, split_rpcs
from tacit.formats.ss import MS, parse_ss, read_ss

S = 1_000_000_000
T0 = 1000 * S
HEADER = "State Recv-Q Send-Q Local Address:Port Peer Address:Port\n"
SAMPLES = (
    "1000.0\n" + HEADER + "ESTAB 0 0 10.0.0.1:443 198.51.100.7:5000\n"
    "\t cubic rto:300 rtt:80/10 minrtt:40 cwnd:10 retrans:0/1\n"
    "1000.5\n" + HEADER + "ESTAB 0 0 10.0.0.1:443 198.51.100.7:5000\n"
    "\t cubic rto:600 rtt:120/30 minrtt:40 cwnd:5 retrans:1/3\n"
    "ESTAB 0 0 10.0.0.1:443 198.51.100.8:6000\n"
    "\t cubic rto:204 rtt:2/1 minrtt:1 cwnd:10\n"
)
LOSSY, FINE = "10.0.0.1:443 198.51.100.7:5000", "10.0.0.1:443 198.51.100.8:6000"


def test_constructed_split():
    table = parse_ss(SAMPLES).table
    conns = [LOSSY, FINE, FINE, "10.0.0.1:443 192.0.2.1:1", LOSSY]
    start = np.array([T0 + S // 10, T0 + 6 * S // 10, T0 + 6 * S // 10, T0, T0 - 2 * S])
    end = start + np.array([S // 2, S // 2, S // 2, S, S // 2])
    stats = rpc_tcp_stats(table, conns, start, end)
    assert stats.matched.tolist() == [True, True, True, False, False]
    assert stats.rtt[:3].tolist() == [120 * MS, 2 * MS, 2 * MS]
    assert stats.retransmissions[:3].tolist() == [2, 0, 0]  # 3 - 1 since the sample at start
    first_byte = np.array([1400, 60, 900, 50, 50]) * MS
    server = np.array([10, 50, 5, 10, 10]) * MS
    split = split_rpcs(first_byte, server, stats)
    assert split.bound_names() == ["network", "server", "client", None, None]
    assert split.network[:3].tolist() == [(120 + 2 * 600) * MS, 2 * MS, 2 * MS]
    # first byte - server - RTO with backoff (x7 for 2 retransmissions, x1 for none)
    assert split.client_lower[:3].tolist() == [0, 0, (900 - 5 - 204) * MS]
    assert split.counts() == {"server": 1, "network": 1, "client": 1, "undetermined": 2}
    f = split.features(0)
    assert f["network_bound"] is True and f["server_bound"] is False
    assert f["retransmissions"] == 2 and f["minrtt_ns"] == 40 * MS
    assert split.features(3)["network_bound"] is None and split.features(3)["rtt_ns"] is None
    # A stricter share makes the same RPC server-bound: the threshold is what decides.
    strict = split_rpcs(
        first_byte, np.array([1400, 50, 5, 10, 10]) * MS, stats, PathSplitParams(network_share=0.6)
    )
    assert strict.bound_names()[0] == "server"


def test_without_timestamps_the_last_sample_stands():
    untimed = "\n".join(line for line in SAMPLES.splitlines() if not line[0].isdigit())
    stats = rpc_tcp_stats(parse_ss(untimed).table, [LOSSY], np.array([0]), np.array([1]))
    assert stats.rtt.tolist() == [120 * MS] and stats.retransmissions.tolist() == [3]


def test_latest_sample_against_brute_force():
    rng = np.random.default_rng(3)
    codes = rng.integers(0, 5, 200)
    times = rng.integers(0, 50, 200)
    qcodes = rng.integers(-1, 6, 300)
    qtimes = rng.integers(-5, 55, 300)
    got = _latest(codes, times, qcodes, qtimes)
    for c, t, g in zip(qcodes, qtimes, got, strict=True):
        ok = np.flatnonzero((codes == c) & (times <= t))
        if len(ok) == 0:
            assert g == -1
        else:
            assert times[g] == times[ok].max() and codes[g] == c


def test_live_server_delay_is_server_bound(tmp_path):
    """A loopback server that sleeps 300 ms before answering: ss sampled while the client
    waits must call the RPC server-bound."""
    if shutil.which("ss") is None:
        pytest.skip("ss (iproute2) not installed")
    delay = 0.3
    srv = socket.create_server(("127.0.0.1", 0))
    port = srv.getsockname()[1]
    server_side = {}

    def serve() -> None:
        conn, _ = srv.accept()
        with conn:
            conn.recv(100)
            server_side["recv"] = time.time_ns()
            time.sleep(delay)
            server_side["send"] = time.time_ns()
            conn.sendall(b"x" * 1000)
            server_side["key"] = "{}:{} {}:{}".format(*conn.getsockname(), *conn.getpeername())
            conn.recv(1)

    th = threading.Thread(target=serve)
    th.start()
    cl = socket.create_connection(("127.0.0.1", port))
    sent = time.time_ns()
    cl.sendall(b"GET /slow")
    lines = []
    cl.settimeout(0.05)
    while True:  # sample ss while waiting for the first byte
        lines.append(str(time.time_ns() / 1e9))
        ss = subprocess.run(
            ["ss", "-tin", f"( sport = :{port} )"], capture_output=True, text=True, check=True
        )
        lines.append(ss.stdout)
        try:
            cl.recv(1)
            break
        except TimeoutError:
            continue
    first_byte = time.time_ns() - sent
    cl.sendall(b".")
    th.join()
    cl.close()
    srv.close()
    (tmp_path / "ss.txt").write_text("\n".join(lines))
    table = read_ss(tmp_path / "ss.txt").table
    assert len(table) >= 2
    stats = rpc_tcp_stats(
        table, [server_side["key"]], np.array([sent]), np.array([sent + first_byte])
    )
    assert stats.matched.tolist() == [True]
    server = server_side["send"] - server_side["recv"]
    split = split_rpcs(np.array([first_byte]), np.array([server]), stats)
    assert split.bound_names() == ["server"]
    assert split.network[0] < server / 10
    assert 0 <= split.client_lower[0] < first_byte - server + 1


@pytest.mark.parametrize("text", ["", SAMPLES.split("ESTAB")[0]])
def test_rpcs_without_any_sample_are_unmatched(text):
    """No connection in the ss output (an empty file, a header alone): every RPC unmatched."""
    table = parse_ss(text).table
    stats = rpc_tcp_stats(table, [LOSSY, FINE], np.array([T0, T0]), np.array([T0 + S, T0 + S]))
    assert stats.matched.tolist() == [False, False]
    assert stats.rtt.tolist() == [-1, -1] and stats.retransmissions.tolist() == [-1, -1]
