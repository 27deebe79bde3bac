"""A real capture replayed as the sender's stream of the RDA paper's §VII simulation.

RDA's evaluation (§VII) replays a real packet stream at the sender and draws what happens on
the path (Weibull delays, loss, reordering at interval boundaries;
:func:`~tacit.oneway_latency.simulate.replay_stream`). The stream's packets are a capture's
rows: :attr:`~tacit.model.packets.PacketTable.ident` is the path-invariant 64-bit identifier
both capture points would compute, :attr:`~tacit.model.packets.PacketTable.time` the send time.
The caller reads the capture (:func:`tacit.formats.pcap.read_packets`); nothing here opens a
file.

What a replay changes, and counts:

* Duplicate identifiers. A capture may hold packets with identical identifiers (a
  retransmission with the same content, a flood of identical probes): both capture points would
  see them as one identifier, which no synopsis here can tell apart. The first of each is
  replayed; the others are left out and counted in ``duplicates``.
* Repetitions. The captures at hand hold 10^2–10^4 packets, fewer than an interval of the
  simulation needs; ``packets`` asks for the capture to be repeated back to back until there
  are that many (as ``tcpreplay --loop`` does). Repetition 0 keeps the capture's identifiers;
  repetition r ≥ 1 gets fresh ones, the capture's identifiers hashed with a seed derived from
  r (:func:`tacit.hashing.hash64`, a bijection, so a repetition never collides with itself).
  A collision between repetitions (probability about n²/2^64) is left out and counted in
  ``collisions``. Each repetition starts one mean inter-packet gap after the previous ends.
* Time scale. ``rate_pps`` rescales time so that the mean rate is that (as
  ``tcpreplay --pps`` does), keeping the capture's relative timing and bursts; the factor
  applied is reported. The replay starts at ``start_ns`` (the first interval boundary).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tacit.errors import ConfigError, InputError
from tacit.hashing import hash64
from tacit.model.packets import PacketTable
from tacit.oneway_latency.identifiers import derive_seeds
from tacit.oneway_latency.stream import PacketStream


@dataclass(frozen=True)
class ReplayParams:
    """How to replay a capture; see the module docstring.

    ``packets``: the replay's length, the capture cut or repeated to this many packets (None:
    the capture once). ``rate_pps``: mean packet rate after rescaling (None: the capture's own
    timing).
    """

    packets: int | None = None
    rate_pps: float | None = None
    start_ns: int = 0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.packets is not None and self.packets < 1:
            raise ConfigError(f"a replay needs at least one packet, got {self.packets}")
        if self.rate_pps is not None and not self.rate_pps > 0:
            raise ConfigError(f"the replay rate must be positive, got {self.rate_pps}")


@dataclass(frozen=True)
class ReplayedCapture:
    """The replayed sender stream and what the replay did to the capture."""

    stream: PacketStream
    source: str
    capture_packets: int
    """Rows (IP packets) of the capture."""
    duplicates: int
    """Capture packets left out because an earlier packet had the same identifier."""
    distinct: int
    """Capture packets replayed per repetition: ``capture_packets − duplicates``."""
    repetitions: int
    """Times the capture was replayed (the last one possibly cut short)."""
    collisions: int
    """Packets of repetitions ≥ 1 left out because their fresh identifier was taken."""
    time_scale: float
    """Factor applied to the capture's time differences (1: its own timing)."""

    def as_dict(self) -> dict:
        """JSON-ready, without the stream."""
        return {
            "source": self.source,
            "capture_packets": self.capture_packets,
            "duplicates": self.duplicates,
            "distinct": self.distinct,
            "repetitions": self.repetitions,
            "collisions": self.collisions,
            "time_scale": self.time_scale,
            "packets": len(self.stream),
        }

    def describe(self) -> str:
        """One sentence saying what was replayed, for people."""
        text = (
            f"{len(self.stream)} packets replayed from {self.source}: {self.repetitions} "
            f"repetition(s) of {self.distinct} distinct packets"
        )
        if self.repetitions > 1:
            text += " (fresh identifiers per repetition)"
        if self.duplicates:
            text += f", {self.duplicates} duplicate identifiers left out"
        if self.collisions:
            text += f", {self.collisions} identifier collisions left out"
        if self.time_scale != 1.0:
            text += f", time scaled by {self.time_scale:.4g}"
        return text


def first_occurrences(ident: np.ndarray) -> np.ndarray:
    """Mask of the packets whose identifier did not occur earlier in ``ident``."""
    _, first = np.unique(ident, return_index=True)
    keep = np.zeros(len(ident), bool)
    keep[first] = True
    return keep


def replay_capture(
    packets: PacketTable, params: ReplayParams | None = None, source: str | None = None
) -> ReplayedCapture:
    """The sender stream of a capture's packets; see the module docstring."""
    params = params or ReplayParams()
    source = source or (packets.sources[0] if packets.sources else "capture")
    if not len(packets):
        raise InputError("the capture holds no IP packet to replay", path=source)
    order = np.argsort(packets.time, kind="stable")
    ident, time = packets.ident[order], packets.time[order]
    unique = first_occurrences(ident)
    ident, time = ident[unique], time[unique] - packets.time[order[0]]
    n = len(ident)
    span = int(time[-1])
    gap = span / (n - 1) if n > 1 else 1.0
    wanted = params.packets or n
    repetitions = -(-wanted // n)

    ids = [ident]
    seeds = derive_seeds(params.seed, "replay repetition", repetitions)
    ids += [hash64(ident, int(seeds[r])) for r in range(1, repetitions)]
    offsets = np.arange(repetitions) * (span + gap)
    all_ids = np.concatenate(ids)[:wanted]
    rel = (time[None, :] + offsets[:, None]).ravel()[:wanted]
    fresh = first_occurrences(all_ids)

    scale = 1.0
    if params.rate_pps is not None and len(rel) > 1:
        if rel[-1] <= 0:
            raise InputError(
                "the capture's packets share one timestamp: no rate to scale", path=source
            )
        scale = (len(rel) - 1) / params.rate_pps * 1e9 / rel[-1]
    times = params.start_ns + np.rint(rel * scale).astype(np.int64)
    return ReplayedCapture(
        stream=PacketStream(all_ids[fresh], times[fresh]),
        source=source,
        capture_packets=len(packets),
        duplicates=len(packets) - n,
        distinct=n,
        repetitions=repetitions,
        collisions=int(np.count_nonzero(~fresh)),
        time_scale=scale,
    )
