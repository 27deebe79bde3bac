"""The ``ss -tin`` reader: constructed lines with known values and real output of this host."""

from __future__ import annotations

import shutil
import socket
import subprocess

import numpy as np
import pytest

from tacit.errors import InputError
from tacit.formats.ss import MS, parse_ss, read_ss

CONSTRUCTED = """\
1714557600.250000001
State Recv-Q Send-Q Local Address:Port Peer Address:Port Process
ESTAB 0      1200   10.0.0.1:443       198.51.100.7:50000
\t cubic wscale:7,7 rto:312 rtt:80.5/10.25 ato:40 mss:1448 cwnd:10 ssthresh:7 bytes_acked:5001 \
bytes_received:300 send 1.5Mbps lastsnd:12 lastrcv:400 lastack:12 retrans:1/4 lost:1 \
minrtt:40.125 newfield:9
ESTAB 0      0      [2001:db8::1]:443  [2001:db8::2]:41000
\t ts sack bbr rto:204 rtt:0.5/0.25 cwnd:20 bytes_acked:1 delivery_rate 2000000bps

Netid State Recv-Q Send-Q Local Address:Port Peer Address:Port
tcp   ESTAB 0      0      10.0.0.1:443       198.51.100.9:1234 cubic rto:1000 rtt:300/150 cwnd:2
0 0 10.0.0.1:443 198.51.100.10:999 reno rto:200 rtt:1/0.5 cwnd:3
"""


def test_constructed_values():
    r = parse_ss(CONSTRUCTED, "c.txt")
    t = r.table
    assert len(t) == 4
    assert r.accounting == {
        "timestamp": 1,
        "header": 2,
        "connection": 4,
        "statistics": 2,
        "blank": 1,
        "unused_tokens": 2,  # wscale and newfield
    }
    assert t.connection_keys() == [
        "10.0.0.1:443 198.51.100.7:50000",
        "[2001:db8::1]:443 [2001:db8::2]:41000",
        "10.0.0.1:443 198.51.100.9:1234",
        "10.0.0.1:443 198.51.100.10:999",
    ]
    assert t.sample.tolist() == [0, 0, 1, 1]  # a headerless line continues its snapshot
    assert t.time.tolist() == [1714557600_250000001, 1714557600_250000001, -1, -1]
    assert t.rtt.tolist() == [80_500_000, 500_000, 300 * MS, 1 * MS]
    assert t.rttvar.tolist() == [10_250_000, 250_000, 150 * MS, 500_000]
    assert t.rto.tolist() == [312 * MS, 204 * MS, 1000 * MS, 200 * MS]
    assert t.minrtt.tolist() == [40_125_000, -1, -1, -1]
    assert t.cwnd.tolist() == [10, 20, 2, 3]
    assert t.ssthresh.tolist() == [7, -1, -1, -1]
    # ss prints retrans, lost, ... only when nonzero: 0 on a row with statistics.
    assert t.retrans_now.tolist() == [1, 0, 0, 0]
    assert t.retrans_total.tolist() == [4, 0, 0, 0]
    assert t.lost.tolist() == [1, 0, 0, 0]
    assert t.send_bps.tolist() == [1_500_000, -1, -1, -1]
    assert t.delivery_bps.tolist() == [-1, 2_000_000, -1, -1]
    assert t.lastrcv[0] == 400 * MS and t.send_q[0] == 1200
    assert [t.name("cc", i) for i in range(4)] == ["cubic", "bbr", "cubic", "reno"]
    assert [t.name("state", i) for i in range(4)] == ["ESTAB", "ESTAB", "ESTAB", None]


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ("ESTAB 0 0 a:1 b:2\n\t rtt:x/1\n", 2, "malformed TCP statistic 'rtt:x/1'"),
        ("ESTAB 0 0 a:1 b:2\n\t cwnd:1.5\n", 2, "malformed TCP statistic 'cwnd:1.5'"),
        ("\t rto:200 rtt:1/1\n", 1, "without a connection line"),
        ("ESTAB 0 0 a:1 b:2\n\t rto:200\n\t rto:200\n", 3, "without a connection line"),
        ("hello world\n", 1, "not an ss line"),
        ("ESTAB x 0 a:1 b:2\n", 1, "not an ss line"),
        ("ESTAB 0 0 a:1 b:2\nESTAB 0 9223372036854775808 a:1 b:2\n", 2, "send_q 92233720"),
        ("ESTAB 0 0 a:1 b:2\n\t cwnd:9223372036854775808\n", 1, "cwnd 9223372036854775808 out"),
    ],
)
def test_bad_lines_name_the_line(text, line, message):
    with pytest.raises(InputError) as e:
        parse_ss(text, "bad.txt")
    assert str(e.value).startswith(f"bad.txt: record line {line}: ")
    assert message in str(e.value)


@pytest.fixture(scope="module")
def quiet_connection():
    """A loopback connection that moved a known number of bytes and is now idle."""
    if shutil.which("ss") is None:
        pytest.skip("ss (iproute2) not installed")
    srv = socket.create_server(("127.0.0.1", 0))
    cl = socket.create_connection(srv.getsockname())
    conn, _ = srv.accept()
    payload = b"y" * 300_000
    conn.sendall(payload)
    got = 0
    while got < len(payload):
        got += len(cl.recv(1 << 16))
    server, client = conn.getsockname(), conn.getpeername()
    yield f"{server[0]}:{server[1]}", f"{client[0]}:{client[1]}", len(payload)
    for s in (cl, conn, srv):
        s.close()


@pytest.mark.parametrize("flags", ["-tin", "-tinO", "-tinHe", "-tien"])
def test_real_ss_output(tmp_path, quiet_connection, flags):
    server, client, sent = quiet_connection
    port = server.rsplit(":", 1)[1]
    text = subprocess.run(
        ["ss", flags, f"( sport = :{port} or dport = :{port} )"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    (tmp_path / "ss.txt").write_text(text)
    r = read_ss(tmp_path / "ss.txt")
    t = r.table
    keys = t.connection_keys()
    assert sorted(keys) == sorted([f"{server} {client}", f"{client} {server}"]), text
    assert r.accounting["connection"] == 2
    s, c = keys.index(f"{server} {client}"), keys.index(f"{client} {server}")
    assert t.bytes_received[c] == sent
    assert t.bytes_sent[s] >= sent
    assert np.all(t.rtt > 0) and np.all(t.rto >= t.rtt) and np.all(t.cwnd > 0)
    assert np.all(t.retrans_total >= 0)
    assert t.cc[0] >= 0 and t.name("cc", 0) == t.name("cc", 1)
