"""WAP5 §4 reconciliation against hand-written strace logs whose true messages are known."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tacit.causal_paths.inputs import read_messages
from tacit.causal_paths.reconcile import ReconcileParams, reconcile
from tacit.errors import ConfigError
from tacit.formats.strace import read_strace
from tacit.model.messages import MISSING, MessageTable
from tacit.model.socket_events import concat_events

DATE = "2024-05-01"
TEN = (1_714_521_600 + 10 * 3600) * 10**9  # 2024-05-01T10:00:00Z in ns
US = 1_000
SKEW = 2_000 * US  # the server's clock runs 2 ms ahead of the client's


def hms(us: int) -> str:
    """A -tt time ``us`` microseconds after 10:00:00."""
    return f"10:00:{us // 1_000_000:02d}.{us % 1_000_000:06d}"


def request(c: str) -> str:
    return f'"GET /{c} HTTP/1.1\\r\\nHost: srv\\r\\n\\r\\n"'  # 30 bytes


def keepalive_logs() -> tuple[str, str]:
    """A client (one process, -tt, no pid prefix) and a threaded server (-f), one keep-alive
    connection, three exchanges: a 30-byte request in one write, a 250-byte response written
    as 150 + 100 and read as 100 + 100 + 50. Exchange k starts at 1 ms + 20 ms k (client)."""
    client = [
        f"{hms(100)} socket(AF_INET, SOCK_STREAM|SOCK_CLOEXEC, IPPROTO_TCP) = 3",
        f"{hms(200)} connect(3, {{sa_family=AF_INET, sin_port=htons(8080), "
        f'sin_addr=inet_addr("10.0.0.2")}}, 16) = 0',
        f'{hms(300)} read(4, "127.0.0.1 localhost\\n", 4096) = 20',
    ]
    server = [
        "[pid  2000] 09:59:59.000000 socket(AF_INET, SOCK_STREAM|SOCK_CLOEXEC, IPPROTO_IP) = 3",
        "[pid  2000] 09:59:59.000100 bind(3, {sa_family=AF_INET, sin_port=htons(8080), "
        'sin_addr=inet_addr("0.0.0.0")}, 16) = 0',
        "[pid  2000] 09:59:59.000200 listen(3, 128) = 0",
        "[pid  2000] 09:59:59.000300 accept4(3,  <unfinished ...>",
        '[pid  2001] 09:59:59.500000 read(4, "# config\\n", 4096) = 9',
        f"[pid  2000] {hms(250 + 2000)} <... accept4 resumed>{{sa_family=AF_INET, "
        'sin_port=htons(45678), sin_addr=inet_addr("10.0.0.1")}, [128 => 16], SOCK_CLOEXEC) = 5',
        f"[pid  2000] {hms(2260)} accept4(3,  <unfinished ...>",
    ]
    for k, c in enumerate("abc"):
        t = 1000 + 20_000 * k
        client += [
            f"{hms(t)} write(3, {request(c)}, 30) = 30",
            f'{hms(t + 8500)} read(3, "HTTP/1.1 200 OK\\r\\nContent-Length"..., 4096) = 100',
            f'{hms(t + 8700)} read(3, "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"..., 4096) = 100',
            f'{hms(t + 8900)} read(3, "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"..., 4096) = 50',
        ]
        server += [
            f"[pid  2001] {hms(t + 1270)} read(5,  <unfinished ...>",
            f"[pid  2001] {hms(t + 2050)} <... read resumed>{request(c)}, 4096) = 30",
            f"[pid  2001] {hms(t + 2100)} read(5, 0x7f00, 4096) = -1 EAGAIN (Resource "
            "temporarily unavailable)",
            f'[pid  2001] {hms(t + 10_000)} write(5, "HTTP/1.1 200 OK\\r\\nContent-Length"..., '
            "150) = 150",
            f'[pid  2001] {hms(t + 10_100)} write(5, "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"..., 100) '
            "= 100",
        ]
    client += [f"{hms(70_000)} close(3) = 0", f"{hms(70_100)} +++ exited with 0 +++"]
    server += [
        f'[pid  2001] {hms(72_050)} read(5, "", 4096) = 0',
        f"[pid  2001] {hms(72_100)} close(5) = 0",
        f"[pid  2000] {hms(80_000)} --- SIGTERM {{si_signo=SIGTERM, si_code=SI_USER}} ---",
        f"[pid  2000] {hms(80_100)} +++ killed by SIGTERM +++",
    ]
    return "\n".join(client) + "\n", "\n".join(server) + "\n"


@pytest.fixture
def logs(tmp_path: Path) -> tuple[Path, Path]:
    client, server = keepalive_logs()
    c = tmp_path / "client.1000.strace"
    s = tmp_path / "server.2000.strace"
    c.write_text(client)
    s.write_text(server)
    return c, s


def rows(m: MessageTable) -> list[tuple]:
    return [
        (
            m.name("src", i),
            m.name("dst", i),
            int(m.send[i]),
            int(m.recv[i]),
            int(m.size[i]),
        )
        for i in range(len(m))
    ]


def expected_keepalive(client_traced: bool = True, server_traced: bool = True) -> list[tuple]:
    c = "client:1000" if client_traced else "10.0.0.1"
    s = "server:2000" if server_traced else "10.0.0.2:8080"
    out = []
    for k in range(3):
        t = TEN + (1000 + 20_000 * k) * US
        out.append(
            (
                c,
                s,
                t if client_traced else MISSING,
                t + 50 * US + SKEW if server_traced else MISSING,
                30,
            )
        )
        out.append(
            (
                s,
                c,
                t + 8_000 * US + SKEW if server_traced else MISSING,
                t + 8_900 * US if client_traced else MISSING,
                250,
            )
        )
    return out


def assert_accounted(acc: dict[str, int]) -> None:
    skipped = sum(n for k, n in acc.items() if k.startswith("skipped: "))
    assert acc["events"] == acc.get("events_used", 0) + acc["lifecycle_events"] + skipped


def test_keepalive_connection_reconciles_to_six_fat_messages(logs):
    c, s = logs
    events = concat_events([read_strace(c, date=DATE), read_strace(s, date=DATE)])
    result = reconcile(events)
    m = result.messages
    assert sorted(rows(m)) == sorted(expected_keepalive())
    assert len(m) == 6
    assert set(m.flow.tolist()) == {int(m.flow[0])}  # one connection, both directions
    eps = {(m.name("src_endpoint", i), m.name("dst_endpoint", i)) for i in range(len(m))}
    assert eps == {("10.0.0.1:45678", "10.0.0.2:8080"), ("10.0.0.2:8080", "10.0.0.1:45678")}
    hosts = {(m.name("src_host", i), m.name("dst_host", i)) for i in range(len(m))}
    assert hosts == {("client", "server"), ("server", "client")}
    acc = result.accounting
    assert acc["tcp connections with both ends traced"] == 1
    assert acc["tcp connections matched by time"] == 1
    assert acc["events_used"] == 3 * (1 + 3) + 3 * (1 + 2)
    assert "unmatched sends" not in acc and "unmatched receives" not in acc
    assert_accounted(acc)
    # record: the line of the message's first write
    first_request = int(np.flatnonzero(m.send == TEN + 1000 * US)[0])
    assert m.record[first_request] == 4


def test_untraced_server_gives_missing_receive_and_send_times(logs):
    c, _ = logs
    result = reconcile(read_strace(c, date=DATE))
    assert sorted(rows(result.messages)) == sorted(expected_keepalive(server_traced=False))
    m = result.messages
    assert {m.name("dst_host", i) for i in range(len(m)) if m.name("src", i) == "client:1000"} == {
        "10.0.0.2"
    }
    assert result.accounting["sends to untraced peers"] == 3
    assert result.accounting["receives from untraced peers"] == 3
    assert_accounted(result.accounting)


@pytest.mark.parametrize(
    ("aggregation", "client"),
    [("ip", "10.0.0.1"), ("all", "clients"), ("none", "10.0.0.1:45678")],
)
def test_untraced_clients_are_aggregated(logs, aggregation, client):
    _, s = logs
    result = reconcile(read_strace(s, date=DATE), ReconcileParams(client_aggregation=aggregation))
    expected = [
        tuple(client if x == "10.0.0.1" else x for x in row)
        for row in expected_keepalive(client_traced=False)
    ]
    assert sorted(rows(result.messages)) == sorted(expected)
    m = result.messages
    assert {m.name("src_host", i) for i in range(len(m)) if m.name("dst", i) == "server:2000"} == {
        "10.0.0.1"
    }


def test_connect_outside_tolerance_is_not_paired(logs):
    c, s = logs
    events = concat_events([read_strace(c, date=DATE), read_strace(s, date=DATE)])
    result = reconcile(events, ReconcileParams(connect_tolerance_ns=1_000 * US))  # < 2 ms skew
    assert "tcp connections with both ends traced" not in result.accounting
    assert len(result.messages) == 12  # each end on its own, the peer untraced
    assert_accounted(result.accounting)


def test_read_messages_dispatches_and_accounts(logs, tmp_path):
    messages, acc = read_messages([tmp_path], date=DATE)
    assert sorted(rows(messages)) == sorted(expected_keepalive())
    assert acc["files"] == 2
    assert acc["input lines"] == acc["input event"] + sum(
        n
        for k, n in acc.items()
        if k.startswith("input ") and k not in ("input lines", "input event")
    )
    assert acc["input unfinished at end of log"] == 1  # the second accept4 never returned
    assert acc["messages"] == 6


def test_params_are_checked():
    with pytest.raises(ConfigError):
        ReconcileParams(client_aggregation="hosts")


# --- exact 4-tuples (-yy) ---------------------------------------------------------------------

T0 = 1_714_557_600  # epoch seconds for -ttt logs


def ttt(us: int) -> str:
    return f"{T0 + us // 1_000_000}.{us % 1_000_000:06d}"


def tcp(local: int, remote: int) -> str:
    return f"TCP:[10.0.0.1:{local}->10.0.0.2:80]"


def rtcp(local: int, remote: int) -> str:
    return f"TCP:[10.0.0.2:80->10.0.0.1:{remote}]"


def test_yy_four_tuples_pair_connections_exactly(tmp_path):
    """Two connections 1 ms apart, accepted in the opposite order, 300 ms of skew: time order
    alone would cross them, the 4-tuples do not."""
    client = [
        f"{ttt(0)} socket(AF_INET, SOCK_STREAM, IPPROTO_TCP) = 3<TCP:[1001]>",
        f"{ttt(10)} connect(3<TCP:[1001]>, {{sa_family=AF_INET, sin_port=htons(80), "
        'sin_addr=inet_addr("10.0.0.2")}, 16) = 0',
        f"{ttt(20)} socket(AF_INET, SOCK_STREAM, IPPROTO_TCP) = 4<TCP:[1002]>",
        f"{ttt(1010)} connect(4<TCP:[1002]>, {{sa_family=AF_INET, sin_port=htons(80), "
        'sin_addr=inet_addr("10.0.0.2")}, 16) = 0',
        f'{ttt(2000)} write(3<{tcp(50001, 80)}>, "aaaaaaaaaa", 10) = 10',
        f'{ttt(2100)} write(4<{tcp(50002, 80)}>, "bbbbbbbbbbb", 11) = 11',
        f'{ttt(9000)} read(4<{tcp(50002, 80)}>, "BBBBBBBBBBBBBBBBBBBBB", 64) = 21',
        f'{ttt(9100)} read(3<{tcp(50001, 80)}>, "AAAAAAAAAAAAAAAAAAAA", 64) = 20',
    ]
    skew = 300_000
    server = [
        f"{ttt(skew + 1100)} accept(3<TCP:[10.0.0.2:80]>, {{sa_family=AF_INET, "
        f'sin_port=htons(50002), sin_addr=inet_addr("10.0.0.1")}}, [16]) = 5<{rtcp(80, 50002)}>',
        f"{ttt(skew + 1200)} accept(3<TCP:[10.0.0.2:80]>, {{sa_family=AF_INET, "
        f'sin_port=htons(50001), sin_addr=inet_addr("10.0.0.1")}}, [16]) = 6<{rtcp(80, 50001)}>',
        f'{ttt(skew + 2500)} read(6<{rtcp(80, 50001)}>, "aaaaaaaaaa", 64) = 10',
        f'{ttt(skew + 2600)} read(5<{rtcp(80, 50002)}>, "bbbbbbbbbbb", 64) = 11',
        f'{ttt(skew + 8000)} write(5<{rtcp(80, 50002)}>, "BBBBBBBBBBBBBBBBBBBBB", 21) = 21',
        f'{ttt(skew + 8100)} write(6<{rtcp(80, 50001)}>, "AAAAAAAAAAAAAAAAAAAA", 20) = 20',
    ]
    (tmp_path / "c.7.strace").write_text("\n".join(client) + "\n")
    (tmp_path / "s.8.strace").write_text("\n".join(server) + "\n")
    messages, acc = read_messages([tmp_path])
    base = T0 * 10**9
    assert sorted(rows(messages)) == sorted(
        [
            ("c:7", "s:8", base + 2000 * US, base + (skew + 2500) * US, 10),
            ("c:7", "s:8", base + 2100 * US, base + (skew + 2600) * US, 11),
            ("s:8", "c:7", base + (skew + 8000) * US, base + 9000 * US, 21),
            ("s:8", "c:7", base + (skew + 8100) * US, base + 9100 * US, 20),
        ]
    )
    assert acc["tcp connections matched exactly"] == 2
    flows = {int(messages.size[i]): int(messages.flow[i]) for i in range(len(messages))}
    assert flows[10] == flows[20] != flows[11] == flows[21]
    eps = {int(messages.size[i]): messages.name("src_endpoint", i) for i in range(len(messages))}
    assert eps == {10: "10.0.0.1:50001", 11: "10.0.0.1:50002", 20: "10.0.0.2:80", 21: "10.0.0.2:80"}


def test_ends_traced_from_mid_connection_are_aligned_by_runs(tmp_path):
    """strace attached to running processes: no connect or accept; the server's log starts one
    exchange before the client's. The run sizes line the two byte streams up."""
    c, s = "TCP:[10.0.0.1:50001->10.0.0.2:80]", "TCP:[10.0.0.2:80->10.0.0.1:50001]"
    server, client = [], []
    for k, (req, resp) in enumerate([(10, 100), (12, 120), (14, 140)]):
        t = 10_000 * k
        server += [
            f'{ttt(t + 100)} read(7<{s}>, "{"q" * req}", 512) = {req}',
            f'{ttt(t + 200)} write(7<{s}>, "{"r" * 32}"..., {resp}) = {resp}',
        ]
        if k:
            client += [
                f'{ttt(t)} write(3<{c}>, "{"q" * req}", {req}) = {req}',
                f'{ttt(t + 300)} read(3<{c}>, "{"r" * 32}"..., 512) = {resp}',
            ]
    (tmp_path / "c.1.strace").write_text("\n".join(client) + "\n")
    (tmp_path / "s.2.strace").write_text("\n".join(server) + "\n")
    messages, acc = read_messages([tmp_path])
    base = T0 * 10**9
    assert sorted(rows(messages), key=lambda r: r[2] if r[2] != MISSING else r[3]) == [
        ("c:1", "s:2", MISSING, base + 100 * US, 10),  # before the client's log starts
        ("s:2", "c:1", base + 200 * US, MISSING, 100),
        ("c:1", "s:2", base + 10_000 * US, base + 10_100 * US, 12),
        ("s:2", "c:1", base + 10_200 * US, base + 10_300 * US, 120),
        ("c:1", "s:2", base + 20_000 * US, base + 20_100 * US, 14),
        ("s:2", "c:1", base + 20_200 * US, base + 20_300 * US, 140),
    ]
    assert acc["unmatched sends"] == 1 and acc["unmatched receives"] == 1
    assert "tcp connections not aligned" not in acc
    assert_accounted(acc)


# --- datagrams ----------------------------------------------------------------------------------

DNS = "10.0.0.2"


def payload(i: int, kind: str = "q") -> bytes:
    """A 29-byte DNS-like query (or answer) with id 0x12 0x3i."""
    flags = b"\x01\x00" if kind == "q" else b"\x81\x80"
    return (
        b"\x12"
        + bytes([0x30 + i])
        + flags
        + b"\x00\x01"
        + b"\x00" * 6
        + (b"\x07example\x03com\x00\x00\x01\x00\x01")
    )


def printed_default(data: bytes) -> str:
    """``data`` as strace prints it by default: C escapes, octal for other unprintables."""
    out = []
    for i, b in enumerate(data):
        if 32 <= b < 127 and chr(b) not in '"\\':
            out.append(chr(b))
        else:
            nxt = data[i + 1 : i + 2]
            out.append(f"\\{b:03o}" if nxt.isdigit() else f"\\{b:o}")
    return '"' + "".join(out) + '"'


def printed_xx(data: bytes) -> str:
    """``data`` as ``strace -xx`` prints it: every byte in hex."""
    return '"' + "".join(f"\\x{b:02x}" for b in data) + '"'


def addr(ip: str, port: int) -> str:
    return f'{{sa_family=AF_INET, sin_port=htons({port}), sin_addr=inet_addr("{ip}")}}'


def dns_logs() -> tuple[str, str]:
    """Five queries, 10 ms apart, from an unbound client socket; the server's clock is 1 ms
    behind. q2 is overtaken by q3 and then delivered twice, q4 is lost, q1 is answered; q5
    goes by sendmsg/recvmsg."""
    ms = 1000
    client = [f"{ttt(0)} socket(AF_INET, SOCK_DGRAM|SOCK_CLOEXEC|SOCK_NONBLOCK, IPPROTO_IP) = 3"]
    for i in range(1, 5):
        client.append(
            f"{ttt(i * 10 * ms)} sendto(3, {printed_xx(payload(i))}, 29, MSG_NOSIGNAL, "
            f"{addr(DNS, 53)}, 16) = 29"
        )
    client.insert(
        2,
        f"{ttt(10 * ms + 700)} recvfrom(3, {printed_xx(payload(1, 'a'))}, 512, 0, "
        f"{addr(DNS, 53)}, [28 => 16]) = 29",
    )
    client.append(
        f"{ttt(50 * ms)} sendmsg(3, {{msg_name={addr(DNS, 53)}, msg_namelen=16, "
        f"msg_iov=[{{iov_base={printed_xx(payload(5))}, iov_len=29}}], msg_iovlen=1, "
        "msg_controllen=0, msg_flags=0}, 0) = 29"
    )
    client.append(f"{ttt(60 * ms)} close(3) = 0")
    src = addr("10.0.0.1", 40001)

    def recv(us: int, i: int) -> str:
        return (
            f"{ttt(us - ms)} recvfrom(3, {printed_default(payload(i))}, 512, 0, {src}, [16]) = 29"
        )

    server = [
        f"{ttt(0)} socket(AF_INET, SOCK_DGRAM, IPPROTO_UDP) = 3",
        f"{ttt(1)} bind(3, {addr('0.0.0.0', 53)}, 16) = 0",
        recv(10 * ms + 300, 1),
        f"{ttt(10 * ms + 400 - ms)} sendto(3, {printed_default(payload(1, 'a'))}, 29, 0, {src}, "
        "16) = 29",
        f"{ttt(20 * ms)} recvfrom(3, 0x7ffc, 512, 0, 0x7ffd, [16]) = -1 EAGAIN (Resource "
        "temporarily unavailable)",
        recv(30 * ms + 300, 3),
        recv(30 * ms + 400, 2),
        recv(30 * ms + 500, 2),
        f"{ttt(50 * ms + 300 - ms)} recvmsg(3, {{msg_name={src}, msg_namelen=16, "
        f"msg_iov=[{{iov_base={printed_default(payload(5))}, iov_len=512}}], msg_iovlen=1, "
        "msg_controllen=0, msg_flags=0}, 0) = 29",
        f"{ttt(70 * ms)} +++ exited with 0 +++",
    ]
    return "\n".join(client) + "\n", "\n".join(server) + "\n"


def test_datagrams_loss_duplication_reordering(tmp_path):
    client, server = dns_logs()
    (tmp_path / "dnsc.3000.strace").write_text(client)
    (tmp_path / "dnss.4000.strace").write_text(server)
    messages, acc = read_messages([tmp_path])
    base, ms = T0 * 10**9, 10**6
    c, s = "dnsc:3000", "dnss:4000"
    assert sorted(rows(messages)) == sorted(
        [
            (c, s, base + 10 * ms, base + 10 * ms + 300 * US - ms, 29),  # q1
            (s, c, base + 10 * ms + 400 * US - ms, base + 10 * ms + 700 * US, 29),  # its answer
            (c, s, base + 20 * ms, base + 30 * ms + 400 * US - ms, 29),  # q2, overtaken
            (c, s, base + 30 * ms, base + 30 * ms + 300 * US - ms, 29),  # q3
            (c, s, base + 40 * ms, MISSING, 29),  # q4, lost
            (c, s, base + 50 * ms, base + 50 * ms + 300 * US - ms, 29),  # q5
        ]
    )
    assert acc["udp lost"] == 1
    assert acc["udp duplicated"] == 1
    assert acc["udp reordered"] == 1
    assert acc["unmatched sends"] == 1
    assert "receives from untraced peers" not in acc
    assert len(set(messages.flow.tolist())) == 1  # queries and answers share the socket pair
    eps = {(messages.name("src_endpoint", i), messages.name("dst_endpoint", i)) for i in range(6)}
    assert eps == {("10.0.0.1:40001", "10.0.0.2:53"), ("10.0.0.2:53", "10.0.0.1:40001")}
    assert_accounted(acc)


def test_datagrams_to_untraced_server_are_one_sided(tmp_path):
    client, _ = dns_logs()
    (tmp_path / "dnsc.3000.strace").write_text(client)
    messages, acc = read_messages([tmp_path])
    assert len(messages) == 6
    assert acc["sends to untraced peers"] == 5
    assert acc["receives from untraced peers"] == 1
    assert "udp lost" not in acc
    assert set(messages.node_names()) == {"dnsc:3000", "10.0.0.2:53"}


# --- many connections, random splits ------------------------------------------------------------


def split(rng: np.random.Generator, total: int, parts: int) -> list[int]:
    """``total`` bytes in ``parts`` positive pieces."""
    parts = min(parts, total)
    cuts = np.sort(rng.choice(np.arange(1, total), size=parts - 1, replace=False))
    return np.diff(np.r_[0, cuts, total]).tolist()


def test_random_conversations_reconcile_to_the_truth(tmp_path):
    """Forty connections one after another on a reused client fd, each with 1-5 exchanges whose
    requests and responses are written and read in random pieces, served by two worker threads
    on a clock 5 ms ahead: every message comes back with its exact times and size."""
    rng = np.random.default_rng(7)
    skew = 5_000
    client = [f"{ttt(0)} socket(AF_INET, SOCK_STREAM, IPPROTO_TCP) = 3"]
    server = [
        f"[pid  900] {ttt(0)} socket(AF_INET, SOCK_STREAM, IPPROTO_TCP) = 3",
        f"[pid  900] {ttt(1)} bind(3, {addr('0.0.0.0', 8080)}, 16) = 0",
        f"[pid  900] {ttt(2)} listen(3, 128) = 0",
    ]
    truth = []
    t = 100
    for conn in range(40):
        fd = 10 + conn % 3
        worker = 901 + conn % 2
        if conn:
            client.append(f"{ttt(t)} socket(AF_INET, SOCK_STREAM, IPPROTO_TCP) = 3")
        client.append(f"{ttt(t + 1)} connect(3, {addr('10.0.0.2', 8080)}, 16) = 0")
        server.append(
            f"[pid  900] {ttt(t + 50 + skew)} accept(3, {addr('10.0.0.1', 40000 + conn)}, [16]) "
            f"= {fd}"
        )
        t += 100
        for _ in range(int(rng.integers(1, 6))):
            for sender, receiver, sfd, rfd, s_skew, r_skew in (
                (client, server, 3, fd, 0, skew),
                (server, client, fd, 3, skew, 0),
            ):
                size = int(rng.integers(1, 3000))
                prefix = "" if sender is client else f"[pid  {worker}] "
                rprefix = "" if receiver is client else f"[pid  {worker}] "
                first_write = t
                for n in split(rng, size, int(rng.integers(1, 4))):
                    sender.append(f'{prefix}{ttt(t + s_skew)} write({sfd}, "x"..., {n}) = {n}')
                    t += 10
                t += 100
                for n in split(rng, size, int(rng.integers(1, 5))):
                    receiver.append(f'{rprefix}{ttt(t + r_skew)} read({rfd}, "x"..., 65536) = {n}')
                    last_read = t
                    t += 10
                t += 100
                src, dst = ("c:1", "s:2") if sender is client else ("s:2", "c:1")
                truth.append((src, dst, first_write + s_skew, last_read + r_skew, size))
        client.append(f"{ttt(t)} close(3) = 0")
        server.append(f"[pid  {worker}] {ttt(t + 50 + skew)} close({fd}) = 0")
        t += 1000
    (tmp_path / "c.1.strace").write_text("\n".join(client) + "\n")
    (tmp_path / "s.2.strace").write_text("\n".join(server) + "\n")
    messages, acc = read_messages([tmp_path])
    base = T0 * 10**9
    expected = [(a, b, base + s * US, base + r * US, n) for a, b, s, r, n in truth]
    assert sorted(rows(messages)) == sorted(expected)
    assert acc["tcp connections with both ends traced"] == 40
    assert len(set(messages.flow.tolist())) == 40
    assert_accounted(acc)


def test_unaligned_ends_keep_the_senders_view(tmp_path):
    """Both ends traced from mid-connection and nothing in common to align by: each direction
    comes from its sender, the receiver's reads are skipped and counted."""
    c, s = "TCP:[10.0.0.1:50001->10.0.0.2:80]", "TCP:[10.0.0.2:80->10.0.0.1:50001]"
    client = [f'{ttt(0)} write(3<{c}>, "q", 7) = 7', f'{ttt(500)} read(3<{c}>, "r", 99) = 9']
    server = [f'{ttt(100)} read(4<{s}>, "q", 99) = 5', f'{ttt(200)} write(4<{s}>, "r", 11) = 11']
    (tmp_path / "c.1.strace").write_text("\n".join(client) + "\n")
    (tmp_path / "s.2.strace").write_text("\n".join(server) + "\n")
    messages, acc = read_messages([tmp_path])
    base = T0 * 10**9
    assert sorted(rows(messages)) == [
        ("c:1", "s:2", base, MISSING, 7),
        ("s:2", "c:1", base + 200 * US, MISSING, 11),
    ]
    assert acc["tcp connections not aligned"] == 1
    assert acc["skipped: receive on an unaligned connection"] == 2
    assert_accounted(acc)


# --- real strace 6.1 output ---------------------------------------------------------------------
# A threaded Python HTTP server (traced with -f -tt -T -yy) and a keep-alive client (-f -tt -T,
# no -yy) on one host over loopback: 3 requests of 28 bytes, responses of 40 + 100 bytes written
# in two sends and read in 37-byte pieces; then 3 UDP queries and answers. The tail of each log
# from just before the first socket: the Python start-up before it reads files only.

REAL_SERVER = (
    "26644 22:20:54.018162 read(3</root/.pyenv/versions/3.11.7/lib/python3.11/lib-dynload/arr"
    'ay.cpython-311-x86_64-linux-gnu.so>, "\\177ELF\\2\\1\\1\\0\\0\\0\\0\\0\\0\\0\\0\\0\\3\\0'
    '>\\0\\1\\0\\0\\0\\0\\0\\0\\0\\0\\0\\0\\0"..., 832) = 832 <0.000015>\n'
    "26644 22:20:54.018428 close(3</root/.pyenv/versions/3.11.7/lib/python3.11/lib-dynload/ar"
    "ray.cpython-311-x86_64-linux-gnu.so>) = 0 <0.000012>\n"
    "26644 22:20:54.018747 socket(AF_INET, SOCK_STREAM|SOCK_CLOEXEC, IPPROTO_IP) ="
    " 3<TCP:[28105]> <0.000026>\n"
    "26644 22:20:54.021960 setsockopt(3<TCP:[28105]>, SOL_SOCKET, SO_REUSEADDR, [1], 4) = 0"
    " <0.000021>\n"
    "26644 22:20:54.022770 bind(3<TCP:[28105]>, {sa_family=AF_INET, sin_port=htons(18081),"
    ' sin_addr=inet_addr("127.0.0.1")}, 16) = 0 <0.000024>\n'
    "26644 22:20:54.023412 listen(3<TCP:[127.0.0.1:18081]>, 128) = 0 <0.000020>\n"
    "26644 22:20:54.024020 accept4(3<TCP:[127.0.0.1:18081]>, {sa_family=AF_INET,"
    ' sin_port=htons(36584), sin_addr=inet_addr("127.0.0.1")}, [16], SOCK_CLOEXEC) ='
    " 4<TCP:[127.0.0.1:18081->127.0.0.1:36584]> <0.935689>\n"
    "26644 22:20:54.960494 getsockname(4<TCP:[127.0.0.1:18081->127.0.0.1:36584]>,"
    ' {sa_family=AF_INET, sin_port=htons(18081), sin_addr=inet_addr("127.0.0.1")}, [128 =>'
    " 16]) = 0 <0.000014>\n"
    '26729 22:20:54.961242 recvfrom(4<TCP:[127.0.0.1:18081->127.0.0.1:36584]>, "GET /0'
    ' HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n", 4096, 0, NULL, NULL) = 28 <0.000016>\n'
    '26729 22:20:54.961324 sendto(4<TCP:[127.0.0.1:18081->127.0.0.1:36584]>, "HTTP/1.1 200'
    ' OK\\r\\nContent-Length:"..., 40, 0, NULL, 0) = 40 <0.000028>\n'
    "26729 22:20:54.961371 sendto(4<TCP:[127.0.0.1:18081->127.0.0.1:36584]>,"
    ' "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"..., 100, 0, NULL, 0) = 100 <0.000010>\n'
    '26729 22:20:54.961397 recvfrom(4<TCP:[127.0.0.1:18081->127.0.0.1:36584]>, "GET /1'
    ' HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n", 4096, 0, NULL, NULL) = 28 <0.000153>\n'
    '26729 22:20:54.961576 sendto(4<TCP:[127.0.0.1:18081->127.0.0.1:36584]>, "HTTP/1.1 200'
    ' OK\\r\\nContent-Length:"..., 40, 0, NULL, 0) = 40 <0.000012>\n'
    "26729 22:20:54.961605 sendto(4<TCP:[127.0.0.1:18081->127.0.0.1:36584]>,"
    ' "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"..., 100, 0, NULL, 0) = 100 <0.000005>\n'
    '26729 22:20:54.961625 recvfrom(4<TCP:[127.0.0.1:18081->127.0.0.1:36584]>, "GET /2'
    ' HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n", 4096, 0, NULL, NULL) = 28 <0.040733>\n'
    '26729 22:20:55.002470 sendto(4<TCP:[127.0.0.1:18081->127.0.0.1:36584]>, "HTTP/1.1 200'
    ' OK\\r\\nContent-Length:"..., 40, 0, NULL, 0) = 40 <0.000021>\n'
    "26729 22:20:55.002534 sendto(4<TCP:[127.0.0.1:18081->127.0.0.1:36584]>,"
    ' "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"..., 100, 0, NULL, 0) = 100 <0.000008>\n'
    '26729 22:20:55.002570 recvfrom(4<TCP:[127.0.0.1:18081->127.0.0.1:36584]>, "", 4096, 0,'
    " NULL, NULL) = 0 <0.043773>\n"
    "26729 22:20:55.046461 close(4<TCP:[127.0.0.1:18081->127.0.0.1:36584]>) = 0 <0.000030>\n"
    "26644 22:20:55.046739 socket(AF_INET, SOCK_DGRAM|SOCK_CLOEXEC, IPPROTO_IP) ="
    " 4<UDP:[29067]> <0.000034>\n"
    "26644 22:20:55.046880 bind(4<UDP:[29067]>, {sa_family=AF_INET, sin_port=htons(18081),"
    ' sin_addr=inet_addr("127.0.0.1")}, 16) = 0 <0.000012>\n'
    "26644 22:20:55.046980 recvfrom(4<UDP:[127.0.0.1:18081]>,  <unfinished ...>\n"
    "26729 22:20:55.047015 +++ exited with 0 +++\n"
    '26644 22:20:55.246863 <... recvfrom resumed>"query 0", 512, 0, {sa_family=AF_INET,'
    ' sin_port=htons(46057), sin_addr=inet_addr("127.0.0.1")}, [16]) = 7 <0.199837>\n'
    '26644 22:20:55.247028 sendto(4<UDP:[127.0.0.1:18081]>, "answer:query 0", 14, 0,'
    ' {sa_family=AF_INET, sin_port=htons(46057), sin_addr=inet_addr("127.0.0.1")}, 16) = 14'
    " <0.000049>\n"
    '26644 22:20:55.247122 recvfrom(4<UDP:[127.0.0.1:18081]>, "query 1", 512, 0,'
    ' {sa_family=AF_INET, sin_port=htons(46057), sin_addr=inet_addr("127.0.0.1")}, [16]) = 7'
    " <0.000040>\n"
    '26644 22:20:55.247235 sendto(4<UDP:[127.0.0.1:18081]>, "answer:query 1", 14, 0,'
    ' {sa_family=AF_INET, sin_port=htons(46057), sin_addr=inet_addr("127.0.0.1")}, 16) = 14'
    " <0.000013>\n"
    '26644 22:20:55.247283 recvfrom(4<UDP:[127.0.0.1:18081]>, "query 2", 512, 0,'
    ' {sa_family=AF_INET, sin_port=htons(46057), sin_addr=inet_addr("127.0.0.1")}, [16]) = 7'
    " <0.000047>\n"
    '26644 22:20:55.247370 sendto(4<UDP:[127.0.0.1:18081]>, "answer:query 2", 14, 0,'
    ' {sa_family=AF_INET, sin_port=htons(46057), sin_addr=inet_addr("127.0.0.1")}, 16) = 14'
    " <0.000013>\n"
    "26644 22:20:55.253998 getsockname(3<TCP:[127.0.0.1:18081]>, {sa_family=AF_INET,"
    ' sin_port=htons(18081), sin_addr=inet_addr("127.0.0.1")}, [16]) = 0 <0.000009>\n'
    "26644 22:20:55.257993 getpeername(3<TCP:[127.0.0.1:18081]>, 0x7fff296e1b30, [16]) = -1"
    " ENOTCONN (Transport endpoint is not connected) <0.000009>\n"
    "26644 22:20:55.258102 close(3<TCP:[127.0.0.1:18081]>) = 0 <0.000024>\n"
    "26644 22:20:55.258181 getsockname(4<UDP:[127.0.0.1:18081]>, {sa_family=AF_INET,"
    ' sin_port=htons(18081), sin_addr=inet_addr("127.0.0.1")}, [16]) = 0 <0.000005>\n'
    "26644 22:20:55.258217 getpeername(4<UDP:[127.0.0.1:18081]>, 0x7fff296e1b30, [16]) = -1"
    " ENOTCONN (Transport endpoint is not connected) <0.000004>\n"
    "26644 22:20:55.258248 close(4<UDP:[127.0.0.1:18081]>) = 0 <0.000008>\n"
    "26644 22:20:55.263706 +++ exited with 0 +++\n"
)


REAL_CLIENT = (
    '26688 22:20:54.958545 read(3, "\\177ELF\\2\\1\\1\\0\\0\\0\\0\\0\\0\\0\\0\\0\\3\\0>\\0\\1'
    '\\0\\0\\0\\0\\0\\0\\0\\0\\0\\0\\0"..., 832) = 832 <0.000005>\n'
    "26688 22:20:54.958649 close(3)          = 0 <0.000004>\n"
    "26688 22:20:54.959504 socket(AF_INET, SOCK_STREAM|SOCK_CLOEXEC, IPPROTO_TCP) = 3"
    " <0.000019>\n"
    "26688 22:20:54.959567 connect(3, {sa_family=AF_INET, sin_port=htons(18081),"
    ' sin_addr=inet_addr("127.0.0.1")}, 16) = 0 <0.000127>\n'
    '26688 22:20:54.959743 sendto(3, "GET /0 HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n", 28, 0,'
    " NULL, 0) = 28 <0.000024>\n"
    '26688 22:20:54.959867 recvfrom(3, "HTTP/1.1 200 OK\\r\\nContent-Length:"..., 37, 0,'
    " NULL, NULL) = 37 <0.001500>\n"
    '26688 22:20:54.961436 recvfrom(3, "\\n\\r\\nxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"..., 37, 0,'
    " NULL, NULL) = 37 <0.000007>\n"
    '26688 22:20:54.961469 recvfrom(3, "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"..., 37, 0, NULL,'
    " NULL) = 37 <0.000006>\n"
    '26688 22:20:54.961492 recvfrom(3, "xxxxxxxxxxxxxxxxxxxxxxxxxxxxx", 37, 0, NULL, NULL) ='
    " 29 <0.000006>\n"
    '26688 22:20:54.961522 sendto(3, "GET /1 HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n", 28, 0,'
    " NULL, 0) = 28 <0.000025>\n"
    '26688 22:20:54.961567 recvfrom(3, "HTTP/1.1 200 OK\\r\\nContent-Length:"..., 37, 0,'
    " NULL, NULL) = 37 <0.000032>\n"
    '26688 22:20:54.961619 recvfrom(3, "\\n\\r\\n", 37, 0, NULL, NULL) = 3 <0.000006>\n'
    '26688 22:20:54.961655 recvfrom(3, "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"..., 37, 0, NULL,'
    " NULL) = 37 <0.040385>\n"
    '26688 22:20:55.002167 recvfrom(3, "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"..., 37, 0, NULL,'
    " NULL) = 37 <0.000010>\n"
    '26688 22:20:55.002219 recvfrom(3, "xxxxxxxxxxxxxxxxxxxxxxxxxx", 37, 0, NULL, NULL) = 26'
    " <0.000006>\n"
    '26688 22:20:55.002258 sendto(3, "GET /2 HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n", 28, 0,'
    " NULL, 0) = 28 <0.000043>\n"
    '26688 22:20:55.002343 recvfrom(3, "HTTP/1.1 200 OK\\r\\nContent-Length:"..., 37, 0,'
    " NULL, NULL) = 37 <0.000182>\n"
    '26688 22:20:55.002553 recvfrom(3, "\\n\\r\\n", 37, 0, NULL, NULL) = 3 <0.000007>\n'
    '26688 22:20:55.002582 recvfrom(3, "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"..., 37, 0, NULL,'
    " NULL) = 37 <0.043440>\n"
    '26688 22:20:55.046158 recvfrom(3, "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"..., 37, 0, NULL,'
    " NULL) = 37 <0.000015>\n"
    '26688 22:20:55.046222 recvfrom(3, "xxxxxxxxxxxxxxxxxxxxxxxxxx", 37, 0, NULL, NULL) = 26'
    " <0.000013>\n"
    "26688 22:20:55.046294 close(3)          = 0 <0.000032>\n"
    "26688 22:20:55.246584 socket(AF_INET, SOCK_DGRAM|SOCK_CLOEXEC, IPPROTO_IP) = 3"
    " <0.000030>\n"
    '26688 22:20:55.246713 sendto(3, "query 0", 7, 0, {sa_family=AF_INET,'
    ' sin_port=htons(18081), sin_addr=inet_addr("127.0.0.1")}, 16) = 7 <0.000059>\n'
    '26688 22:20:55.246976 recvfrom(3, "answer:query 0", 512, 0, {sa_family=AF_INET,'
    ' sin_port=htons(18081), sin_addr=inet_addr("127.0.0.1")}, [16]) = 14 <0.000120>\n'
    '26688 22:20:55.247150 sendto(3, "query 1", 7, 0, {sa_family=AF_INET,'
    ' sin_port=htons(18081), sin_addr=inet_addr("127.0.0.1")}, 16) = 7 <0.000019>\n'
    '26688 22:20:55.247222 recvfrom(3, "answer:query 1", 512, 0, {sa_family=AF_INET,'
    ' sin_port=htons(18081), sin_addr=inet_addr("127.0.0.1")}, [16]) = 14 <0.000050>\n'
    '26688 22:20:55.247310 sendto(3, "query 2", 7, 0, {sa_family=AF_INET,'
    ' sin_port=htons(18081), sin_addr=inet_addr("127.0.0.1")}, 16) = 7 <0.000017>\n'
    '26688 22:20:55.247365 recvfrom(3, "answer:query 2", 512, 0, {sa_family=AF_INET,'
    ' sin_port=htons(18081), sin_addr=inet_addr("127.0.0.1")}, [16]) = 14 <0.000035>\n'
    "26688 22:20:55.252758 getsockname(3, {sa_family=AF_INET, sin_port=htons(46057),"
    ' sin_addr=inet_addr("0.0.0.0")}, [16]) = 0 <0.001164>\n'
    "26688 22:20:55.254062 getpeername(3, 0x7fff3bcbf5d0, [16]) = -1 ENOTCONN (Transport"
    " endpoint is not connected) <0.000016>\n"
    "26688 22:20:55.254166 close(3)          = 0 <0.000027>\n"
    "26688 22:20:55.265658 +++ exited with 0 +++\n"
)


def test_real_strace_output(tmp_path):
    (tmp_path / "h.200.strace").write_text(REAL_SERVER)
    (tmp_path / "h.100.strace").write_text(REAL_CLIENT)
    messages, acc = read_messages([tmp_path], date=DATE)
    day = (1_714_521_600 + 22 * 3600 + 20 * 60) * 10**9  # 22:20 on the date

    def t(seconds: str) -> int:
        whole, frac = seconds.split(".")
        return day + int(whole) * 10**9 + int(frac) * 1000

    got = rows(messages)
    assert got[:2] == [
        ("h:100", "h:200", t("54.959743"), t("54.961258"), 28),  # 54.961242 + 16 us (-T)
        ("h:200", "h:100", t("54.961324"), t("54.961498"), 140),  # the 4th read: 54.961492 + 6
    ]
    assert [r[4] for r in got] == [28, 140] * 3 + [7, 14] * 3
    assert all(r[2] <= r[3] for r in got)  # one clock: every message arrives after it leaves
    assert acc["tcp connections matched by time"] == 1
    assert acc["tcp listening sockets"] == 1
    assert "unmatched sends" not in acc and "unmatched receives" not in acc
    flows = messages.flow.tolist()
    assert len(set(flows[:6])) == 1 and len(set(flows[6:])) == 1 and flows[0] != flows[6]
    eps = {(messages.name("src_endpoint", i), messages.name("dst_endpoint", i)) for i in range(6)}
    assert eps == {
        ("127.0.0.1:36584", "127.0.0.1:18081"),
        ("127.0.0.1:18081", "127.0.0.1:36584"),
    }
    assert acc["input not a socket"] == 4  # the shared-library reads and closes
    assert_accounted(acc)
