"""strace socket logs and socket-event JSON lines: parsing, accounting and failures."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest

from tacit.errors import InputError
from tacit.formats.socketevents import (
    iso_to_ns,
    read_event_lines,
    seconds_to_ns,
    write_event_lines,
)
from tacit.formats.strace import host_from_filename, looks_like_strace, read_strace
from tacit.model.socket_events import (
    ACCEPT,
    BIND,
    CLOSE,
    CONNECT,
    KIND_NAMES,
    LISTEN,
    NO_CHECKSUM,
    RECV,
    SEND,
    SHUTDOWN,
    TCP,
    UDP,
    SocketEvents,
)

MIDNIGHT = 1_714_521_600 * 10**9  # 2024-05-01T00:00:00Z
INET = '{{sa_family=AF_INET, sin_port=htons({port}), sin_addr=inet_addr("{ip}")}}'


def addr(ip: str, port: int) -> str:
    return INET.format(ip=ip, port=port)


def parse(tmp_path: Path, text: str, name: str = "web.42.strace", **kw) -> SocketEvents:
    p = tmp_path / name
    p.write_text(text)
    return read_strace(p, **kw)


def summary(ev: SocketEvents) -> list[tuple]:
    return [
        (
            int(ev.time[i]),
            int(ev.pid[i]),
            int(ev.fd[i]),
            KIND_NAMES[int(ev.kind[i])],
            int(ev.bytes[i]),
            ev.name("local", i),
            ev.name("remote", i),
            int(ev.record[i]),
        )
        for i in range(len(ev))
    ]


def assert_lines_accounted(ev: SocketEvents) -> None:
    acc = ev.accounting
    assert acc["lines"] == sum(n for k, n in acc.items() if k != "lines")


def test_client_log_with_every_kind_of_line(tmp_path):
    text = "\n".join(
        [
            "10:00:00.000100 socket(AF_INET, SOCK_STREAM|SOCK_CLOEXEC|SOCK_NONBLOCK, IPPROTO_TCP)"
            " = 3",
            f"10:00:00.000200 connect(3, {addr('10.0.0.2', 80)}, 16) = -1 EINPROGRESS "
            "(Operation now in progress)",
            f"10:00:00.000300 getsockname(3, {addr('10.0.0.1', 45678)}, [16]) = 0",
            '10:00:00.000400 read(4, "root:x:0:0:root:/root:/bin/bash\\n"..., 4096) = 1024',
            '10:00:00.001000 write(3, "GET / HTTP/1.1\\r\\n\\r\\n", 18) = 18',
            "10:00:00.001100 read(3, 0x55d0c, 4096) = -1 EAGAIN (Resource temporarily unavailable)",
            '10:00:00.002000 read(3, "HTTP/1.1 200 OK\\r\\n\\r\\n", 4096) = 19 <0.000012>',
            "10:00:00.002100 shutdown(3, SHUT_WR) = 0",
            '10:00:00.002200 read(3, "", 4096) = 0',
            "10:00:00.002300 close(3)                                = 0",
            '10:00:00.002400 read(3, "data from a file that took fd 3\\n", 4096) = 32',
            "10:00:00.002500 --- SIGCHLD {si_signo=SIGCHLD, si_code=CLD_EXITED} ---",
            "10:00:00.002600 setsockopt(5, SOL_SOCKET, SO_KEEPALIVE, [1], 4) = 0",
            "10:00:00.002700 +++ exited with 0 +++",
        ]
    )
    ev = parse(tmp_path, text + "\n", date="2024-05-01")
    t = MIDNIGHT + 10 * 3600 * 10**9
    local, remote = "10.0.0.1:45678", "10.0.0.2:80"
    assert summary(ev) == [
        (t + 200_000, 42, 3, "connect", 0, local, remote, 2),  # local filled in from line 3
        (t + 1_000_000, 42, 3, "send", 18, local, remote, 5),
        (t + 2_012_000, 42, 3, "recv", 19, local, remote, 7),  # returned after -T's 12 us
        (t + 2_100_000, 42, 3, "shutdown", 1, local, remote, 8),
        (t + 2_300_000, 42, 3, "close", 0, local, remote, 10),
    ]
    assert set(ev.proto.tolist()) == {TCP}
    assert (ev.checksum == NO_CHECKSUM).all()  # stream payloads are not checksummed
    assert ev.name("node", 0) == "web:42" and ev.name("host", 0) == "web"
    acc = ev.accounting
    assert acc["not a socket"] == 2  # the file read, and the read after fd 3 was reused
    assert acc["failed call"] == 1 and acc["zero bytes"] == 1
    assert acc["signal"] == 1 and acc["exit"] == 1 and acc["other call"] == 1
    assert acc["address lookup"] == 1 and acc["socket created"] == 1
    assert_lines_accounted(ev)


def test_pid_prefixes_unfinished_and_resumed_calls(tmp_path):
    text = "\n".join(
        [
            "[pid  7] 09:00:00.000000 socket(AF_INET6, SOCK_STREAM, IPPROTO_IP) = 3",
            "[pid  7] 09:00:00.000010 bind(3, {sa_family=AF_INET6, sin6_port=htons(443), "
            'sin6_flowinfo=htonl(0), inet_pton(AF_INET6, "::", &sin6_addr), sin6_scope_id=0}, '
            "28) = 0",
            "[pid  7] 09:00:00.000020 listen(3, 4096) = 0",
            "[pid  7] 09:00:00.000030 accept4(3,  <unfinished ...>",
            '[pid  8] 09:00:00.500000 write(9, "x", 1) = 1',
            "[pid  7] 09:00:01.000000 <... accept4 resumed>{sa_family=AF_INET6, "
            'sin6_port=htons(51000), sin6_flowinfo=htonl(0), inet_pton(AF_INET6, "2001:db8::5", '
            "&sin6_addr), sin6_scope_id=0}, [28], SOCK_CLOEXEC) = 4",
            "[pid  8] 09:00:01.100000 read(4,  <unfinished ...>",
            "[pid  8] 09:00:01.100500 write(4,  <unfinished ...>",  # a second thread's write
            '[pid  8] 09:00:01.200000 <... read resumed>"ping", 64) = 4',
            '[pid  8] 09:00:01.300000 <... write resumed>"pong", 4) = 4',
            "[pid  8] 09:00:01.400000 <... close resumed>) = 0",
            "[pid  8] 09:00:01.500000 read(4, ",  # truncated: strace was killed
        ]
    )
    ev = parse(tmp_path, text, name="api.strace", date="2024-05-01")
    t = MIDNIGHT + 9 * 3600 * 10**9
    local, remote = "[::]:443", "[2001:db8::5]:51000"
    assert summary(ev) == [
        (t + 10_000, 7, 3, "bind", 0, local, None, 2),
        (t + 20_000, 7, 3, "listen", 0, local, None, 3),
        (t + 10**9, 7, 4, "accept", 0, local, remote, 6),  # stamped when accept returned
        (t + 1_200_000_000, 8, 4, "recv", 4, local, remote, 9),  # ... a read when it returned
        (t + 1_100_500_000, 8, 4, "send", 4, local, remote, 8),  # ... a write when it started
    ]
    assert ev.name("node", 0) == "api"  # no pid in the file name, no program
    acc = ev.accounting
    assert acc["call start (resumed later)"] == 3
    assert acc["resumed without start"] == 1
    assert acc["not a socket"] == 1  # fd 9
    assert acc["truncated last line"] == 1
    assert_lines_accounted(ev)


def test_yy_annotations_and_ttt_times(tmp_path):
    tcp = "TCP:[10.0.0.1:40000->10.0.0.9:5432]"
    text = "\n".join(
        [
            f'1714557600.000001 write(5<{tcp}>, "Q\\0\\0\\0\\rSELECT 1\\0", 14) = 14',
            f'1714557600.000500 read(5<{tcp}>, "T\\0\\0\\0!"..., 16384) = 66',
            '1714557600.000600 read(6</var/lib/app/data.db>, "SQLite format 3\\0", 16) = 16',
            '1714557600.000700 write(7<UNIX-STREAM:[1234->1235]>, "log line\\n", 9) = 9',
            '1714557600.000800 sendto(8<UDP:[10.0.0.1:5000]>, "hi", 2, 0, '
            f"{addr('10.0.0.3', 9999)}, 16) = 2",
            f"1714557600.000900 close(5<{tcp}>) = 0",
        ]
    )
    ev = parse(tmp_path, text + "\n", name="app.11.strace")
    t = 1_714_557_600 * 10**9
    assert summary(ev) == [
        (t + 1_000, 11, 5, "send", 14, "10.0.0.1:40000", "10.0.0.9:5432", 1),
        (t + 500_000, 11, 5, "recv", 66, "10.0.0.1:40000", "10.0.0.9:5432", 2),
        (t + 800_000, 11, 8, "send", 2, "10.0.0.1:5000", "10.0.0.3:9999", 5),
        (t + 900_000, 11, 5, "close", 0, "10.0.0.1:40000", "10.0.0.9:5432", 6),
    ]
    assert ev.proto.tolist() == [TCP, TCP, UDP, TCP]
    assert ev.checksum[2] != NO_CHECKSUM
    assert ev.accounting["not a socket"] == 1 and ev.accounting["non-IP socket"] == 1
    assert_lines_accounted(ev)


def test_datagram_checksum_ignores_how_bytes_were_printed(tmp_path):
    data = bytes([0x12, 0x31, 0x01, 0x00, 0x07]) + b"example" + bytes([0x00, 0x01])
    octal = '"\\0221\\1\\0\\7example\\0\\1"'
    hexes = '"' + "".join(f"\\x{b:02x}" for b in data) + '"'
    lines = ["0.000001 socket(AF_INET, SOCK_DGRAM, IPPROTO_UDP) = 3"]
    for i, s in enumerate((octal, hexes, '"\\0221\\1\\0\\7examplf\\0\\1"')):
        lines.append(f"0.00001{i} sendto(3, {s}, 14, 0, {addr('10.0.0.2', 53)}, 16) = 14")
    ev = parse(tmp_path, "\n".join(lines) + "\n")
    assert ev.checksum[0] == ev.checksum[1] != ev.checksum[2]
    assert ev.kind.tolist() == [SEND] * 3


def test_node_naming_options(tmp_path):
    text = "\n".join(
        [
            "[pid  1] 00:00:00.000001 socket(AF_INET, SOCK_DGRAM, 0) = 3",
            f'[pid  1] 00:00:00.000002 sendto(3, "a", 1, 0, {addr("10.0.0.2", 53)}, 16) = 1',
            f'[pid  2] 00:00:00.000003 sendto(3, "b", 1, 0, {addr("10.0.0.2", 53)}, 16) = 1',
        ]
    )
    nodes = lambda ev: [ev.name("node", i) for i in range(len(ev))]  # noqa: E731
    assert nodes(parse(tmp_path, text, name="h.1.strace")) == ["h:1", "h:1"]
    assert nodes(parse(tmp_path, text, name="h.1.strace", program="dns")) == ["h:dns", "h:dns"]
    assert nodes(parse(tmp_path, text, name="h.1.strace", node_per_pid=True)) == ["h:1", "h:2"]
    assert nodes(parse(tmp_path, text, name="x.log", host="web", names={2: "worker"})) == [
        "web",
        "web:worker",
    ]


def test_host_from_filename():
    assert host_from_filename("logs/web-1.example.com.1234.strace.gz") == (
        "web-1.example.com",
        1234,
    )
    assert host_from_filename("db.strace") == ("db", None)
    assert host_from_filename("trace.log") == ("trace", None)


def test_midnight_rollover_and_gzip(tmp_path):
    text = "\n".join(
        [
            "23:59:59.999000 socket(AF_INET, SOCK_DGRAM, 0) = 3",
            f'23:59:59.999500 sendto(3, "a", 1, 0, {addr("10.0.0.2", 53)}, 16) = 1',
            f'00:00:00.000500 sendto(3, "b", 1, 0, {addr("10.0.0.2", 53)}, 16) = 1',
        ]
    )
    p = tmp_path / "h.strace.gz"
    p.write_bytes(gzip.compress(text.encode()))
    ev = read_strace(p, date="2024-05-01")
    assert np.diff(ev.time).tolist() == [1_000_000]


def test_malformed_line_names_file_and_line(tmp_path):
    text = "\n".join(
        [
            "10:00:00.000100 socket(AF_INET, SOCK_STREAM, IPPROTO_TCP) = 3",
            "10:00:00.000200 connect(3, {sa_family=AF_INET, sin_port=htons(80)",
            "10:00:00.000300 close(3) = 0",
        ]
    )
    with pytest.raises(InputError) as e:
        parse(tmp_path, text + "\n", name="bad.strace")
    assert e.value.record == "line 2"
    assert str(e.value).startswith(f"{tmp_path / 'bad.strace'}: record line 2: ")
    assert "\n" not in str(e.value)
    with pytest.raises(InputError, match="line 1: not strace -tt/-ttt output"):
        parse(tmp_path, 'read(3, "x", 1) = 1\n', name="notime.strace")
    with pytest.raises(InputError, match="record line 2: not a system call"):
        parse(tmp_path, "10:00:00.000100 close(9) = 0\n10:00:00.1 hello\n", name="junk.strace")


def test_looks_like_strace():
    assert looks_like_strace('\n[pid  12] 10:00:00.000001 read(3, "", 1) = 0\n')
    assert looks_like_strace("1714557600.000001 +++ exited with 0 +++\n")
    assert not looks_like_strace("sender,receiver,send_time,receive_time\n")


# --- JSON lines ------------------------------------------------------------------------------


def test_event_lines_read_and_round_trip(tmp_path):
    p = tmp_path / "events.jsonl"
    p.write_text(
        "\n".join(
            [
                '{"time": "2024-05-01T10:00:00.000000001Z", "host": "c", "pid": 1, "fd": 3, '
                '"call": "connect", "remote": "10.0.0.2:80", "proto": "tcp"}',
                '{"time": 1714557600000001000, "host": "c", "pid": 1, "fd": 3, "call": "write", '
                '"bytes": 10}',
                '{"time": 1714557600.002, "host": "c", "pid": 1, "fd": 3, "call": "close"}',
                '{"time": 1714557600003000000, "host": "c", "pid": 1, "fd": 3, "call": "sendto", '
                '"bytes": 5, "remote": "[2001:db8::1]:53", "proto": "udp", "checksum": "q1"}',
            ]
        )
        + "\n"
    )
    ev = read_event_lines(p)
    assert ev.kind.tolist() == [CONNECT, SEND, CLOSE, SEND]
    assert ev.time.tolist() == [
        iso_to_ns("2024-05-01T10:00:00.000000001Z"),
        1_714_557_600_000_001_000,
        1_714_557_600_002_000_000,
        1_714_557_600_003_000_000,
    ]
    assert ev.sock.tolist() == [0, 0, 0, 1]  # fd 3 reused after its close
    assert ev.proto.tolist() == [TCP, TCP, TCP, UDP]
    assert ev.name("remote", 1) == "10.0.0.2:80" and ev.name("remote", 3) == "[2001:db8::1]:53"
    assert ev.name("node", 0) == "c"
    out = tmp_path / "again.jsonl.gz"
    write_event_lines(out, ev)
    again = read_event_lines(out)
    for k in ("time", "kind", "bytes", "sock", "proto", "checksum", "pid", "fd"):
        assert getattr(again, k).tolist() == getattr(ev, k).tolist(), k
    assert [again.name("remote", i) for i in range(4)] == [ev.name("remote", i) for i in range(4)]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"time": 1, "host": "h", "fd": 3, "call": "teleport"}', "unknown call"),
        ('{"time": 1, "fd": 3, "call": "send", "bytes": 1}', "missing field 'host'"),
        ('{"time": 1, "host": "h", "fd": 3, "call": "recv"}', "needs a non-negative 'bytes'"),
        ('{"time": "yesterday", "host": "h", "fd": 3, "call": "close"}', "field 'time'"),
        ('{"time": 1, "host": "h", "fd": 3, "call": "close", "local": "nowhere"}', "'local'"),
    ],
)
def test_event_lines_errors_name_the_line(tmp_path, line, message):
    p = tmp_path / "bad.jsonl"
    p.write_text('{"time": 1, "host": "h", "fd": 3, "call": "close"}\n' + line + "\n")
    with pytest.raises(InputError, match=message) as e:
        read_event_lines(p)
    assert e.value.record == "line 2"


def test_kinds_are_distinct():
    kinds = [CONNECT, ACCEPT, SEND, RECV, CLOSE, BIND, LISTEN, SHUTDOWN]
    assert len(set(kinds)) == len(kinds) == len(KIND_NAMES)


def test_resolver_sendmmsg_on_a_connected_datagram_socket(tmp_path):
    """glibc's resolver: connect a UDP socket, send the A and AAAA queries in one sendmmsg."""
    q = "\\x12\\x34\\x01\\x00\\x00\\x01\\x00\\x00\\x00\\x00\\x00\\x00\\x07example\\x03com\\x00"
    hdr = (
        '{{msg_hdr={{msg_name=NULL, msg_namelen=0, msg_iov=[{{iov_base="{q}\\x00{t}\\x00\\x01", '
        "iov_len=29}}], msg_iovlen=1, msg_controllen=0, msg_flags=0}}, msg_len=29}}"
    )
    a_query, aaaa_query = hdr.format(q=q, t="\\x01"), hdr.format(q=q, t="\\x1c")
    text = "\n".join(
        [
            "1.000000 socket(AF_INET, SOCK_DGRAM|SOCK_CLOEXEC|SOCK_NONBLOCK, IPPROTO_IP) = 3",
            f"1.000001 connect(3, {addr('127.0.0.53', 53)}, 16) = 0",
            f"1.000002 sendmmsg(3, [{a_query}, {aaaa_query}], 2, MSG_NOSIGNAL) = 2",
            f'1.000100 recvfrom(3, "\\x12\\x34\\x81\\x80"..., 2048, 0, {addr("127.0.0.53", 53)}, '
            "[28 => 16]) = 45",
        ]
    )
    ev = parse(tmp_path, text + "\n", name="h.5.strace")
    assert [(KIND_NAMES[int(k)], int(n)) for k, n in zip(ev.kind, ev.bytes, strict=True)] == [
        ("connect", 0),
        ("send", 29),
        ("send", 29),
        ("recv", 45),
    ]
    assert {ev.name("remote", i) for i in range(4)} == {"127.0.0.53:53"}
    assert ev.checksum[1] != ev.checksum[2]  # A and AAAA differ in one byte
    assert ev.accounting["event"] == 3  # lines
    assert_lines_accounted(ev)


def test_an_event_field_beyond_int64_names_file_record_and_column(tmp_path):
    p = tmp_path / "ev.jsonl"
    p.write_text(
        '{"time": 1, "host": "h", "pid": 1, "fd": 3, "call": "send", "bytes": '
        + str(2**63)
        + ', "local": "10.0.0.1:1", "remote": "10.0.0.2:2"}\n'
    )
    with pytest.raises(InputError, match=r"ev\.jsonl: record 1: bytes 9223372036854775808 out"):
        read_event_lines(p)


@pytest.mark.parametrize("text", ["inf", "-inf", "nan", "1e23", "9223372037", "-9223372037.5"])
def test_seconds_beyond_int64_nanoseconds_are_refused(text):
    with pytest.raises(ValueError, match="beyond int64 nanoseconds"):
        seconds_to_ns(text)


def test_seconds_within_int64_nanoseconds_are_exact():
    assert seconds_to_ns("9223372036.854775807") == 2**63 - 1
    assert seconds_to_ns("-1.5") == -1_500_000_000 and seconds_to_ns("1e3") == 10**12
