"""Live capture on loopback: traffic we send is captured, decoded and identified exactly."""

from __future__ import annotations

import socket
import threading

import numpy as np
import pytest

from capture_probe import needs_capture
from tacit.errors import ConfigError
from tacit.formats.live import LiveCapture, filtered_file, wrap_frames
from tacit.formats.pcap import read_packet_buffer, read_packets
from tacit.formats.pcap_write import build_frame, write_pcap
from tacit.model.packets import UDP


def _free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@needs_capture(tool=False)
def test_loopback_udp_is_captured_and_decoded() -> None:
    port = _free_udp_port()
    n = 200
    with LiveCapture("lo", f"udp and dst port {port}") as cap:
        sink = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sink.bind(("127.0.0.1", port))

        def send() -> None:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                for i in range(n):
                    s.sendto(b"packet %06d" % i + bytes(i % 50), ("127.0.0.1", port))

        threading.Timer(0.1, send).start()
        reads = []
        for read in cap.batches(max_seconds=5.0):
            reads.append(read)
            if sum(len(r.packets) for r in reads) >= n:
                cap.stop()
        stats = cap.stats()
        sink.close()
    packets = [r.packets for r in reads]
    got = sum(len(p) for p in packets)
    assert got == n
    assert stats.delivered == n and stats.dropped == 0
    for r in reads:
        assert r.accounting.unaccounted == 0 and r.accounting.ip_packets == len(r.packets)
        assert r.format == "pcap"
    proto = np.concatenate([p.proto for p in packets])
    dport = np.concatenate([p.dport for p in packets])
    length = np.concatenate([p.payload_len for p in packets])
    ident = np.concatenate([p.ident for p in packets])
    time = np.concatenate([p.time for p in packets])
    assert np.all(proto == UDP) and np.all(dport == port)
    assert sorted(length.tolist()) == sorted(13 + i % 50 for i in range(n))
    assert len(np.unique(ident)) == n  # distinct payloads → distinct identifiers
    assert np.all(np.diff(time) >= 0) and np.all(time % 1000 == 0)  # microsecond clock


@needs_capture(tool=False)
def test_counters_leave_out_what_the_kernel_took_before_the_filter() -> None:
    """Between activation and the filter the kernel takes every frame on the interface: with a
    bulk TCP transfer on loopback, a capture filtered to a port nothing is sent to counts none
    of it (its raw libpcap counters do)."""
    done = threading.Event()
    with socket.create_server(("127.0.0.1", 0)) as server:
        sender = socket.create_connection(server.getsockname())
        receiver, _ = server.accept()

        def bulk() -> None:
            chunk = bytes(1 << 16)
            while not done.is_set():
                sender.sendall(chunk)
                receiver.recv_into(bytearray(1 << 17))

        worker = threading.Thread(target=bulk)
        worker.start()
        try:
            with LiveCapture("lo", f"udp and dst port {_free_udp_port()}") as cap:
                for _ in cap.batches(max_seconds=0.3):
                    pass
                stats = cap.stats()
        finally:
            done.set()
            worker.join()
            sender.close()
            receiver.close()
    assert (stats.received, stats.dropped, stats.delivered) == (0, 0, 0)


def test_wrap_frames_round_trips_through_the_reader(tmp_path) -> None:
    frames = [
        build_frame("10.0.0.1", "10.0.0.2", proto=UDP, sport=1, dport=2, payload=bytes([i]) * i)
        for i in range(1, 40)
    ]
    times = [1_700_000_000_000_000_000 + 1000 * i * i for i in range(len(frames))]
    # a batch as next_batch returns it: the frames back to back with (sec, usec, off, caplen)
    data = b"".join(frames)
    offs = np.concatenate([[0], np.cumsum([len(f) for f in frames])[:-1]])
    meta = np.array(
        [
            [t // 10**9, t % 10**9 // 1000, o, len(f)]
            for t, o, f in zip(times, offs, frames, strict=True)
        ],
        dtype=np.uint32,
    ).tobytes()
    wrapped = read_packet_buffer(wrap_frames(data, meta, 1, 65535), "batch").packets
    path = tmp_path / "same.pcap"
    write_pcap(path, frames, times)
    direct = read_packets(path).packets
    for col in ("time", "ident", "src_lo", "dport", "payload_len", "wire_len"):
        assert np.array_equal(getattr(wrapped, col), getattr(direct, col)), col


def test_filtered_file_applies_bpf(tmp_path) -> None:
    frames = [
        build_frame("10.0.0.1", "10.0.0.2", proto=UDP, sport=5, dport=53 + i % 2, payload=b"x")
        for i in range(10)
    ]
    path = tmp_path / "f.pcap"
    write_pcap(path, frames, [10**9 * (i + 1) for i in range(10)], nanosecond=False)
    reads = list(filtered_file(path, "udp dst port 54"))
    got = np.concatenate([r.packets.dport for r in reads])
    assert got.tolist() == [54] * 5


@pytest.mark.parametrize(
    ("interface", "bpf", "message"),
    [("tacit-nosuch0", "", "cannot capture on 'tacit-nosuch0'"), ("lo", "udp and and", "filter")],
)
@needs_capture(tool=False)
def test_bad_interface_or_filter_is_a_config_error(interface, bpf, message) -> None:
    with pytest.raises(ConfigError, match=message):
        LiveCapture(interface, bpf).close()


@pytest.mark.parametrize("seconds", [float("nan"), float("inf"), 0.0, -1.0])
@needs_capture(tool=False)
def test_a_capture_needs_a_positive_finite_duration(seconds) -> None:
    """A NaN deadline never passes: the capture would run forever."""
    with LiveCapture("lo", "") as cap, pytest.raises(ConfigError, match="positive, finite"):
        next(cap.batches(seconds))
