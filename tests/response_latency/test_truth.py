"""Request/response truth from both directions: synthetic captures whose truth is known by
construction (pipelining, chunked bodies, retransmission, reordering, gaps, wraparound, Redis,
memcached, noreply) and the real captures in ../shared/data/pcap."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tacit.errors import ConfigError, InputError
from tacit.formats.exchanges import ExchangeParams
from tacit.formats.pcap import read_packets
from tacit.model.messages import MISSING
from tacit.model.packets import ACK, FIN, PSH
from tacit.response_latency.truth import request_truth
from tcp_conversations import MS, T0, Conversation, capture


def rows(truth, column: str) -> list:
    return [None if v == MISSING else v - T0 for v in getattr(truth, column).tolist()]


def check_accounting(truth) -> None:
    a = truth.accounting
    assert a.answered + a.unanswered + a.noreply == a.requests == len(truth)
    assert a.tcp_packets + a.other_packets == a.packets


HEAD_200 = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n"


def test_pipelined_http_with_chunked_head_204_and_100_continue(tmp_path: Path) -> None:
    c = Conversation()
    t = c.handshake(0)
    get = b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n"
    post = b"POST /b HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\nbody"
    head = b"HEAD /c HTTP/1.1\r\nHost: x\r\n\r\n"
    delete = b"DELETE /d HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"
    put = b"PUT /e HTTP/1.1\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n"
    # Four requests pipelined in segments that split them anywhere.
    c.send(t + 1 * MS, 0, get + post + head + delete, size=23)
    c.send(t + 2 * MS, 0, put)
    chunked = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-Trailer: 1\r\n\r\n"
    )
    c.send(t + 10 * MS, 1, HEAD_200 + b"abcde")
    c.send(t + 12 * MS, 1, chunked, size=17)  # 6 segments, the last at 12 ms + 50 µs
    c.send(t + 14 * MS, 1, HEAD_200)  # HEAD: Content-Length but no body
    c.send(t + 15 * MS, 1, b"HTTP/1.1 204 No Content\r\n\r\n")
    c.send(t + 16 * MS, 1, b"HTTP/1.1 100 Continue\r\n\r\n")
    c.send(t + 17 * MS, 0, b"xy")
    c.send(t + 19 * MS, 1, b"HTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n")
    truth = request_truth(capture(tmp_path, c))
    check_accounting(truth)
    assert [truth.strings[k] for k in truth.command] == ["GET", "POST", "HEAD", "DELETE", "PUT"]
    ends = np.cumsum([len(get), len(post), len(head), len(delete)])
    starts = ends - [len(get), len(post), len(head), len(delete)]
    sent = t + MS + 10_000 * (starts // 23)  # the 23-byte segment of each request's first byte
    assert rows(truth, "request_first") == [*sent.tolist(), t + 2 * MS]
    last = t + MS + 10_000 * ((ends - 1) // 23)
    assert rows(truth, "request_last") == [*last.tolist(), t + 17 * MS]  # PUT: body after 100
    assert rows(truth, "response_first") == [
        t + 10 * MS,
        t + 12 * MS,
        t + 14 * MS,
        t + 15 * MS,
        t + 16 * MS,
    ]
    assert rows(truth, "response_last") == [
        t + 10 * MS,
        t + 12 * MS + 50_000,
        t + 14 * MS,
        t + 15 * MS,
        t + 19 * MS,
    ]
    assert truth.response_bytes.tolist()[:2] == [len(HEAD_200) + 5, len(chunked)]
    lat = truth.response_latency
    assert lat[0] == 9 * MS and lat[4] == 17 * MS
    # Pipelined: only the body of PUT (17 ms) went out after a response completed, and it is
    # part of the PUT request, so no request was triggered by another's response.
    assert truth.triggered.tolist() == [-1] * 5
    assert truth.accounting.unparsed == {}
    assert truth.connections[0].how == "handshake" and truth.connections[0].server == "10.0.0.2:80"


def test_closed_loop_requests_are_causal_pairs(tmp_path: Path) -> None:
    c = Conversation()
    t = c.handshake(0)
    for k in range(4):
        c.send(t + k * 10 * MS, 0, b"GET /%d HTTP/1.1\r\n\r\n" % k)
        c.send(t + k * 10 * MS + (k + 2) * MS, 1, HEAD_200 + b"12345")
    truth = request_truth(capture(tmp_path, c))
    assert truth.triggered.tolist() == [1, 2, 3, -1]
    assert np.array_equal(truth.triggered_gap[:3], [10 * MS] * 3)
    assert np.isnan(truth.triggered_gap[3])
    assert truth.response_latency.tolist() == [(k + 2) * MS for k in range(4)]
    assert truth.as_dict()["causal_pairs"] == 3


def test_retransmission_reordering_and_wraparound(tmp_path: Path) -> None:
    # Sequence numbers wrap inside the response; a segment is captured twice, two arrive out
    # of order; every byte keeps the time of the first packet that carried it.
    c = Conversation(isn=(2**32 - 30, 2**32 - 100))
    t = c.handshake(0)
    c.send(t + MS, 0, b"GET / HTTP/1.1\r\nHost: wrap\r\n\r\n", size=10)
    body = bytes(range(220))
    response = b"HTTP/1.1 200 OK\r\nContent-Length: 220\r\n\r\n" + body
    seqs = c.send(t + 5 * MS, 1, response, size=60)  # 5 segments, 10 µs apart
    c.packet(t + 5 * MS + 50_000, 1, flags=ACK | PSH, payload=response[60:120], seq=seqs[1])
    n = len(c.frames)
    # Captured in the order 0, 3, 1, 2, 4, then segment 1 again.
    order = [*range(n - 6), n - 6, n - 3, n - 5, n - 4, n - 2, n - 1]
    truth = request_truth(capture(tmp_path, c, order))
    assert rows(truth, "response_first") == [t + 5 * MS]
    assert rows(truth, "response_last") == [t + 5 * MS + 40_000]
    assert truth.response_bytes.tolist() == [len(response)]
    assert rows(truth, "request_last") == [t + MS + 20_000]
    assert truth.accounting.duplicate_bytes == 60 and truth.accounting.unseen_bytes == 0


def test_a_response_lost_from_the_capture(tmp_path: Path) -> None:
    c = Conversation()
    t = c.handshake(0)
    for k in range(5):
        c.send(t + k * 10 * MS, 0, b"GET /%d HTTP/1.1\r\n\r\n" % k)
        c.send(t + k * 10 * MS + MS, 1, HEAD_200 + b"abcde")
    lost = 3 + 2 * 2 + 1  # the third response's packet (after the three of the handshake)
    truth = request_truth(capture(tmp_path, c, drop=lost))
    check_accounting(truth)
    assert rows(truth, "response_last") == [
        t + k * 10 * MS + MS if k != 2 else None for k in range(5)
    ]
    assert truth.accounting.unanswered == 1
    assert truth.accounting.unseen_bytes == len(HEAD_200) + 5
    (reason,) = truth.accounting.unparsed
    assert "missing from the capture" in reason


def test_body_delimited_by_close_and_snap_length(tmp_path: Path) -> None:
    c = Conversation()
    t = c.handshake(0)
    c.send(t + MS, 0, b"GET / HTTP/1.0\r\n\r\n")
    c.send(t + 2 * MS, 1, b"HTTP/1.0 200 OK\r\nServer: x\r\n\r\n" + b"z" * 300, size=150)
    c.packet(t + 3 * MS, 1, flags=ACK | FIN)
    # The snap length cuts the body but not the headers: times stay exact, bytes uncaptured.
    truth = request_truth(capture(tmp_path, c, snaplen=54 + 60))
    assert rows(truth, "response_last") == [t + 2 * MS + 20_000]
    assert truth.response_bytes.tolist() == [330]
    assert truth.accounting.uncaptured_bytes > 0


def test_redis_resp2_resp3_and_inline(tmp_path: Path) -> None:
    c = Conversation(server=("10.0.0.2", 6379))
    t = c.handshake(0)
    exchanges = [
        (b"PING\r\n", b"+PONG\r\n"),
        (b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n", b"$5\r\nhello\r\n"),
        (b"*2\r\n$3\r\nGET\r\n$1\r\nm\r\n", b"$-1\r\n"),
        (b"*2\r\n$4\r\nINCR\r\n$1\r\nn\r\n", b":42\r\n"),
        (b"*1\r\n$3\r\nBAD\r\n", b"-ERR unknown command\r\n"),
        (
            b"*3\r\n$6\r\nLRANGE\r\n$1\r\nl\r\n$2\r\n-1\r\n",
            b"*2\r\n*2\r\n:1\r\n$1\r\na\r\n*-1\r\n",
        ),
        (b"*1\r\n$5\r\nHELLO\r\n", b"%1\r\n+proto\r\n:3\r\n"),
        (b"*1\r\n$4\r\nSCAN\r\n", b"|1\r\n+ttl\r\n:1\r\n~2\r\n,1.5\r\n#t\r\n"),
        (b"*1\r\n$3\r\nNIL\r\n", b"_\r\n"),
    ]
    for k, (request, reply) in enumerate(exchanges):
        c.send(t + 10 * k * MS, 0, request)
        if k == 3:  # a RESP3 push in between answers nothing
            c.send(t + 10 * k * MS + MS // 2, 1, b">2\r\n+message\r\n$1\r\nx\r\n")
        c.send(t + 10 * k * MS + MS, 1, reply, size=5)
    truth = request_truth(capture(tmp_path, c))
    check_accounting(truth)
    assert truth.connections[0].protocol == "redis"
    commands = [truth.strings[k] for k in truth.command]
    assert commands == ["PING", "GET", "GET", "INCR", "BAD", "LRANGE", "HELLO", "SCAN", "NIL"]
    assert truth.accounting.answered == len(exchanges)
    segments = [-(-len(r) // 5) for _, r in exchanges]
    assert rows(truth, "response_last") == [
        t + 10 * k * MS + MS + 10_000 * (segments[k] - 1) for k in range(len(exchanges))
    ]
    assert truth.response_bytes.tolist() == [len(r) for _, r in exchanges]
    assert truth.accounting.unparsed == {"RESP3 push message": 21}


def test_memcached_text_protocol_and_noreply(tmp_path: Path) -> None:
    c = Conversation(server=("10.0.0.2", 11211))
    t = c.handshake(0)
    exchanges = [
        (b"set a 0 0 5\r\nhello\r\n", b"STORED\r\n"),
        (b"set b 1 0 3 noreply\r\nabc\r\n", None),
        (b"get a b c\r\n", b"VALUE a 0 5\r\nhello\r\nVALUE b 1 3\r\nabc\r\nEND\r\n"),
        (b"gets a\r\n", b"VALUE a 0 5 17\r\nhello\r\nEND\r\n"),
        (b"cas a 0 0 1 16\r\nx\r\n", b"EXISTS\r\n"),
        (b"append z 0 0 1\r\ny\r\n", b"NOT_STORED\r\n"),
        (b"delete a noreply\r\n", None),
        (b"incr n 5\r\n", b"NOT_FOUND\r\n"),
        (b"touch b 10\r\n", b"TOUCHED\r\n"),
        (b"bogus\r\n", None),
    ]
    for k, (request, reply) in enumerate(exchanges):
        c.send(t + 10 * k * MS, 0, request)
        if reply:
            c.send(t + 10 * k * MS + MS, 1, reply, size=9)
    truth = request_truth(capture(tmp_path, c))
    check_accounting(truth)
    assert [truth.strings[k] for k in truth.command] == [
        "set",
        "set",
        "get",
        "gets",
        "cas",
        "append",
        "delete",
        "incr",
        "touch",
    ]
    assert truth.expects_response.tolist() == [r is not None for _, r in exchanges[:-1]]
    assert truth.accounting.noreply == 2 and truth.accounting.answered == 7
    got = rows(truth, "response_last")
    for k, (_, reply) in enumerate(exchanges[:-1]):
        expected = t + 10 * k * MS + MS + 10_000 * ((len(reply) - 1) // 9) if reply else None
        assert got[k] == expected
    # The last line is not memcached: counted, not a crash.
    assert truth.accounting.unparsed == {"request: unknown memcached command": 7}


def test_protocol_by_content_server_option_and_bad_arguments(tmp_path: Path) -> None:
    # No handshake, an unknown port: Redis is told by its bytes, the server by the option.
    c = Conversation(client=("10.0.0.1", 5000), server=("10.0.0.2", 10625))
    c.send(0, 0, b"*1\r\n$4\r\nPING\r\n")
    c.send(MS, 1, b"+PONG\r\n")
    read = capture(tmp_path, c)
    truth = request_truth(read, server="10.0.0.2:10625")
    assert truth.connections[0].protocol == "redis" and truth.connections[0].how == "server"
    assert truth.response_latency.tolist() == [MS]
    assert request_truth(read, server="10625").connections[0].how == "server"
    # Told the wrong protocol, the bytes are counted as unparsed.
    wrong = request_truth(read, protocol="http")
    assert len(wrong) == 0 and sum(wrong.accounting.unparsed.values()) == 14 + 7
    with pytest.raises(ConfigError):
        request_truth(read, protocol="smtp")
    with pytest.raises(ConfigError):
        ExchangeParams(ports={1: "smtp"})
    with pytest.raises(InputError, match="payloads=True"):
        request_truth(read_packets(tmp_path / "c.pcap"))


def test_garbage_is_counted_not_raised(tmp_path: Path) -> None:
    c = Conversation()
    t = c.handshake(0)
    c.send(t + MS, 0, b"GET / HTTP/1.1\r\n\r\n\x00\x01garbage\r\n\r\n")
    c.send(t + 2 * MS, 1, HEAD_200 + b"abcdeHTTP/9 nonsense")
    truth = request_truth(capture(tmp_path, c))
    assert truth.accounting.answered == 1
    assert truth.accounting.unparsed == {
        "request: not an HTTP/1.x request line": 13,
        "responses to no parsed request": 15,
    }


def test_real_http_one_dropped_response(shared_data: Path) -> None:
    read = read_packets(
        shared_data / "pcap" / "zeek-http-1000-requests-one-dropped-response.pcap.gz",
        payloads=True,
    )
    truth = request_truth(read)
    check_accounting(truth)
    a = truth.accounting
    assert a.requests == 1000 and a.answered == 999 and a.unanswered == 1
    assert a.unseen_bytes > 0  # the dropped response is a gap in the server's stream
    lat = truth.response_latency
    assert np.all(lat[~np.isnan(lat)] > 0)
    gaps = truth.triggered_gap
    assert np.all(gaps[~np.isnan(gaps)] >= lat[~np.isnan(gaps)])


def test_real_redis_pings(shared_data: Path) -> None:
    read = read_packets(shared_data / "pcap" / "zeek-redis-50-pings.pcap.gz", payloads=True)
    truth = request_truth(read)
    commands = [truth.strings[k] for k in truth.command]
    assert commands.count("PING") == 50
    assert truth.accounting.answered == len(truth) and truth.accounting.unparsed == {}


def test_real_http_bro_org(shared_data: Path) -> None:
    read = read_packets(shared_data / "pcap" / "zeek-http-bro.org.pcap.gz", payloads=True)
    truth = request_truth(read)
    check_accounting(truth)
    assert truth.accounting.connections == {"http": 13}
    assert truth.accounting.requests >= 13 and truth.accounting.unanswered == 0
    assert {truth.strings[k] for k in truth.command} == {"GET"}
    targets = [truth.strings[k] for k in truth.target]
    assert all(t.startswith("/") for t in targets) and "/css/pygments.css" in targets
    statuses = set(truth.status.tolist())
    assert statuses <= {200, 301, 302, 304, 404} and 200 in statuses
    # The server is across the Internet: every response takes longer than the handshake RTT.
    assert np.nanmin(truth.response_latency) > 50 * MS


@pytest.mark.parametrize(
    ("name", "requests", "command", "target"),
    [
        ("grpc-5-streams.pcap.gz", 5, "POST", "/RPC_BFCP_SRV.BFCP_GRPC_Service/"),
        ("suricata-dns-over-http2-post.pcap.gz", 34, "POST", "/dns-query"),
    ],
)
def test_real_http2_captures(shared_data: Path, name, requests, command, target) -> None:
    """h2 and gRPC streams through the same exchanges layer (the DNS-over-HTTP/2 capture is on
    port 80: the preface, not the port, says HTTP/2)."""
    truth = request_truth(read_packets(shared_data / "pcap" / name, payloads=True))
    check_accounting(truth)
    assert truth.accounting.connections.get("http2") == 1
    assert truth.accounting.answered == requests == len(truth)
    assert {truth.strings[k] for k in truth.command} == {command}
    assert all(target in (truth.strings[k] or "") for k in truth.target)
    assert (truth.response_latency > 0).all()
