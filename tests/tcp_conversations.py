"""Hand-made TCP conversations written as pcaps, for the truth and RTT-baseline tests."""

from __future__ import annotations

from pathlib import Path

from tacit.formats.pcap import read_packets
from tacit.formats.pcap_write import build_frame, tcp_options, write_pcap
from tacit.model.packets import ACK, FIN, PSH, SYN

MS = 1_000_000
T0 = 1_700_000_000 * 10**9


class Conversation:
    """One TCP connection as captured at one point: frames and their capture times, with the
    sequence numbers kept by the builder. ``timestamps`` adds the RFC 7323 option, TSval being
    the sender's clock in ms and TSecr the last TSval received."""

    def __init__(
        self,
        client: tuple[str, int] = ("10.0.0.1", 40000),
        server: tuple[str, int] = ("10.0.0.2", 80),
        isn: tuple[int, int] = (1000, 900_000),
        timestamps: bool = False,
    ) -> None:
        self.ends = (client, server)
        self.nxt = [isn[0], isn[1]]
        self.frames: list[bytes] = []
        self.times: list[int] = []
        self.timestamps = timestamps
        self.last_tsval = [0, 0]

    def packet(self, t: int, side: int, *, flags: int = ACK, payload: bytes = b"", seq=None):
        """Side 0 (client) or 1 (server) sends at ``t`` ms; ``seq`` repeats an old one."""
        (src, sport), (dst, dport) = self.ends[side], self.ends[1 - side]
        at = self.nxt[side] if seq is None else seq
        opts = b""
        if self.timestamps:
            tsval = t // MS + 7 * side
            opts = tcp_options(ts=(tsval, self.last_tsval[1 - side]))
            self.last_tsval[side] = tsval
        self.frames.append(
            build_frame(
                src,
                dst,
                sport=sport,
                dport=dport,
                seq=at % 2**32,
                ack=self.nxt[1 - side] % 2**32 if flags & ACK else 0,
                flags=flags,
                payload=payload,
                options=opts,
            )
        )
        self.times.append(T0 + t)
        if seq is None:
            self.nxt[side] += len(payload) + bool(flags & (SYN | FIN))
        return at

    def handshake(self, t: int, server_rtt: int = MS, client_rtt: int = MS) -> int:
        self.packet(t, 0, flags=SYN)
        self.packet(t + server_rtt, 1, flags=SYN | ACK)
        self.packet(t + server_rtt + client_rtt, 0)
        return t + server_rtt + client_rtt

    def send(self, t: int, side: int, data: bytes, size: int = 1 << 30) -> list[int]:
        """``data`` in segments of at most ``size`` bytes, 10 µs apart; their sequence numbers."""
        return [
            self.packet(t + 10_000 * k, side, flags=ACK | PSH, payload=data[i : i + size])
            for k, i in enumerate(range(0, len(data), size))
        ]


def capture_all(tmp_path: Path, convs: list[Conversation]):
    """Write the frames of several conversations, in time order, as one capture and read it
    back with payloads."""
    order = sorted((t, k, i) for k, c in enumerate(convs) for i, t in enumerate(c.times))
    path = tmp_path / "all.pcap"
    write_pcap(path, [convs[k].frames[i] for _, k, i in order], [t for t, _, _ in order])
    return read_packets(path, payloads=True)


def capture(tmp_path: Path, conv: Conversation, order=None, drop=None, **kw):
    """Write ``conv`` and read it back with payloads; with ``order``, its frames are captured in
    that order at the times of the positions they take; frame ``drop`` is left out."""
    idx = list(range(len(conv.frames)) if order is None else order)
    times = list(conv.times)
    if drop is not None:
        idx.remove(drop)
        del times[drop]
    path = tmp_path / "c.pcap"
    write_pcap(path, [conv.frames[i] for i in idx], times, **kw)
    return read_packets(path, payloads=True)
