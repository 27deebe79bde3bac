"""Streaming equals batch, wherever a reader or an algorithm has both and says they agree: the
input is cut at random places, fed piece by piece, and the result compared with one pass.

- a text file's head (what format detection reads) against the whole file, gzip or not;
- the pcap reader, chunk by chunk and a read block at a time, against the whole file;
- libpcap's batches of a filtered file (the live capture's decoding) against the file reader;
- Pirate's streaming estimator, batch by batch, against the whole capture at once;
- the one-way latency agent's interval book, batch by batch, against the batch interval split;
- online TraceWeaver, chunk by chunk, against offline, when one window holds the whole stream.
"""

from __future__ import annotations

import itertools
from functools import cache
from pathlib import Path
from tempfile import TemporaryDirectory
from unittest import mock

import numpy as np
import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from tacit.formats import pcap
from tacit.formats.live import filtered_file
from tacit.formats.pcap import PacketAccounting, iter_packet_chunks, read_packets
from tacit.formats.pcap_write import build_frame, link_frame, write_pcap, write_pcapng
from tacit.formats.textio import GZIP_MAGIC, UTF8_BOM, read_bytes, read_head, write_bytes
from tacit.model.packets import TCP, UDP, concat_packets
from tacit.model.roles import infer_roles
from tacit.oneway_latency.agent import AgentParams
from tacit.oneway_latency.interval_book import IntervalBook
from tacit.oneway_latency.intervals import IntervalParams, IntervalSplit
from tacit.oneway_latency.stream import PacketStream
from tacit.reconstruct.callgraph import learn_callgraph
from tacit.reconstruct.online import OnlineParams, reconstruct_streamed
from tacit.reconstruct.traceweaver import TraceWeaverParams, reconstruct_traceweaver
from tacit.response_latency.estimator import (
    ALGORITHMS,
    StreamingEstimator,
    concat_estimates,
    estimate_response_latency,
)
from tacit.response_latency.params import PirateParams
from tacit.simulate import load_app, simulate
from tacit.simulate.request_streams import RequestStreamParams, simulate_requests

MS = 1_000_000
T0 = 1_700_000_000 * 10**9


cut_points = st.lists(st.floats(0, 1), max_size=12)
"""Where to cut an input, as fractions of its length (repeated cuts make empty pieces: a live
source may deliver nothing)."""


def pieces(n: int, points: list[float]) -> list[tuple[int, int]]:
    """The ``(start, end)`` of the pieces ``n`` items cut at ``points`` make."""
    bounds = [0, *sorted(int(f * n) for f in points), n]
    return list(itertools.pairwise(bounds))


def assert_same_columns(a, b) -> None:
    """Two column tables hold the same values in every column."""
    for column, values in a.columns().items():
        assert np.array_equal(getattr(b, column), values), column


# --- files -----------------------------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(
    data=st.binary(max_size=3000), size=st.integers(0, 4000), gz=st.booleans(), bom=st.booleans()
)
def test_a_files_head_is_the_start_of_the_whole_read(
    data: bytes, size: int, gz: bool, bom: bool
) -> None:
    """Whole or in part, a file reads the same, after a UTF-8 byte-order mark if it has one."""
    assume(gz or bom or not data.startswith(GZIP_MAGIC))  # gzip is told by its magic
    assume(not data.startswith(UTF8_BOM))  # a second mark would be content
    with TemporaryDirectory() as tmp:
        path = Path(tmp) / ("f.gz" if gz else "f")
        write_bytes(path, UTF8_BOM + data if bom else data)
        assert read_bytes(path) == data
        assert read_head(path, size) == data[:size]


# --- capture files -------------------------------------------------------------------------

frame = st.builds(
    lambda v6, proto, sport, payload, ip_id: build_frame(
        "2001:db8::1" if v6 else "10.0.0.1",
        "2001:db8::2" if v6 else "10.0.0.2",
        proto=proto,
        sport=sport,
        dport=80,
        payload=payload,
        ip_id=0 if v6 else ip_id,
    ),
    st.booleans(),
    st.sampled_from([TCP, UDP]),
    st.integers(0, 65535),
    st.binary(max_size=60),
    st.integers(0, 65535),
)
ARP = link_frame(bytes(28), ethertype=0x0806)
frames = st.lists(st.one_of(frame, st.just(ARP)), max_size=12)
"""Ethernet frames: IP packets and the odd frame that is not one (counted, not a row)."""


@settings(max_examples=40, deadline=None)
@given(
    frames=frames,
    ng=st.booleans(),
    chunk=st.integers(1, 14),
    block=st.integers(1, 300),
    cut_bytes=st.integers(0, 20),
)
def test_chunked_pcap_reading_equals_the_whole_read(
    frames: list[bytes], ng: bool, chunk: int, block: int, cut_bytes: int
) -> None:
    """Chunks of ``chunk`` records, read ``block`` bytes at a time (a truncated last record
    included), hold the whole read's rows and accounting."""
    times = [T0 + 1000 * i for i in range(len(frames))]
    with TemporaryDirectory() as tmp:
        path = Path(tmp) / ("c.pcapng" if ng else "c.pcap")
        (write_pcapng if ng else write_pcap)(path, frames, times)
        data = path.read_bytes()
        path.write_bytes(data[: len(data) - min(cut_bytes, len(data) - 28)])
        whole = read_packets(path, payloads=True)
        with mock.patch.object(pcap, "_READ_BLOCK", block):
            parts = list(iter_packet_chunks(path, chunk, payloads=True))
    assert all(p.accounting.records <= chunk for p in parts)
    assert sum((p.accounting for p in parts), PacketAccounting()) == whole.accounting
    assert_same_columns(whole.packets, concat_packets([p.packets for p in parts]))
    got = [p.payloads[i] for p in parts for i in range(len(p.packets))]
    assert got == [whole.payloads[i] for i in range(len(whole.packets))]


@settings(max_examples=25, deadline=None)
@given(frames=frames, batch=st.integers(1, 14))
def test_libpcap_batches_decode_as_the_file(frames: list[bytes], batch: int) -> None:
    """A file read by libpcap in batches of ``batch`` frames and decoded as live frames are
    (:func:`~tacit.formats.live.wrap_frames`) gives the file reader's rows; but ``record``,
    which numbers each batch's frames afresh."""
    pytest.importorskip("pcapy")
    times = [T0 + 1000 * i for i in range(len(frames))]
    with TemporaryDirectory() as tmp:
        path = Path(tmp) / "f.pcap"
        write_pcap(path, frames, times, nanosecond=False)
        whole = read_packets(path)
        reads = list(filtered_file(path, "", batch_frames=batch))
    assert all(r.accounting.records <= batch for r in reads)
    assert sum((r.accounting for r in reads), PacketAccounting()) == whole.accounting
    joined = concat_packets([r.packets for r in reads])
    for column, values in whole.packets.columns().items():
        if column != "record":
            assert np.array_equal(getattr(joined, column), values), column


# --- Pirate -------------------------------------------------------------------------------


@cache
def capture() -> tuple:
    """A few seconds of simulated clients (packets in time order), split over 1 s epochs."""
    sim = simulate_requests(RequestStreamParams(clients=3, duration_ns=3_000 * MS, seed=5))
    return sim.packets


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@settings(max_examples=15, deadline=None)
@given(points=cut_points)
# An empty batch closed every open epoch, as a flush does: those epochs then came out twice.
@example(points=[0.01, 0.01])
def test_pirate_streaming_equals_batch(algorithm: str, points: list[float]) -> None:
    """The estimator's module docstring: "batch and streaming results agree"."""
    packets = capture()
    params = PirateParams(epoch_ns=1_000 * MS)
    batch = estimate_response_latency(packets, params, algorithm=algorithm)
    stream = StreamingEstimator(params, algorithm=algorithm)
    parts = [stream.feed(packets.take(np.arange(a, b))) for a, b in pieces(len(packets), points)]
    joined = concat_estimates([*parts, stream.flush()])
    for column in ("connection", "epoch_start", "epoch_end", "latency_ns", "samples"):
        assert np.array_equal(getattr(joined, column), getattr(batch, column)), column
    for column in ("used_packets", "gap_samples", "discarded_gaps"):
        assert np.array_equal(getattr(joined, column), getattr(batch, column)), column
    assert joined.accounting == batch.accounting
    assert len(batch) > 0  # the capture does give estimates


# --- one-way latency intervals ----------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    times=st.lists(st.integers(-5 * MS, 60 * MS), max_size=40).map(sorted),
    length=st.integers(1, 20 * MS),
    grace=st.integers(0, 5 * MS),
    points=cut_points,
)
def test_interval_book_equals_the_interval_split(
    times: list[int], length: int, grace: int, points: list[float]
) -> None:
    """The agent's intervals, closed batch by batch as the capture clock passes (each batch in
    time order, the clock its last time), hold the packets of the batch split's intervals."""
    params = AgentParams(intervals=IntervalParams(start_ns=0, length_ns=length), grace_ns=grace)
    stream = PacketStream(np.arange(len(times), dtype=np.uint64) * 7919 + 1, times)
    split = IntervalSplit(stream, params.intervals, "sender")
    book = IntervalBook(params.intervals, params.rda, params.grace_ns)
    closed = []
    for a, b in pieces(len(times), points):
        book.add(stream.ident[a:b], stream.time[a:b])
        if b > a:
            closed += book.close(int(stream.time[b - 1]))
    closed += book.close(None)
    assert book.counts["after_close"] == 0 and book.duplicates == 0
    assert book.counts["before_start"] == split.before_start
    assert [i for i, _, _ in closed] == split.indices.tolist()
    for i, cache_, n in closed:
        want = split.cache(i)
        assert n == len(want)
        assert np.array_equal(cache_.ids, want.ids) and np.array_equal(cache_.ts, want.ts), i


# --- online reconstruction -------------------------------------------------------------------


@cache
def blind_spans() -> tuple:
    """A second of a simulated app's blind spans, and the call graph learnt from test traces."""
    app = load_app(None)
    graph = learn_callgraph(infer_roles(simulate(app, 20, n_requests=400, seed=7)).spans)
    observed = infer_roles(simulate(app, 100, duration_s=1.0, seed=11, record_threads=False))
    return observed.without_truth(), graph


FAST = TraceWeaverParams(max_components=2, max_iterations=4)
ONE_WINDOW = OnlineParams(
    window_ns=10**15, lookahead_ns=10**15, max_request_ns=10**15, lateness_ns=0
)
"""A window longer than the stream: no round runs before it ends."""


@settings(max_examples=8, deadline=None)
@given(chunk=st.integers(1, 2000))
def test_online_reconstruction_in_one_window_equals_offline(chunk: int) -> None:
    """Streamed in chunks, RPC sides arriving in different chunks (links by stream position),
    spans reconstructed at the end of the stream are those offline reconstruction gets, in end
    order, and come back to their rows: the same parents, scores and alternatives."""
    spans, graph = blind_spans()
    offline = reconstruct_traceweaver(spans, graph, FAST)
    online = reconstruct_streamed(spans, graph, FAST, ONE_WINDOW, chunk_size=chunk)
    assert online.info["rounds"] == 1
    assert np.array_equal(online.parent, offline.parent)
    assert np.array_equal(online.score, offline.score, equal_nan=True)
    assert online.alternatives == offline.alternatives
    assert online.unmapped == offline.unmapped
