"""A userspace impairment relay: netem's delay, jitter, loss and reordering where the kernel
has no netem.

RDA's namespace experiment (:mod:`tacit.experiment.netns`, following the evaluation of "Every
Timestamp Counts: Accurate Tracking of Network Latencies using Reconcilable Difference
Aggregator", §VII) needs a path that delays, jitters, drops and reorders packets between two
capture points. Kernels built without ``sch_netem`` cannot emulate it, so the router namespace
M runs this relay instead, with IP forwarding off: it reads the frames of its two interfaces
with ``AF_PACKET`` raw sockets and sends every IPv4 frame not addressed to M out of the other
interface, the Ethernet addresses rewritten (source: the egress interface, destination: the next
hop) and the IP packet byte for byte, so that the packet identifiers of both capture points
agree (:func:`tacit.model.packets.ident_key`).

Frames from the first interface toward the second are impaired as netem (``tc-netem(8)``)
impairs the packets of the qdisc it sits on, in its order: lost with probability ``loss``;
otherwise, with probability ``reorder``, sent at once ahead of the delayed ones (netem's
``reorder`` with ``gap`` 1); otherwise held ``max(0, delay + jitter·N(0, 1))`` and sent when due,
in due-time order (netem's time-ordered queue, so jitter reorders too). The other direction is
relayed at once. Decisions are drawn per packet from a seeded generator, three uniforms each, so
that the same packets get the same decisions whatever the blocks they are drawn in
(:func:`schedule` is the pure form the relay follows). Every frame read is accounted for:
relayed (at once or when due), dropped by the impairment, still queued at stop, failed to send,
or ignored with a reason.
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import select
import signal
import socket
import struct
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from scipy.special import ndtri

from tacit.errors import ConfigError

ETH_P_ALL = 0x0003
PACKET_HOST = 0
PACKET_OUTGOING = 4
SOL_PACKET = 263
PACKET_STATISTICS = 6
SIOCETHTOOL = 0x8946
ETHTOOL_STXCSUM = 0x17
_IP_PROTO_UDP = 17


@dataclass(frozen=True)
class ImpairParams:
    """netem's impairment of one direction: a mean delay and its jitter (ns, normal), the
    probability of loss and of reordering (netem's ``reorder``: sent at once, ahead of the
    delayed packets); the defaults are netem's (none). The seed makes the decisions repeatable."""

    delay_ns: int = 0
    jitter_ns: int = 0
    loss: float = 0.0
    reorder: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.delay_ns < 0 or self.jitter_ns < 0:
            raise ConfigError(
                f"delay and jitter must be ≥ 0, got {self.delay_ns}, {self.jitter_ns}"
            )
        for name in ("loss", "reorder"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ConfigError(f"{name} must be a probability, got {getattr(self, name)}")


@dataclass(frozen=True)
class Decisions:
    """Per packet: ``dropped``, ``early`` (sent at once, ahead of the delayed ones) and the
    time it is held (ns; 0 when dropped or early)."""

    dropped: np.ndarray
    early: np.ndarray
    hold_ns: np.ndarray


class Impairment:
    """The per-packet decisions of one seeded impairment, drawn in any blocks: packet ``n``
    gets the same decisions whether drawn alone or among thousands."""

    def __init__(self, params: ImpairParams) -> None:
        self.params = params
        self._rng = np.random.default_rng(params.seed)

    def draw(self, count: int) -> Decisions:
        """The decisions of the next ``count`` packets."""
        p = self.params
        u = self._rng.random((count, 3))  # one 64-bit output per double: block-invariant
        dropped = u[:, 0] < p.loss
        early = ~dropped & (u[:, 1] < p.reorder)
        held = np.maximum(0.0, p.delay_ns + p.jitter_ns * ndtri(u[:, 2]))
        hold = np.where(dropped | early, 0, np.rint(held)).astype(np.int64)
        return Decisions(dropped, early, hold)


@dataclass(frozen=True)
class Schedule:
    """What the relay does with packets arriving at ``arrival_ns``: the decisions, each kept
    packet's due time (-1 when dropped) and the order the kept packets leave in."""

    decisions: Decisions
    due_ns: np.ndarray
    order: np.ndarray


def schedule(arrival_ns: np.ndarray, params: ImpairParams) -> Schedule:
    """The relay's impairment of packets arriving at ``arrival_ns`` (non-decreasing), as a pure
    function: the same decisions :class:`Relay` takes live, and the departure order of its
    queue (due time, then arrival; an early packet is due on arrival, so it overtakes every
    packet still held)."""
    arrival = np.asarray(arrival_ns, dtype=np.int64)
    d = Impairment(params).draw(len(arrival))
    due = np.where(d.dropped, -1, arrival + d.hold_ns)
    kept = np.flatnonzero(~d.dropped)
    order = kept[np.lexsort((kept, due[kept]))]
    return Schedule(d, due, order)


class DueQueue:
    """Items (held frames) waiting for their due time (monotonic ns), released in due-time
    order and, at equal due times, in the order they were put."""

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, Any]] = []
        self._count = 0

    def __len__(self) -> int:
        return len(self._heap)

    def put(self, due_ns: int, item: Any) -> None:
        heapq.heappush(self._heap, (due_ns, self._count, item))
        self._count += 1

    def next_due(self) -> int | None:
        return self._heap[0][0] if self._heap else None

    def pop_due(self, now_ns: int) -> list[Any]:
        """The items due at ``now_ns``, in order."""
        out = []
        while self._heap and self._heap[0][0] <= now_ns:
            out.append(heapq.heappop(self._heap)[2])
        return out

    def waiting(self) -> list[Any]:
        """The items still held, in no particular order."""
        return [item for _, _, item in self._heap]


@dataclass
class DirectionCounts:
    """What happened to the IPv4 frames relayed one way (``received`` = ``sent`` + ``dropped``
    + ``queued`` + ``send_errors``)."""

    received: int = 0
    sent: int = 0
    dropped: int = 0
    early: int = 0
    queued: int = 0
    send_errors: int = 0


@dataclass
class RelayStats:
    """Counts of the relay: per direction (``forward``: impaired; ``backward``), the UDP
    datagrams to ``data_port`` of the forward direction on their own, the frames ignored by
    reason, and the frames each socket's kernel queue dropped (``PACKET_STATISTICS``)."""

    forward: DirectionCounts = field(default_factory=DirectionCounts)
    forward_data: DirectionCounts = field(default_factory=DirectionCounts)
    backward: DirectionCounts = field(default_factory=DirectionCounts)
    ignored: dict[str, int] = field(default_factory=dict)
    socket_drops: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _mac(text: str) -> bytes:
    try:
        raw = bytes.fromhex(text.strip().replace(":", ""))
    except ValueError:
        raw = b""
    if len(raw) != 6:
        raise ConfigError(f"not a MAC address: {text!r}")
    return raw


def interface_mac(dev: str) -> str:
    """The MAC address of ``dev`` in this process's network namespace."""
    return Path(f"/sys/class/net/{dev}/address").read_text().strip()


def disable_tx_checksum(dev: str) -> None:
    """Turn off ``dev``'s transmit checksum offload (``ethtool -K dev tx off``, by ioctl: no
    ethtool needed), which also turns off segmentation offload. A veth otherwise hands its
    peer packets with partial checksums and larger than the MTU, which the kernel's forwarding
    carries as they are but a relay re-sending frames through a raw socket cannot."""
    import ctypes
    import fcntl

    value = ctypes.create_string_buffer(struct.pack("II", ETHTOOL_STXCSUM, 0))
    ifreq = struct.pack("16sP", dev.encode(), ctypes.addressof(value)).ljust(40, b"\0")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            fcntl.ioctl(sock.fileno(), SIOCETHTOOL, ifreq)
        except OSError as e:
            raise ConfigError(f"cannot turn off the checksum offload of {dev}: {e}") from e


class Relay:
    """Relays IPv4 frames between interfaces ``a`` and ``b``: ``a`` → ``b`` impaired, ``b`` →
    ``a`` at once. ``a_peer``/``b_peer`` are the next hops' MACs on each side; ``own`` are the
    namespace's addresses (frames to them are the kernel's, not relayed)."""

    def __init__(
        self,
        a: str,
        a_peer: str,
        b: str,
        b_peer: str,
        params: ImpairParams,
        own: list[str],
        data_port: int | None = None,
    ) -> None:
        self.devs = (a, b)
        # frame header for the way out of each side: next hop's MAC, then the egress MAC
        self._header = {
            a: _mac(a_peer) + _mac(interface_mac(a)),
            b: _mac(b_peer) + _mac(interface_mac(b)),
        }
        self._own = {socket.inet_aton(x) for x in own}
        self._data_port = data_port
        self._impair = Impairment(params)
        self._block: Decisions | None = None
        self._next = 0
        self.queue = DueQueue()
        self.stats = RelayStats()
        self.socks: dict[str, socket.socket] = {}
        for dev in self.devs:
            s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 22)
            s.bind((dev, ETH_P_ALL))
            s.setblocking(False)
            self.socks[dev] = s

    def close(self) -> None:
        for s in self.socks.values():
            s.close()

    def _decide(self) -> tuple[bool, bool, int]:
        if self._block is None or self._next == len(self._block.dropped):
            self._block, self._next = self._impair.draw(4096), 0
        b, n = self._block, self._next
        self._next += 1
        return bool(b.dropped[n]), bool(b.early[n]), int(b.hold_ns[n])

    def _ignore(self, reason: str) -> None:
        self.stats.ignored[reason] = self.stats.ignored.get(reason, 0) + 1

    def _send(self, dev: str, frame: bytes, counts: list[DirectionCounts]) -> None:
        try:
            self.socks[dev].send(frame)
        except OSError:
            for c in counts:
                c.send_errors += 1
            return
        for c in counts:
            c.sent += 1

    def handle(self, dev: str, frame: bytes, pkttype: int, now_ns: int) -> None:
        """One frame read on ``dev``: relay it, hold it, drop it, or ignore it."""
        if pkttype == PACKET_OUTGOING:
            return self._ignore("outgoing")
        if pkttype != PACKET_HOST:
            return self._ignore("not_to_this_host")
        if len(frame) < 34 or frame[12:14] != b"\x08\x00" or frame[14] >> 4 != 4:
            return self._ignore("not_ipv4")
        if frame[30:34] in self._own:
            return self._ignore("to_this_namespace")
        forward = dev == self.devs[0]
        out = self.devs[1] if forward else self.devs[0]
        relayed = self._header[out] + frame[12:]
        if not forward:
            self.stats.backward.received += 1
            return self._send(out, relayed, [self.stats.backward])
        counts = [self.stats.forward]
        if self._is_data(frame):
            counts.append(self.stats.forward_data)
        dropped, early, hold = self._decide()
        for c in counts:
            c.received += 1
            c.dropped += dropped
            c.early += early
        if early:
            self._send(out, relayed, counts)
        elif not dropped:
            self.queue.put(now_ns + hold, (relayed, len(counts) == 2))

    def _is_data(self, frame: bytes) -> bool:
        ihl = (frame[14] & 0x0F) * 4
        if self._data_port is None or frame[23] != _IP_PROTO_UDP or len(frame) < 14 + ihl + 4:
            return False
        return int.from_bytes(frame[16 + ihl : 18 + ihl], "big") == self._data_port

    def release(self, now_ns: int) -> None:
        """Send the held frames that are due."""
        for relayed, data in self.queue.pop_due(now_ns):
            counts = [self.stats.forward, self.stats.forward_data][: 1 + data]
            self._send(self.devs[1], relayed, counts)

    def run(self, stop: list[bool], wakeup: int) -> None:
        """Relay until ``stop[0]`` is set (by a signal handler writing to ``wakeup``)."""
        by_fd = {s.fileno(): dev for dev, s in self.socks.items()}
        watched = [*by_fd, wakeup]
        while not stop[0]:
            due = self.queue.next_due()
            timeout = None if due is None else max(0.0, (due - time.monotonic_ns()) / 1e9)
            ready, _, _ = select.select(watched, [], [], timeout)
            for fd in ready:
                if fd == wakeup:
                    os.read(wakeup, 64)
                    continue
                dev, sock = by_fd[fd], self.socks[by_fd[fd]]
                while True:  # drain the socket: one system call per frame, no more
                    try:
                        frame, addr = sock.recvfrom(65536)
                    except BlockingIOError:
                        break
                    self.handle(dev, frame, addr[2], time.monotonic_ns())
            self.release(time.monotonic_ns())

    def finish(self) -> RelayStats:
        """Count what is still queued and what the kernel dropped; close the sockets."""
        for _, data in self.queue.waiting():
            self.stats.forward.queued += 1
            self.stats.forward_data.queued += data
        for dev, s in self.socks.items():
            _, drops = struct.unpack("II", s.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8))
            self.stats.socket_drops[dev] = drops
        self.close()
        return self.stats


def main(argv: list[str] | None = None) -> None:
    """``relay``: run the relay until SIGTERM/SIGINT, then write its counts as JSON;
    ``no-tx-checksum DEV...``: turn off the interfaces' transmit checksum offload."""
    cli = argparse.ArgumentParser(prog="python -m tacit.experiment.impair")
    sub = cli.add_subparsers(dest="command", required=True)
    off = sub.add_parser("no-tx-checksum")
    off.add_argument("devices", nargs="+")
    run = sub.add_parser("relay")
    for name in ("a", "a-peer", "b", "b-peer", "stats"):
        run.add_argument(f"--{name}", required=True)
    run.add_argument("--own", nargs="*", default=[])
    run.add_argument("--data-port", type=int)
    run.add_argument("--delay-ns", type=int, default=0)
    run.add_argument("--jitter-ns", type=int, default=0)
    run.add_argument("--loss", type=float, default=0.0)
    run.add_argument("--reorder", type=float, default=0.0)
    run.add_argument("--seed", type=int, default=0)
    args = cli.parse_args(argv)
    if args.command == "no-tx-checksum":
        for dev in args.devices:
            disable_tx_checksum(dev)
        return
    params = ImpairParams(args.delay_ns, args.jitter_ns, args.loss, args.reorder, args.seed)
    stop = [False]
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)

    def halt(signum: int, frame: object) -> None:
        stop[0] = True

    signal.signal(signal.SIGTERM, halt)
    signal.signal(signal.SIGINT, halt)
    relay = Relay(args.a, args.a_peer, args.b, args.b_peer, params, args.own, args.data_port)
    print(f"relaying {args.a} -> {args.b} (impaired) and back", file=sys.stderr, flush=True)
    relay.run(stop, wake_r)
    Path(args.stats).write_text(json.dumps(relay.finish().as_dict()))


if __name__ == "__main__":
    main()
