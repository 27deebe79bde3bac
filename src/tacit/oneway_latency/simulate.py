"""Packet streams between two capture points, with loss, reordering and ground truth.

The models of the RDA paper's simulation (§VII-A): Weibull one-way delays ("the same with that
used in LDA and FineComb", shape 0.6–0.7), random loss, and reordering at interval boundaries
("the problematic reordered packets occurred at the beginning and the ending period of the
measurement interval", FineComb's models). The sender's stream is synthetic (Poisson arrivals
at ``rate_pps``) or replayed from given arrays; every packet draws a one-way delay from a
Weibull distribution (shape ``delay_shape``, scale ``delay_scale_ns``), is lost with
probability ``loss_rate``, and — if it was sent within ``reorder_window_ns`` of the end of its
interval — is held past the next boundary with probability ``reorder_rate`` (it then arrives
at that boundary plus its own delay, overtaken by packets sent after it, and the receiver
counts it in the next interval). Packets also cross boundaries on their own when their delay
carries them over.

Where tacit departs or chooses. §VII replays two real traces (DC and Univ, Table I); the
synthetic Poisson sender is tacit's, and a capture can be replayed instead
(:mod:`~tacit.oneway_latency.replay`). §VII-A calls α the shape and gives it 0.6–0.7, though
its formula ``1 − exp((−x/α)^β)`` puts α where a scale goes; tacit takes 0.6–0.7 as the shape
(the RDA authors' released configuration below has shape 0.7). §VII gives no delay scale,
packet rate, interval length, or loss and reordering rate (it varies the set difference
instead, :mod:`~tacit.oneway_latency.sweep`), so these defaults are tacit's: 1 Mpps for 0.1 s
(10 intervals of 10 ms), shape 0.65 (the middle of the paper's range), scale 10 µs (median
delay ≈ 5.7 µs, mean ≈ 14 µs: a data-centre path), loss 10^-3, and 10 % of the packets sent in
the last 100 µs of an interval reordered past the boundary (≈ 10 per interval). (The RDA
authors' released code, yongquanf/RDA ``config/RDA.cfg``, replays its traces with Weibull shape
0.7, scale 6.647 × 10 time units, and drop and reorder probabilities of 0.1 each.)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tacit.budget import check_allocation
from tacit.errors import ConfigError
from tacit.formats.pcap_write import build_frame, write_pcap
from tacit.hashing import hash64
from tacit.model.packets import UDP
from tacit.oneway_latency.intervals import IntervalParams
from tacit.oneway_latency.stream import PacketStream
from tacit.oneway_latency.truth import IntervalTruth, latency_truth


@dataclass(frozen=True)
class StreamParams:
    """Stream simulation parameters; see the module docstring."""

    rate_pps: float = 1_000_000.0
    duration_ns: int = 100_000_000
    delay_shape: float = 0.65
    delay_scale_ns: float = 10_000.0
    loss_rate: float = 1e-3
    reorder_rate: float = 0.1
    reorder_window_ns: int = 100_000
    intervals: IntervalParams = field(default_factory=IntervalParams)
    seed: int = 0
    packets: int | None = None
    """Exactly this many synthetic packets over ``duration_ns`` (None: a Poisson count)."""

    def __post_init__(self) -> None:
        if self.packets is not None and self.packets < 0:
            raise ConfigError(f"packets must be non-negative, got {self.packets}")
        for name in ("loss_rate", "reorder_rate"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ConfigError(f"{name} must be a probability, got {getattr(self, name)}")
        if self.delay_shape <= 0 or self.delay_scale_ns <= 0 or self.rate_pps <= 0:
            raise ConfigError("rate, delay shape and delay scale must be positive")


@dataclass(frozen=True)
class SimulatedStream:
    """Both sides' streams (the receiver's in order of arrival), the truth, and what was done."""

    sender: PacketStream
    receiver: PacketStream
    truth: IntervalTruth
    lost: int
    reordered: int


RUN_BYTES_PER_PACKET = 128
"""What a simulated run holds per packet, about: the sender's and the receiver's streams, the
truth and the intervals' work arrays. A stream is refused up front when that would not fit
(:func:`~tacit.budget.check_allocation`), rather than ending the process half-way."""


def poisson_sender(params: StreamParams) -> PacketStream:
    """Poisson arrivals over ``duration_ns`` from the first interval boundary; identifiers are
    distinct (a bijective hash of the packet's sequence number). With ``params.packets`` the
    process is conditioned on that count: its arrival times are then uniform order
    statistics over the duration."""
    rng = np.random.default_rng(params.seed)
    n = params.packets
    if n is None:
        n = int(rng.poisson(params.rate_pps * params.duration_ns / 1e9))
    check_allocation((n, RUN_BYTES_PER_PACKET), np.uint8, f"a simulated stream of {n:,} packets")
    time = params.intervals.start_ns + np.sort(rng.integers(0, params.duration_ns, n))
    return PacketStream(hash64(np.arange(n, dtype=np.uint64), params.seed), time)


def replay_stream(sender: PacketStream, params: StreamParams) -> SimulatedStream:
    """Delay, lose and reorder the given sender stream; see the module docstring."""
    rng = np.random.default_rng([params.seed, 1])
    n = len(sender)
    delay = np.rint(rng.weibull(params.delay_shape, n) * params.delay_scale_ns).astype(np.int64)
    arrival = sender.time + delay
    iv = params.intervals
    next_boundary = iv.start(iv.index(sender.time) + 1)
    near_end = next_boundary - sender.time <= params.reorder_window_ns
    reordered = near_end & (rng.random(n) < params.reorder_rate)
    arrival[reordered] = next_boundary[reordered] + delay[reordered]
    lost = rng.random(n) < params.loss_rate
    kept = np.flatnonzero(~lost)
    kept = kept[np.argsort(arrival[kept], kind="stable")]
    receiver = PacketStream(sender.ident[kept], arrival[kept])
    return SimulatedStream(
        sender=sender,
        receiver=receiver,
        truth=latency_truth(sender, receiver, iv),
        lost=int(lost.sum()),
        reordered=int((reordered & ~lost).sum()),
    )


def simulate_stream(params: StreamParams | None = None) -> SimulatedStream:
    """A synthetic Poisson stream through the simulated path."""
    params = params or StreamParams()
    return replay_stream(poisson_sender(params), params)


CAPTURE_EPOCH_NS = 1_700_000_000 * 10**9
"""Where :func:`write_captures` puts a stream's time 0: an epoch time on an interval boundary."""


def write_captures(sim: SimulatedStream, sender: Path, receiver: Path) -> None:
    """A simulated stream as the two capture points' pcap files (time 0 at
    :data:`CAPTURE_EPOCH_NS`): UDP datagrams whose payload is the packet's number in the sender's
    stream, so that every packet has its own identifier, as the agents' captures."""
    number = {int(x): n for n, x in enumerate(sim.sender.ident)}

    def frames(ident: np.ndarray) -> list[bytes]:
        return [
            build_frame(
                "10.1.0.1",
                "10.2.0.2",
                proto=UDP,
                sport=4000,
                dport=5000,
                payload=number[int(x)].to_bytes(8, "big") + b"p" * (number[int(x)] % 23),
            )
            for x in ident
        ]

    for path, side in ((sender, sim.sender), (receiver, sim.receiver)):
        write_pcap(path, frames(side.ident), (CAPTURE_EPOCH_NS + side.time).tolist())
