"""Spans from packets that come in batches: the same spans as from the whole capture, whatever
the batch size, each exchange given once; what cannot be read is counted by reason."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from app_captures import NAMES, ok, request, three_tier
from capture_probe import needs_capture
from tacit.formats.capture_spans import (
    NO_RESPONSE,
    ServiceMap,
    read_capture_spans,
    spans_from_read,
)
from tacit.formats.capture_stream import GIVEN_UP_HTTP2, CaptureSpanStream
from tacit.formats.live import LiveCapture, capture_file_batches
from tacit.formats.pcap import join_reads
from tacit.formats.pcap_write import write_pcap
from tacit.model.packets import ACK, FIN
from tacit.simulate import load_app, simulate
from tacit.simulate.app_packets import app_packets
from tcp_conversations import MS, Conversation, capture_all


@pytest.fixture(scope="module")
def app_capture(tmp_path_factory) -> tuple[Path, ServiceMap]:
    """A simulated app's RPCs over HTTP/1.1 (keep-alive) and gRPC (one HTTP/2 connection per
    caller and callee, many streams each)."""
    spans = simulate(load_app(None), 100, n_requests=120, seed=4)
    packets = app_packets(spans)
    path = tmp_path_factory.mktemp("stream") / "app.pcap"
    write_pcap(path, packets.frames, packets.times)
    return path, ServiceMap(addresses=packets.service_map())


def rows(table) -> list[tuple]:
    s = table.strings
    return sorted(
        (s[int(a)], s[int(b)], s[int(c)], int(k), int(t0), int(t1))
        for a, b, c, k, t0, t1 in zip(
            table.service, table.endpoint, table.peer, table.kind, table.start, table.end,
            strict=True,
        )
    )  # fmt: skip


def streamed(
    path: Path, batch: int, stream: CaptureSpanStream, flush: bool = True, bpf: str = ""
) -> list:
    got = []
    for read in capture_file_batches(path, bpf, batch, payloads=True):
        got += rows(stream.feed(read).spans)
    if flush:
        got += rows(stream.flush().spans)
    return sorted(got)


@pytest.mark.parametrize("batch", [7, 160, 1_000_000])
def test_batches_give_the_spans_of_the_whole_capture(app_capture, batch: int) -> None:
    path, names = app_capture
    whole = read_capture_spans(path, names)
    stream = CaptureSpanStream(names)
    assert streamed(path, batch, stream) == rows(whole.spans)
    acc = stream.accounting
    assert acc.exchanges.as_dict() == whole.accounting.as_dict()
    assert acc.exchanges.paired > 200
    assert acc.packets == acc.tcp_packets
    assert acc.unparsed == {} and acc.ignored_packets == 0
    assert stream.kept_packets == 0


def test_connections_are_cut_where_quiet_http2_included(app_capture) -> None:
    """What is kept between batches stays a few packets: keep-alive HTTP/1.1 and long-lived
    HTTP/2 connections alike are cut where no exchange was open, HTTP/2 going on with the
    header compression state it had there."""
    path, names = app_capture
    stream = CaptureSpanStream(names)
    peak = total = 0
    for read in capture_file_batches(path, "", 7, payloads=True):
        stream.feed(read)
        peak, total = max(peak, stream.kept_packets), total + len(read.packets)
    assert peak < total / 20, (peak, total)


@needs_capture(tool=False)
def test_a_capture_file_read_through_a_filter_gives_its_payloads_too(app_capture) -> None:
    """A capture file through a BPF filter is read by libpcap (``tacit serve --capture-pcap
    --capture-filter``, with libpcap's microsecond times): in batches, the spans of the whole
    filtered capture, as many as without the filter."""
    path, names = app_capture
    whole = join_reads(list(capture_file_batches(path, "tcp", 1_000_000, payloads=True)), path)
    got = streamed(path, 500, CaptureSpanStream(names), bpf="tcp")
    assert got == rows(spans_from_read(whole, names).spans)
    assert len(got) == len(read_capture_spans(path, names).spans)


def test_every_packet_is_counted(app_capture) -> None:
    path, names = app_capture
    stream = CaptureSpanStream(names)
    streamed(path, 50, stream)
    total = sum(len(r.packets) for r in capture_file_batches(path, "", 1_000_000))
    assert stream.accounting.packets == total


def test_an_answer_that_never_comes_is_counted_once_it_is_too_old(tmp_path: Path) -> None:
    later = Conversation(("10.0.0.9", 41000), ("10.0.0.3", 80))
    later.handshake(100 * MS)  # the capture's clock passes 30 ms + 10 ms
    capture_all(tmp_path, [*three_tier([10, 30], answer_last=False), later])
    path = tmp_path / "all.pcap"
    stream = CaptureSpanStream(NAMES, max_carry_ns=10 * MS)
    got = streamed(path, 1, stream, flush=False)
    assert len(got) == 6
    assert stream.accounting.exchanges.left_out == {NO_RESPONSE: 1}
    assert stream.kept_packets == 3  # the later connection's handshake, nothing read yet
    patient = CaptureSpanStream(NAMES)
    assert streamed(path, 1, patient, flush=False) == got
    assert patient.accounting.exchanges.left_out == {} and patient.kept_packets > 0
    assert rows(patient.flush().spans) == []
    assert patient.accounting.exchanges.left_out == {NO_RESPONSE: 1}


def test_http2_beyond_its_byte_budget_is_given_up_and_counted(app_capture) -> None:
    path, names = app_capture
    whole = read_capture_spans(path, names)
    http1 = [r for r in rows(whole.spans) if not r[1].startswith("/")]  # gRPC methods: /pkg.S/M
    stream = CaptureSpanStream(names, max_http2_bytes=300)
    got = streamed(path, 400, stream)
    assert [r for r in got if not r[1].startswith("/")] == http1
    assert len(got) < len(rows(whole.spans))
    acc = stream.accounting
    assert acc.unparsed[GIVEN_UP_HTTP2] > 300 and acc.ignored_packets > 0


def test_a_connection_never_quiet_at_a_batch_end_is_cut_where_it_was(tmp_path: Path) -> None:
    """Requests two at a time on one connection (the second sent before the first is
    answered), pairs 10 ms apart, read in batches that end inside a pair: the connection is
    cut before a pair (every earlier exchange had ended), not given up when it has been busy
    at every batch's end for longer than ``max_carry_ns``."""
    conv = Conversation()
    conv.handshake(0)
    for k in range(12):
        t = 10 * MS * (k + 1)
        conv.send(t, 0, request("/a", f"a{k}"))
        conv.send(t + 1 * MS, 0, request("/b", f"b{k}"))
        conv.send(t + 3 * MS, 1, ok(b"a"))
        conv.send(t + 4 * MS, 1, ok(b"b"))
    capture_all(tmp_path, [conv])
    path = tmp_path / "all.pcap"
    whole = rows(read_capture_spans(path).spans)
    stream = CaptureSpanStream(max_carry_ns=15 * MS)
    assert streamed(path, 3, stream) == whole and len(whole) == 48
    assert stream.accounting.exchanges.left_out == {}


@pytest.mark.live
@needs_capture(tool=False)
def test_a_real_grpc_channel_is_read_on_from_batch_to_batch() -> None:
    """grpcio's client and server on loopback, calls one after another on one channel with a
    request id each (so HPACK's dynamic table changes all along), captured live and read as
    libpcap delivers the packets, the connection cut between calls: every call a span pair,
    nothing unparsed, the same spans as from all the packets at once."""
    import grpc

    def say(request: bytes, context) -> bytes:
        return request[::-1]

    handler = grpc.method_handlers_generic_handler(
        "echo.Echo", {"Say": grpc.unary_unary_rpc_method_handler(say)}
    )
    server = grpc.server(ThreadPoolExecutor(max_workers=4))
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    calls, reads, parts, peak = 60, [], [], 0
    stream = CaptureSpanStream()
    # a trickle of packets takes a block of the ring each (formats.live.BUFFER_BYTES): room
    # for seconds of it, in case this thread is held up on a busy machine
    with LiveCapture("lo", f"tcp port {port}", payloads=True, buffer_bytes=128 << 20) as cap:

        def client() -> None:
            with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
                call = channel.unary_unary("/echo.Echo/Say")
                for k in range(calls):
                    assert call(b"hello %d" % k, metadata=(("x-request-id", f"r{k}"),))
                    time.sleep(0.01)
            time.sleep(0.3)  # the channel's closing through the capture
            cap.stop()

        threading.Thread(target=client, daemon=True).start()
        for read in cap.batches(max_seconds=30):
            reads.append(read)
            parts += rows(stream.feed(read).spans)
            peak = max(peak, stream.kept_packets)
        stats = cap.stats()
    server.stop(None)
    parts += rows(stream.flush().spans)
    whole = join_reads(reads, "live:lo")
    why = f"{len(whole.packets)} packets, {stream.accounting.unparsed or 'none'} unparsed, {stats}"
    assert stats.dropped == 0, why
    assert len(reads) > 5 and peak < len(whole.packets) / 4, why  # cut between the calls
    assert stream.accounting.exchanges.paired == calls and stream.accounting.unparsed == {}
    assert sorted(parts) == rows(spans_from_read(whole).spans)


def test_a_source_that_runs_on_forgets_connections_long_quiet(tmp_path: Path) -> None:
    """300 short connections a second apart: those quiet for longer than ``forget_ns`` are
    forgotten, so the connections remembered stay few, and the spans are those of the whole
    capture."""
    convs = []
    for k in range(300):
        conv = Conversation(("10.0.0.1", 20000 + k), ("10.0.0.2", 80))
        t = conv.handshake(1000 * MS * k)
        conv.send(t + MS, 0, request("/a", f"r{k}"))
        conv.send(t + 3 * MS, 1, ok(b"a"))
        conv.packet(t + 4 * MS, 0, flags=FIN | ACK)
        conv.packet(t + 5 * MS, 1, flags=FIN | ACK)
        convs.append(conv)
    capture_all(tmp_path, convs)
    path = tmp_path / "all.pcap"
    stream = CaptureSpanStream(forget_ns=10_000 * MS, min_compact=40)
    most = 0
    got = []
    for read in capture_file_batches(path, "", 20, payloads=True):
        got += rows(stream.feed(read).spans)
        most = max(most, stream.connections)
    got += rows(stream.flush().spans)
    assert sorted(got) == rows(read_capture_spans(path).spans) and len(got) == 600
    assert most < 60, most
