"""Replaying a capture as the sender stream: duplicates, repetitions, time scale, and RDA on it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tacit.errors import ConfigError, InputError
from tacit.formats.pcap import read_packets
from tacit.formats.pcap_write import build_frame, write_pcap
from tacit.hashing import hash64
from tacit.model.packets import UDP, PacketTable
from tacit.oneway_latency.comparison import compare_methods
from tacit.oneway_latency.identifiers import derive_seeds
from tacit.oneway_latency.replay import ReplayParams, first_occurrences, replay_capture
from tacit.oneway_latency.simulate import StreamParams, replay_stream

T0 = 1_700_000_000_000_000_000


@pytest.fixture(scope="module")
def capture(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, np.ndarray]:
    """40 distinct UDP packets 1 ms apart, then packet 5 again (same bytes: same identifier)."""
    path = tmp_path_factory.mktemp("replay") / "udp.pcap"
    frames = [
        build_frame(
            "10.0.0.1", "10.0.0.2", proto=UDP, sport=4000, dport=53, ip_id=i, payload=b"q%d" % i
        )
        for i in range(40)
    ]
    frames.append(frames[5])
    times = T0 + 1_000_000 * np.arange(41)
    times[-1] = times[-2] + 300_000
    write_pcap(path, frames, times.tolist())
    return path, times


def read(path: Path) -> PacketTable:
    return read_packets(path).packets


def test_capture_replayed_once_keeps_ids_and_timing_and_counts_duplicates(capture):
    path, times = capture
    table = read(path)
    replay = replay_capture(table)
    assert replay.capture_packets == 41 and replay.duplicates == 1 and replay.distinct == 40
    assert replay.repetitions == 1 and replay.collisions == 0 and replay.time_scale == 1.0
    assert replay.stream.ident.tolist() == table.ident[:40].tolist()
    assert replay.stream.time.tolist() == (times[:40] - T0).tolist()
    assert replay.source == str(path) and "1 duplicate identifiers left out" in replay.describe()


def test_repetitions_get_fresh_hashed_ids_back_to_back(capture):
    path, _ = capture
    table = read(path)
    replay = replay_capture(table, ReplayParams(packets=100, seed=7))
    s = replay.stream
    assert len(s) == 100 and replay.repetitions == 3
    assert len(np.unique(s.ident)) == 100
    seeds = derive_seeds(7, "replay repetition", 3)
    base = table.ident[:40]
    assert s.ident[:40].tolist() == base.tolist()
    assert s.ident[40:80].tolist() == hash64(base, int(seeds[1])).tolist()
    assert s.ident[80:].tolist() == hash64(base, int(seeds[2]))[:20].tolist()
    # 39 ms of capture, then one mean gap (1 ms) before the next repetition starts
    assert s.time[40] == 40_000_000 and s.time[80] == 80_000_000
    assert (np.diff(s.time) > 0).all()
    assert "fresh identifiers per repetition" in replay.describe()


def test_rate_rescales_time_and_start(capture):
    path, _ = capture
    replay = replay_capture(read(path), ReplayParams(packets=400, rate_pps=1e6, start_ns=5))
    t = replay.stream.time
    assert t[0] == 5
    assert (len(t) - 1) / ((t[-1] - t[0]) / 1e9) == pytest.approx(1e6, rel=1e-6)
    assert replay.time_scale == pytest.approx(1e-3, rel=1e-6)


def test_cut_to_fewer_packets_than_the_capture(capture):
    path, _ = capture
    replay = replay_capture(read(path), ReplayParams(packets=10))
    assert len(replay.stream) == 10 and replay.repetitions == 1


def test_bad_input_and_parameters(capture):
    path, _ = capture
    table = read(path)
    with pytest.raises(InputError, match="no IP packet"):
        replay_capture(table.take(np.zeros(len(table), bool)), source="empty.pcap")
    with pytest.raises(ConfigError):
        ReplayParams(packets=0)
    with pytest.raises(ConfigError):
        ReplayParams(rate_pps=-1.0)
    same_time = table.take(np.array([0, 1]))
    same_time.time[:] = 7
    with pytest.raises(InputError, match="one timestamp"):
        replay_capture(same_time, ReplayParams(rate_pps=1e6))


def test_first_occurrences():
    assert first_occurrences(np.array([5, 3, 5, 3, 9], np.uint64)).tolist() == [
        True,
        True,
        False,
        False,
        True,
    ]


def test_rda_on_a_replayed_synthetic_capture_is_exact(capture):
    path, _ = capture
    replay = replay_capture(read(path), ReplayParams(packets=40_000, rate_pps=1e6))
    sim = replay_stream(replay.stream, StreamParams(loss_rate=0.01, reorder_rate=0.5, seed=3))
    assert sim.lost > 0 and sim.reordered > 0
    scores = compare_methods(sim.sender, sim.receiver, 100_000, methods=("rda", "lda"))
    assert scores["rda"].details["decoded"] == scores["rda"].intervals
    assert scores["rda"].mean_relative_error <= 1e-9
    assert scores["rda"].std_relative_error < 0.05
    assert scores["lda"].mean_relative_error > scores["rda"].mean_relative_error


@pytest.fixture(scope="module")
def real_captures(shared_data: Path) -> Path:
    return shared_data / "pcap"


def test_real_capture_tiled_and_measured(real_captures):
    table = read(real_captures / "zeek-http-1000-requests-one-dropped-response.pcap.gz")
    replay = replay_capture(table, ReplayParams(packets=60_000, rate_pps=2e6, seed=1))
    assert replay.duplicates == len(table) - len(np.unique(table.ident))
    assert len(replay.stream) == 60_000 and replay.collisions == 0
    assert len(np.unique(replay.stream.ident)) == 60_000
    sim = replay_stream(replay.stream, StreamParams(loss_rate=0.005, reorder_rate=0.3, seed=2))
    scores = compare_methods(sim.sender, sim.receiver, 100_000, methods=("rda",))
    assert scores["rda"].details["decoded"] == scores["rda"].intervals > 0
    assert scores["rda"].mean_relative_error <= 1e-9


def test_real_capture_with_repeated_identifiers_is_accounted(real_captures):
    table = read(real_captures / "suricata-ipv6-denial6-6.pcap.gz")
    replay = replay_capture(table)
    distinct = len(np.unique(table.ident))
    assert replay.distinct == distinct < len(table)
    assert replay.duplicates + replay.distinct == replay.capture_packets == len(table)
    assert len(replay.stream) == distinct
