"""HTTP/2 exchanges against conversations the h2 library made (what was sent is the truth), and
against real captures read through the pcap reader and TCP reassembly."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from h2.errors import ErrorCodes
from h2.exceptions import ProtocolError
from h2.settings import SettingCodes
from hyperframe.frame import Frame, HeadersFrame
from hypothesis import given, settings
from hypothesis import strategies as st

from h2_conversations import CLIENT, SERVER, Conversation
from tacit.formats.exchanges import tcp_connections
from tacit.formats.pcap import read_packets
from tacit.formats.protocols import CUT, EXCHANGES, GAP, HTTP2
from tacit.formats.protocols.http2 import (
    MALFORMED,
    MIDWAY,
    NOT_HTTP2,
    ORPHAN,
    PREFACE,
    PUSH,
    Exchange,
    exchanges,
)
from tacit.formats.protocols.http2 import SNIFF as HTTP2_SNIFF
from tacit.formats.tcp_stream import ByteStream, StreamBytes, reassemble


class Skipped(dict):
    def skip(self, reason: str, nbytes: int) -> None:
        assert nbytes > 0
        self[reason] = self.get(reason, 0) + nbytes


def parse(client: ByteStream, server: ByteStream) -> tuple[list[Exchange], Skipped]:
    skipped = Skipped()
    return exchanges(client, server, skipped), skipped


def request(path: str, method: str = "POST", **extra: str) -> list[tuple[str, str]]:
    fields = [(":method", method), (":scheme", "http"), (":path", path)]
    fields += [(":authority", "svc.test:8080")]
    return fields + [(k.replace("_", "-"), v) for k, v in extra.items()]


def grpc_message(payload: bytes) -> bytes:
    """A gRPC length-prefixed message: compressed flag, 4-byte length, payload."""
    return b"\0" + struct.pack(">I", len(payload)) + payload


def frame_types(data: bytes, pos: int) -> list[int]:
    """The type of every frame from ``pos`` (a walk of the 9-byte headers, RFC 9113 §4.1)."""
    out = []
    while pos + 9 <= len(data):
        out.append(data[pos + 3])
        pos += 9 + int.from_bytes(data[pos : pos + 3], "big")
    return out


def test_interleaved_streams_with_bodies() -> None:
    c = Conversation()
    sid = [1, 3, 5]
    bodies = {1: [b"a" * 300, b"b" * 7], 3: [b"c" * 1000], 5: [b"d" * 50, b"e" * 60, b"f"]}
    req_start, req_end, resp_start, resp_end = {}, {}, {}, {}
    for s in sid:
        req_start[s], _ = c.act(
            CLIENT, lambda e, s=s: e.send_headers(s, request(f"/item/{s}", x_trace=f"t{s}"))
        )
    for k in range(3):  # bodies interleaved across the three streams
        for s in sid:
            if k < len(bodies[s]):
                last = k == len(bodies[s]) - 1
                _, end = c.act(
                    CLIENT,
                    lambda e, s=s, k=k, last=last: e.send_data(s, bodies[s][k], end_stream=last),
                )
                if last:
                    req_end[s] = end
    answers = {5: b"five" * 100, 1: b"one" * 10, 3: b""}
    for s in (5, 1):  # answered out of order, bodies after both header sections
        resp_start[s], _ = c.act(
            SERVER,
            lambda e, s=s: e.send_headers(s, [(":status", "200"), ("content-type", "text/plain")]),
        )
    for s in (1, 5):
        _, resp_end[s] = c.act(SERVER, lambda e, s=s: e.send_data(s, answers[s], end_stream=True))
    resp_start[3], resp_end[3] = c.act(
        SERVER, lambda e: e.send_headers(3, [(":status", "404")], end_stream=True)
    )
    got, skipped = parse(*c.streams())
    assert skipped == {}
    assert [e.stream_id for e in got] == sid
    for e in got:
        s = e.stream_id
        assert (e.request_start, e.request_end) == (req_start[s], req_end[s])
        assert (e.response_start, e.response_end) == (resp_start[s], resp_end[s])
        assert (e.method, e.path, e.authority) == ("POST", f"/item/{s}", "svc.test:8080")
        assert e.headers == {"x-trace": f"t{s}"}
        assert e.request_bytes == sum(map(len, bodies[s]))
        assert e.response_bytes == len(answers[s])
        assert e.status == (404 if s == 3 else 200)
        assert e.content_type == ("" if s == 3 else "text/plain")
        assert (e.grpc_status, e.reset, e.grpc) == (-1, False, False)


def test_grpc_calls_with_trailers_and_trailers_only() -> None:
    c = Conversation()
    call = request("/pkg.Greeter/SayHello", te="trailers", content_type="application/grpc")
    msg = grpc_message(b"\x0a\x05world")
    start1, _ = c.act(CLIENT, lambda e: e.send_headers(1, call))
    _, end1 = c.act(CLIENT, lambda e: e.send_data(1, msg, end_stream=True))
    start3, _ = c.act(CLIENT, lambda e: e.send_headers(3, call))
    _, end3 = c.act(CLIENT, lambda e: e.send_data(3, msg + msg, end_stream=True))
    head = [(":status", "200"), ("content-type", "application/grpc")]
    rs1, _ = c.act(SERVER, lambda e: e.send_headers(1, head))
    c.act(SERVER, lambda e: e.send_data(1, grpc_message(b"\x0a\x0bhello world")))
    _, re1 = c.act(SERVER, lambda e: e.send_headers(1, [("grpc-status", "0")], end_stream=True))
    rs3, re3 = c.act(  # trailers-only: an error without a message
        SERVER,
        lambda e: e.send_headers(
            3, [*head, ("grpc-status", "5"), ("grpc-message", "no")], end_stream=True
        ),
    )
    (a, b), skipped = parse(*c.streams())
    assert skipped == {}
    assert (a.request_start, a.request_end, a.response_start, a.response_end) == (
        start1,
        end1,
        rs1,
        re1,
    )
    assert (b.request_start, b.request_end, b.response_start, b.response_end) == (
        start3,
        end3,
        rs3,
        re3,
    )
    assert a.grpc and b.grpc and a.content_type == "application/grpc"
    assert (a.status, a.grpc_status, b.status, b.grpc_status) == (200, 0, 200, 5)
    assert (a.request_bytes, b.request_bytes, a.response_bytes, b.response_bytes) == (
        len(msg),
        2 * len(msg),
        5 + 13,
        0,
    )
    assert a.headers == {"te": "trailers", "content-type": "application/grpc"}


def test_field_blocks_split_into_continuation_frames() -> None:
    c = Conversation()
    big = "".join(chr(ord("a") + (k * 7919) % 26) for k in range(40_000))  # > 16384 (max frame)
    start, end = c.act(
        CLIENT, lambda e: e.send_headers(1, request("/big", "GET", x_big=big), end_stream=True)
    )
    head = [(":status", "200"), ("x-big", big[::-1]), ("content-type", "text/html")]
    rs, _ = c.act(SERVER, lambda e: e.send_headers(1, head))
    _, re = c.act(SERVER, lambda e: e.send_data(1, b"<p>", end_stream=True))
    client, server = c.streams()
    assert frame_types(client.data, start)[:2] == [1, 9]  # HEADERS, CONTINUATION
    assert frame_types(server.data, rs)[:2] == [1, 9]
    (e,), skipped = parse(client, server)
    assert skipped == {}
    assert (e.request_start, e.request_end, e.response_start, e.response_end) == (
        start,
        end,
        rs,
        re,
    )
    assert e.headers["x-big"] == big and (e.method, e.path, e.status) == ("GET", "/big", 200)
    assert e.content_type == "text/html"


def test_padding_and_priority() -> None:
    c = Conversation()
    c.act(CLIENT, lambda e: e.send_headers(1, request("/p"), priority_weight=200))
    c.act(CLIENT, lambda e: e.send_data(1, b"x" * 100, end_stream=True, pad_length=30))
    c.act(SERVER, lambda e: e.send_headers(1, [(":status", "201")]))
    c.act(SERVER, lambda e: e.send_data(1, b"y" * 10, end_stream=True, pad_length=255))
    # A padded HEADERS frame (h2 sends none): the second request's frame rewritten with padding,
    # the field block, so the decoder's state, unchanged.
    at, _ = c.act(CLIENT, lambda e: e.send_headers(3, request("/q", "GET"), end_stream=True))
    k = next(k for k, (_, b) in enumerate(c.chunks[CLIENT]) if at == c.offset_of(CLIENT, k))
    t, raw = c.chunks[CLIENT][k]
    frame, length = Frame.parse_frame_header(memoryview(raw[:9]))
    frame.parse_body(memoryview(raw[9 : 9 + length]))
    assert isinstance(frame, HeadersFrame) and length == len(raw) - 9
    frame.pad_length = 17
    frame.flags.add("PADDED")
    padded = frame.serialize()
    c.chunks[CLIENT][k] = (t, padded)
    c.act(SERVER, lambda e: e.send_headers(3, [(":status", "204")], end_stream=True))
    (a, b), skipped = parse(*c.streams())
    assert skipped == {}
    assert (a.request_bytes, a.response_bytes, a.status) == (100, 10, 201)
    assert (b.method, b.path, b.status, b.request_start) == ("GET", "/q", 204, at)
    assert b.request_end == at + len(padded) == at + len(raw) + 18


def test_reset_streams() -> None:
    c = Conversation()
    c.act(CLIENT, lambda e: e.send_headers(1, request("/upload")))
    c.act(CLIENT, lambda e: e.send_data(1, b"z" * 500))
    rs1, _ = c.act(SERVER, lambda e: e.send_headers(1, [(":status", "200")]))
    _, rst1 = c.act(CLIENT, lambda e: e.reset_stream(1, ErrorCodes.CANCEL))
    s3, _ = c.act(CLIENT, lambda e: e.send_headers(3, request("/refused"), end_stream=True))
    _, rst3 = c.act(SERVER, lambda e: e.reset_stream(3, ErrorCodes.REFUSED_STREAM))
    (a, b), skipped = parse(*c.streams())
    assert skipped == {}
    assert (a.reset, a.request_end, a.response_start, a.response_end) == (True, rst1, rs1, -1)
    assert (a.request_bytes, a.status) == (500, 200)
    assert (b.reset, b.request_start, b.response_start, b.response_end, b.status) == (
        True,
        s3,
        -1,
        rst3,
        -1,
    )


def test_server_push_counted_and_its_fields_kept_in_the_table() -> None:
    """PUSH_PROMISE (RFC 9113 §8.4) and the pushed stream make no exchange and are counted; the
    promise's block is decoded all the same, as the response after it refers to its fields."""
    c = Conversation()
    start, end = c.act(CLIENT, lambda e: e.send_headers(1, request("/", "GET"), end_stream=True))
    promised = [*request("/style.css", "GET"), ("content-type", "text/x-pushed")]
    promise = c.act(SERVER, lambda e: e.push_stream(1, 2, promised))
    pushed = c.act(
        SERVER,
        lambda e: (
            e.send_headers(2, [(":status", "200"), ("content-type", "text/x-pushed")]),
            e.send_data(2, b"p {}", end_stream=True),
        ),
    )
    rs, re = c.act(
        SERVER,
        lambda e: e.send_headers(
            1, [(":status", "200"), ("content-type", "text/x-pushed")], end_stream=True
        ),
    )
    client, server = c.streams()
    assert server.data[promise[0] + 3] == 5  # a PUSH_PROMISE frame
    assert len(server.data[rs + 9 : re]) <= 2  # both fields by index: one refers to the promise's
    (e,), skipped = parse(client, server)
    assert (e.request_start, e.request_end, e.response_start, e.response_end) == (
        start,
        end,
        rs,
        re,
    )
    assert (e.status, e.content_type) == (200, "text/x-pushed")
    assert skipped == {PUSH: promise[1] - promise[0] + pushed[1] - pushed[0]}


@pytest.mark.parametrize("size", [65536, 256, 0])
def test_header_table_size_from_settings(size: int) -> None:
    """The client advertises a dynamic table size (RFC 9113 §6.5.2); the server's encoder
    switches to it with a size update (RFC 7541 §6.3), larger than the initial 4096 or smaller;
    later the client raises it again mid-connection."""
    c = Conversation(client_settings={SettingCodes.HEADER_TABLE_SIZE: size})
    values = [f"v{k}-" + "w" * 900 for k in range(30)]  # 30 x ~1 kB: more than 4096 of table
    for k, v in enumerate(values):
        sid = 2 * k + 1
        if k == 15:
            c.act(CLIENT, lambda e: e.update_settings({SettingCodes.HEADER_TABLE_SIZE: 100_000}))
        c.act(CLIENT, lambda e, sid=sid: e.send_headers(sid, request(f"/{sid}"), end_stream=True))
        c.act(
            SERVER,
            lambda e, sid=sid, v=v: e.send_headers(
                sid, [(":status", "200"), ("x-v", v), ("content-type", v[:3])], end_stream=True
            ),
        )
    got, skipped = parse(*c.streams())
    assert skipped == {}
    assert [e.content_type for e in got] == [v[:3] for v in values]
    assert all(e.status == 200 and e.response_end > 0 for e in got)


def test_same_block_bytes_decoded_against_the_current_table() -> None:
    """A block of indexed fields means what the dynamic table holds at the time (RFC 7541
    §2.3.3): after a new entry, the same bytes name another field."""
    c = Conversation()
    kinds = ["text/a", "text/a", "text/b", "text/b", "text/a"]
    spans = []
    for k, kind in enumerate(kinds):
        sid = 2 * k + 1
        c.act(CLIENT, lambda e, sid=sid: e.send_headers(sid, request("/"), end_stream=True))
        spans.append(
            c.act(
                SERVER,
                lambda e, sid=sid, kind=kind: e.send_headers(
                    sid, [(":status", "200"), ("content-type", kind)], end_stream=True
                ),
            )
        )
    client, server = c.streams()
    blocks = [server.data[a + 9 : b] for a, b in spans]
    assert blocks[1] == blocks[3] != blocks[4]  # the same bytes for text/a, then for text/b
    got, skipped = parse(client, server)
    assert skipped == {} and [e.content_type for e in got] == kinds


def test_table_size_update_beyond_what_was_advertised_is_refused() -> None:
    """An encoder may not grow the table past the receiver's SETTINGS_HEADER_TABLE_SIZE
    (RFC 7541 §4.2): the block is counted as undecodable, with the rest of that direction."""
    c = Conversation()
    c.act(CLIENT, lambda e: e.send_headers(1, request("/a"), end_stream=True))
    c.server.encoder.header_table_size = 8192  # the client never allowed more than 4096
    at = c.offset(SERVER)
    with pytest.raises(ProtocolError, match="max allowable table size"):  # h2 refuses it too
        c.act(SERVER, lambda e: e.send_headers(1, [(":status", "200")], end_stream=True))
    client, server = c.streams()
    (e,), skipped = parse(client, server)
    assert (e.status, e.response_start) == (-1, -1)
    assert skipped == {
        "server: HPACK field block that does not decode (decoder state lost)": server.end - at
    }


def test_capture_begun_mid_connection() -> None:
    c = Conversation()
    for sid in (1, 3):
        c.act(CLIENT, lambda e, sid=sid: e.send_headers(sid, request("/"), end_stream=True))
        c.act(SERVER, lambda e, sid=sid: e.send_headers(sid, [(":status", "200")], end_stream=True))
    client, server = c.stream(CLIENT, first=2), c.stream(SERVER, first=2)
    got, skipped = parse(client, server)
    assert got == [] and skipped == {MIDWAY: client.end + server.end}


def test_gap_stops_a_direction_and_counts_what_follows() -> None:
    c = Conversation()
    spans = {}
    for sid in (1, 3, 5):
        spans[sid] = c.act(
            CLIENT, lambda e, sid=sid: e.send_headers(sid, request(f"/{sid}"), end_stream=True)
        )
    resp = {}
    for sid in (1, 3, 5):
        resp[sid] = c.act(
            SERVER, lambda e, sid=sid: e.send_headers(sid, [(":status", "200")], end_stream=True)
        )
    lost_client = next(
        k for k in range(len(c.chunks[CLIENT])) if c.offset_of(CLIENT, k) == spans[3][0]
    )
    lost_server = next(
        k for k in range(len(c.chunks[SERVER])) if c.offset_of(SERVER, k) == resp[5][0]
    )
    client = c.stream(CLIENT, lost=(lost_client,))
    server = c.stream(SERVER, lost=(lost_server,))
    got, skipped = parse(client, server)
    assert [e.stream_id for e in got] == [1]
    assert (got[0].response_start, got[0].response_end) == resp[1]
    assert skipped == {
        f"client: {GAP}": client.end - spans[3][0],
        ORPHAN: resp[3][1] - resp[3][0],  # the answer to a request lost in the gap
        f"server: {GAP}": server.end - resp[5][0],
    }


def test_cut_final_frame() -> None:
    c = Conversation()
    c.act(CLIENT, lambda e: e.send_headers(1, request("/"), end_stream=True))
    rs, _ = c.act(SERVER, lambda e: e.send_headers(1, [(":status", "200")]))
    data_at, end = c.act(SERVER, lambda e: e.send_data(1, b"q" * 100, end_stream=True))
    client, server = c.stream(CLIENT), c.stream(SERVER, cut=end - 40)
    (e,), skipped = parse(client, server)
    assert (e.status, e.response_start, e.response_end, e.response_bytes) == (200, rs, -1, 0)
    assert skipped == {f"server: {CUT}": end - 40 - data_at}


def test_not_http2_and_cut_preface() -> None:
    c = Conversation()
    client, server = c.streams()
    h1 = ByteStream(
        b"GET / HTTP/1.1\r\n\r\n",
        client.piece[:1],
        client.piece_time[:1],
        client.piece_held[:1],
        True,
        True,
    )
    assert parse(h1, server) == ([], {NOT_HTTP2: h1.end + server.end})
    cut = c.stream(CLIENT, cut=10)
    assert parse(cut, server) == ([], {f"client: {CUT}": 10 + server.end})


def test_facade_registration() -> None:
    assert EXCHANGES[HTTP2] is exchanges
    assert HTTP2_SNIFF.match(PREFACE + b"\0\0\0\4")


def test_malformed_frame_stops_its_direction() -> None:
    """A SETTINGS frame whose length is no multiple of 6 (RFC 9113 §6.5) after a request."""
    c = Conversation()
    c.act(CLIENT, lambda e: e.send_headers(1, request("/"), end_stream=True))
    c.act(SERVER, lambda e: e.send_headers(1, [(":status", "200")], end_stream=True))
    client, server = c.streams()
    bad = b"\0\0\7\4\0\0\0\0\0" + bytes(7)
    client = ByteStream(
        client.data + bad, client.piece, client.piece_time, client.piece_held, True, True
    )
    (e,), skipped = parse(client, server)
    assert e.status == 200 and skipped == {f"client: {MALFORMED}": len(bad)}


def _conversation() -> Conversation:
    c = Conversation(client_settings={SettingCodes.HEADER_TABLE_SIZE: 8192})
    for k in range(6):
        sid = 2 * k + 1
        c.act(
            CLIENT,
            lambda e, sid=sid: e.send_headers(
                sid, request(f"/r/{sid}", content_type="application/grpc")
            ),
        )
        c.act(
            CLIENT, lambda e, sid=sid: e.send_data(sid, grpc_message(b"m" * sid), end_stream=True)
        )
        c.act(
            SERVER, lambda e, sid=sid: e.send_headers(sid, [(":status", "200"), ("x-n", str(sid))])
        )
        c.act(SERVER, lambda e, sid=sid: e.send_data(sid, b"r" * sid))
        c.act(
            SERVER,
            lambda e, sid=sid: e.send_headers(
                sid, [("grpc-status", str(sid % 3))], end_stream=True
            ),
        )
    return c


CONVERSATION = _conversation()
FULL = parse(*CONVERSATION.streams())[0]


@settings(max_examples=150, deadline=None)
@given(
    st.integers(0, 5000),
    st.integers(0, 5000),
    st.lists(st.integers(0, 40), max_size=3),
    st.lists(st.tuples(st.integers(0, 5000), st.integers(0, 255)), max_size=3),
)
def test_cuts_gaps_and_flipped_bytes_never_raise(cut_c, cut_s, lost, flips) -> None:
    """Damaged captures of a known conversation: nothing raises, no more bytes are counted than
    there are, and without flipped bytes every field found agrees with the whole capture's."""
    c = CONVERSATION
    client = c.stream(CLIENT, cut=min(cut_c + 24, c.offset(CLIENT)), lost=tuple(lost))
    server = c.stream(SERVER, cut=min(cut_s, c.offset(SERVER)), lost=tuple(lost))
    if flips:
        data = bytearray(server.data)
        for at, value in flips:
            if at < len(data):
                data[at] = value
        server = ByteStream(
            bytes(data),
            server.piece,
            server.piece_time,
            server.piece_held,
            server.closed,
            server.start_seen,
        )
    got, skipped = parse(client, server)
    assert sum(skipped.values()) <= client.end + server.end
    if flips:
        return
    full = {e.stream_id: e for e in FULL}
    for e in got:
        ref = full[e.stream_id]
        for name in (
            "request_start",
            "request_end",
            "response_start",
            "response_end",
            "status",
            "grpc_status",
        ):
            assert getattr(e, name) in (-1, getattr(ref, name)), name
        assert (e.method, e.path, e.headers) == (ref.method, ref.path, ref.headers)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400), st.binary(max_size=400))
def test_random_bytes_never_raise(up: bytes, down: bytes) -> None:
    def stream(data: bytes) -> ByteStream:
        return ByteStream(
            data, np.zeros(1, np.int64), np.zeros(1, np.int64), np.ones(1, bool), True, True
        )

    client, server = stream(PREFACE + up), stream(down)
    _, skipped = parse(client, server)
    assert sum(skipped.values()) <= client.end + server.end


# --- real captures ---------------------------------------------------------------------------


def connections(path) -> list:
    read = read_packets(path, payloads=True)
    out = []
    for conn, up, down in tcp_connections(read.packets):
        counts = StreamBytes()
        client = reassemble(read.packets, read.payloads, up, counts)
        server = reassemble(read.packets, read.payloads, down, counts)
        out.append((conn, client, server))
    return out


def test_grpc_capture(shared_data) -> None:
    """grpc-5-streams: a gRPC C++ client making five unary calls on one connection (and an
    earlier connection with no payload). The truth, from the frame headers and field blocks
    read by hand: streams 1-9, all POST, answered 200 with grpc-status 0; stream 3's answer is
    a trailers-only response sent ten seconds later, after stream 9's request."""
    (empty, *nothing), (conn, client, server) = connections(
        shared_data / "pcap" / "grpc-5-streams.pcap.gz"
    )
    assert exchanges(*nothing, empty) == [] and empty.unparsed == {}
    got = exchanges(client, server, conn)
    assert conn.unparsed == {}
    service = "/RPC_BFCP_SRV.BFCP_GRPC_Service/"
    assert [(e.stream_id, e.path) for e in got] == [
        (1, service + "AddFcs"),
        (3, service + "AddConference"),
        (5, service + "AddUser"),
        (7, service + "AddUser"),
        (9, service + "DelConference"),
    ]
    assert {(e.method, e.authority, e.status, e.grpc_status, e.grpc, e.reset) for e in got} == {
        ("POST", "127.0.0.1:50051", 200, 0, True, False)
    }
    assert [e.request_start for e in got] == [99, 446, 616, 768, 950]
    assert [(e.response_start, e.response_end) for e in got] == [
        (102, 265),
        (493, 505),
        (312, 349),
        (409, 446),
        (505, 542),
    ]
    assert [(e.request_bytes, e.response_bytes) for e in got] == [
        (17, 14),
        (23, 0),
        (58, 5),
        (54, 5),
        (23, 5),
    ]
    assert got[0].headers["user-agent"].startswith("grpc-c++/1.24.3")
    assert server.time(got[1].response_start) - client.time(got[1].request_start) > 9 * 10**9


def test_dns_over_http2_capture(shared_data) -> None:
    """suricata dns-over-http2-post: Firefox asking Cloudflare 34 DNS queries by POST on one
    connection (streams 15-81; six PRIORITY frames open the connection, requests carry a
    priority, the client's SETTINGS raises the server's table to 65536). Every answer is 200
    with a 128-byte DNS message, the last one 256; 57 and 63 are answered after 59 and 65."""
    ((conn, client, server),) = connections(
        shared_data / "pcap" / "suricata-dns-over-http2-post.pcap.gz"
    )
    got = exchanges(client, server, conn)
    assert conn.unparsed == {}
    assert [e.stream_id for e in got] == list(range(15, 82, 2))
    assert {(e.method, e.path, e.authority, e.status, e.content_type, e.grpc) for e in got} == {
        ("POST", "/dns-query", "mozilla.cloudflare-dns.com", 200, "application/dns-message", False)
    }
    assert [e.response_bytes for e in got] == [128] * 33 + [256]
    assert all(48 <= e.request_bytes <= 64 and e.request_end > e.request_start for e in got)
    assert all(e.headers["accept"] == "application/dns-message" for e in got)
    order = [e.stream_id for e in sorted(got, key=lambda e: e.response_start)]
    assert order.index(59) < order.index(57) and order.index(65) < order.index(63)
    assert (
        got[0].request_start,
        got[0].request_end,
        got[0].response_start,
        got[0].response_end,
    ) == (148, 399, 49, 385)
