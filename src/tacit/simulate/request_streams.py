"""Client-to-server and server-to-client TCP packet streams of web clients, with the response
latency every client saw: the workload of Pirate's evaluation (arXiv 2505.14358, §5: clients of
a realistic web application fetching pages through a load balancer that sees only their side).

The model
---------
``clients`` clients each keep one persistent TCP connection to one server (``server``, port
443) and fetch pages one after another for ``duration_ns``. A page is a tree of objects: the
page embeds ``Poisson(embedded_mean)`` objects, each of which embeds ``Poisson(nested_mean)``
more (two levels). An object is requested once its parent's response has fully arrived and the
client has parsed it (exponential, mean ``parse_ns``); at most ``max_outstanding`` requests are
in flight per connection (HTTP/2-like multiplexing), others wait. After a page the client thinks
(exponential, mean ``think_ns``; 0 by default) before the next page.

Each client has a round-trip time drawn uniformly from ``rtt_ns`` (half each way). Requests and
responses are cut into segments of at most ``mss`` bytes (a smaller last one) sent back to back
at ``uplink_bps`` / ``downlink_bps``; request sizes are lognormal (median ``request_bytes``,
shape ``request_sigma``) and so are response sizes (``response_bytes``, ``response_sigma``), so
both make multi-segment bursts. The server starts an object when its request has fully arrived
and takes a lognormal service time (shape ``service_sigma``) whose median follows the time of
day: ``service_ns · (1 + service_swing · sin(2π t / service_period_ns))``. Responses of one
connection leave one after another. The client acknowledges every second data segment at once
and an odd last one after ``delayed_ack_ns`` unless data of its own carries the ACK first
(RFC 9293 §3.8.6.3, RFC 1122 §4.2.3.2); the server acknowledges a request at once when the
service time exceeds ``delayed_ack_ns`` and otherwise with the response.

The capture point sits at the server (a load balancer): a client's packet is captured one-way
delay after the client sent it, a server's packet when the server sends it. Connections open
with a handshake (SYN, SYN+ACK, ACK) at a random time in the first second and close with FINs.

Truth: one row per request — its connection, when the client sent the request's first byte
(client clock, and when the capture saw it) and the response latency the client saw: from that
first byte to the last byte of the response received; and the request whose response let it go
(its trigger: the causal pair it ends).
"""

from __future__ import annotations

import heapq
import itertools
import math
from bisect import bisect_right
from collections import deque
from dataclasses import dataclass

import numpy as np

from tacit.errors import ConfigError
from tacit.hashing import hash64
from tacit.model.columns import StringPool
from tacit.model.packets import ACK, FIN, PSH, SYN, TCP, PacketTable, parse_address

MS = 1_000_000
_HEADERS = 14 + 20 + 20  # Ethernet, IPv4, TCP without options
_T0 = 1_714_521_600 * 10**9  # 2024-05-01 00:00 UTC: a realistic capture clock


@dataclass(frozen=True)
class RequestStreamParams:
    """Workload parameters; see the module docstring."""

    clients: int = 16
    duration_ns: int = 20_000 * MS
    server: str = "10.1.0.1:443"
    embedded_mean: float = 4.0
    nested_mean: float = 0.5
    max_outstanding: int = 4
    parse_ns: int = 300_000
    think_ns: int = 0
    rtt_ns: tuple[int, int] = (5 * MS, 40 * MS)
    uplink_bps: float = 50e6
    downlink_bps: float = 200e6
    mss: int = 1448
    request_bytes: int = 600
    request_sigma: float = 1.0
    response_bytes: int = 8_000
    response_sigma: float = 1.2
    service_ns: int = 15 * MS
    service_swing: float = 0.6
    service_period_ns: int = 10_000 * MS
    service_sigma: float = 0.3
    delayed_ack_ns: int = 40 * MS
    seed: int = 0

    def __post_init__(self) -> None:
        if self.clients < 1 or self.duration_ns <= 0 or self.max_outstanding < 1:
            raise ConfigError("clients, duration and max_outstanding must be positive")
        if not 0 <= self.service_swing < 1:
            raise ConfigError("service_swing must be in [0, 1)")
        if self.rtt_ns[0] <= 0 or self.rtt_ns[1] < self.rtt_ns[0] or self.mss < 1:
            raise ConfigError("bad rtt_ns range or mss")


@dataclass
class RequestTruth:
    """Per request: ``connection`` (index into :attr:`RequestStream.clients`), the client's
    endpoint (``client_hi``, ``client_lo``, ``client_port``), ``send_ns`` (client clock: first
    request byte sent), ``seen_ns`` (capture clock: first request segment captured),
    ``latency_ns`` (client-visible response latency), ``depth`` in its page (0: the page) and
    ``trigger``: the row of the request whose response let this one go — the object that embeds
    it, or the request whose completion freed the slot it waited for, or for a page the request
    that completed the previous one — -1 for a client's first page (Pirate's causal pairs, §3)."""

    connection: np.ndarray
    client_hi: np.ndarray
    client_lo: np.ndarray
    client_port: np.ndarray
    send_ns: np.ndarray
    seen_ns: np.ndarray
    latency_ns: np.ndarray
    depth: np.ndarray
    trigger: np.ndarray

    def __len__(self) -> int:
        return len(self.connection)


@dataclass
class RequestStream:
    """The capture (both directions, in time order; ``record`` is the row), ``to_server`` per
    packet, the per-request truth, the clients' ``"ADDR:PORT"`` (one per connection), the
    server's, and each connection's round-trip time."""

    packets: PacketTable
    to_server: np.ndarray
    truth: RequestTruth
    clients: list[str]
    server: str
    rtt_ns: np.ndarray


class _Columns:
    """Packet rows as they are produced (a few per request; appended in Python)."""

    def __init__(self) -> None:
        self.rows: list[tuple[int, int, int, int, int, int, int]] = []

    def add(self, t, conn, to_server, flags, seq, ack, payload) -> None:
        self.rows.append((t, conn, to_server, flags, seq & 0xFFFFFFFF, ack & 0xFFFFFFFF, payload))


def _segments(size: int, mss: int) -> list[int]:
    full, rest = divmod(size, mss)
    return [mss] * full + ([rest] if rest else [])


class _Connection:
    """One client's connection: an event loop over its requests (module docstring)."""

    def __init__(self, params, rng, conn, rtt, start, out, truth) -> None:
        self.p, self.rng, self.conn, self.out, self.truth = params, rng, conn, out, truth
        self.owd = rtt // 2
        self.start = start
        self.events: list = []
        self.tick = itertools.count()
        self.waiting: deque = deque()
        self.outstanding = 0
        self.uplink_free = 0
        self.downlink_free = 0
        self.last_data_send = -1
        self.c_seq = int(rng.integers(0, 2**32))
        self.s_seq = int(rng.integers(0, 2**32))
        self.c_sent = 1  # bytes of sequence space used (SYN counts one)
        self.s_sent = 1
        self.c_recv: list[tuple[int, int]] = [(start + rtt, 1)]  # (client time, server bytes)
        self.s_recv: list[tuple[int, int]] = [(start + self.owd, 1)]  # (server time, client bytes)
        self.page_left = 0

    def push(self, t, kind, data=None) -> None:
        heapq.heappush(self.events, (t, next(self.tick), kind, data))

    def client_ack(self, t) -> int:
        return self.s_seq + self.c_recv[bisect_right(self.c_recv, (t, math.inf)) - 1][1]

    def server_ack(self, t) -> int:
        return self.c_seq + self.s_recv[bisect_right(self.s_recv, (t, math.inf)) - 1][1]

    def run(self) -> None:
        p, o, c, owd = self.p, self.out, self.conn, self.owd
        t0 = self.start
        o.add(t0 + owd, c, 1, SYN, self.c_seq, 0, 0)
        o.add(t0 + owd, c, 0, SYN | ACK, self.s_seq, self.c_seq + 1, 0)
        o.add(t0 + 3 * owd, c, 1, ACK, self.c_seq + 1, self.s_seq + 1, 0)
        self.uplink_free = self.downlink_free = t0 + 2 * owd
        self.new_page(t0 + 2 * owd, -1)
        end = p.duration_ns + _T0
        while self.events:
            t, _, kind, data = heapq.heappop(self.events)
            if kind == "ready":
                self.waiting.append(data)
                self.send(t, -1)
            elif kind == "complete":
                self.complete(t, data, end)
            else:  # a delayed ACK falls due unless data carried it
                if self.last_data_send < data:
                    o.add(t + owd, c, 1, ACK, self.c_seq + self.c_sent, self.client_ack(t), 0)
        fin = max(self.uplink_free, self.downlink_free, self.last_data_send) + MS
        o.add(fin + owd, c, 1, FIN | ACK, self.c_seq + self.c_sent, self.client_ack(fin), 0)
        o.add(fin + owd, c, 0, FIN | ACK, self.s_seq + self.s_sent, self.c_seq + self.c_sent + 1, 0)
        o.add(
            fin + 3 * owd, c, 1, ACK, self.c_seq + self.c_sent + 1, self.s_seq + self.s_sent + 1, 0
        )

    def new_page(self, t, parent) -> None:
        kids = int(self.rng.poisson(self.p.embedded_mean))
        grandkids = [int(self.rng.poisson(self.p.nested_mean)) for _ in range(kids)]
        self.page_left = 1 + kids + sum(grandkids)
        # (depth, children: list of grandchild counts, truth row of the request that caused it)
        self.push(t, "ready", (0, grandkids, parent))

    def send(self, now, freed) -> None:
        """Send what waits and may go; ``freed``: the truth row whose completion freed a slot
        (the trigger of what goes now), -1 when a request became ready (its parent triggers it:
        with a free slot nothing else was waiting)."""
        p, o, c, owd, rng = self.p, self.out, self.conn, self.owd, self.rng
        while self.waiting and self.outstanding < p.max_outstanding:
            depth, children, parent = self.waiting.popleft()
            trigger = parent if freed < 0 else freed
            self.outstanding += 1
            size = max(40, int(rng.lognormal(math.log(p.request_bytes), p.request_sigma)))
            s = max(now, self.uplink_free)
            t = s
            for seg in _segments(size, p.mss):
                o.add(t + owd, c, 1, ACK | PSH, self.c_seq + self.c_sent, self.client_ack(t), seg)
                self.c_sent += seg
                t += int((seg + _HEADERS) * 8e9 / p.uplink_bps)
                self.s_recv.append((t + owd, self.c_sent))
            self.uplink_free = t
            self.last_data_send = t
            arrived = t + owd
            median = p.service_ns * (
                1 + p.service_swing * math.sin(2 * math.pi * (arrived - _T0) / p.service_period_ns)
            )
            service = int(median * rng.lognormal(0.0, p.service_sigma))
            if service > p.delayed_ack_ns:
                ack_t = arrived + p.delayed_ack_ns
                o.add(ack_t, c, 0, ACK, self.s_seq + self.s_sent, self.server_ack(ack_t), 0)
            size = max(100, int(rng.lognormal(math.log(p.response_bytes), p.response_sigma)))
            u = max(arrived + service, self.downlink_free)
            segs = _segments(size, p.mss)
            for j, seg in enumerate(segs):
                o.add(u, c, 0, ACK | PSH, self.s_seq + self.s_sent, self.server_ack(u), seg)
                self.s_sent += seg
                u += int((seg + _HEADERS) * 8e9 / p.downlink_bps)
                got = u + owd
                self.c_recv.append((got, self.s_sent))
                if j % 2 == 1:
                    o.add(
                        got + owd, c, 1, ACK, self.c_seq + self.c_sent, self.s_seq + self.s_sent, 0
                    )
            self.downlink_free = u
            done = u + owd
            if len(segs) % 2 == 1:
                self.push(done + p.delayed_ack_ns, "delack", done)
            self.push(done, "complete", (depth, children, len(self.truth)))
            self.truth.append((self.conn, s, s + owd, done - s, depth, trigger))

    def complete(self, t, obj, end) -> None:
        self.outstanding -= 1
        self.page_left -= 1
        depth, children, row = obj
        p, rng = self.p, self.rng
        for kid in children:
            ready = t + int(rng.exponential(p.parse_ns))
            self.push(ready, "ready", (depth + 1, [0] * kid, row))
        if self.page_left == 0:
            nxt = t + int(rng.exponential(p.parse_ns))
            if p.think_ns:
                nxt += int(rng.exponential(p.think_ns))
            if nxt < end:
                self.new_page(nxt, row)
        self.send(t, row)


def simulate_requests(params: RequestStreamParams | None = None) -> RequestStream:
    """Simulate the workload of the module docstring; seeded by ``params.seed``."""
    p = params or RequestStreamParams()
    rng = np.random.default_rng(p.seed)
    s_hi, s_lo = parse_address(p.server.rsplit(":", 1)[0])
    s_port = int(p.server.rsplit(":", 1)[1])
    rtts = rng.integers(p.rtt_ns[0], p.rtt_ns[1] + 1, p.clients)
    starts = _T0 + rng.integers(0, 1_000 * MS, p.clients)
    ports = 32_768 + rng.choice(28_000, p.clients, replace=False)
    out, truth = _Columns(), list[tuple[int, ...]]()
    for c in range(p.clients):
        conn_rng = np.random.default_rng([p.seed, c])
        _Connection(p, conn_rng, c, int(rtts[c]), int(starts[c]), out, truth).run()
    rows = np.array(out.rows, dtype=np.int64).reshape(-1, 7)
    rows = rows[np.argsort(rows[:, 0], kind="stable")]
    t, conn, up, flags, seq, ack, payload = rows.T
    client_lo = np.uint64(0xFFFF_0A00_0000) + (conn.astype(np.uint64) + np.uint64(2))
    server_lo = np.full(len(rows), s_lo, dtype=np.uint64)
    cport = ports[conn].astype(np.uint16)
    is_up = up == 1
    n = len(rows)
    ip_id = np.zeros(n, dtype=np.int64)
    for side in (0, 1):  # IPv4 ids count up per sender
        m = up == side
        key = conn[m]
        order = np.argsort(key, kind="stable")
        rank = np.empty(len(key), dtype=np.int64)
        rank[order] = np.arange(len(key)) - np.searchsorted(key[order], key[order])
        ip_id[m] = rank
    packets = PacketTable(
        StringPool(),
        time=t,
        record=np.arange(n),
        interface=np.zeros(n),
        wire_len=payload + _HEADERS,
        cap_len=payload + _HEADERS,
        ip_version=np.full(n, 4),
        src_hi=np.where(is_up, np.uint64(0), np.uint64(s_hi)),
        src_lo=np.where(is_up, client_lo, server_lo),
        dst_hi=np.where(is_up, np.uint64(s_hi), np.uint64(0)),
        dst_lo=np.where(is_up, server_lo, client_lo),
        proto=np.full(n, TCP),
        sport=np.where(is_up, cport, s_port),
        dport=np.where(is_up, s_port, cport),
        ip_id=ip_id & 0xFFFF,
        ttl=np.full(n, 64),
        tcp_flags=flags,
        seq=seq,
        ack=ack,
        window=np.full(n, 65535),
        ts_val=np.zeros(n),
        ts_ecr=np.zeros(n),
        has_ts=np.zeros(n, dtype=bool),
        payload_len=payload,
        truncated=np.zeros(n, dtype=bool),
        # Not the reader's xxHash of the packet's bytes (there are none): a hash of the fields
        # that tell packets apart, for code that only needs distinct identifiers.
        ident=hash64(
            seq.astype(np.uint64)
            ^ (conn.astype(np.uint64) << np.uint64(33))
            ^ (up.astype(np.uint64) << np.uint64(32)),
            p.seed,
        ),
        sources=["simulated"],
    )
    tr = np.array(truth, dtype=np.int64).reshape(-1, 6)
    by_send = np.argsort(tr[:, 1], kind="stable")
    tr = tr[by_send]
    new_row = np.empty(len(tr), dtype=np.int64)
    new_row[by_send] = np.arange(len(tr))
    trigger = np.where(tr[:, 5] >= 0, new_row[np.maximum(tr[:, 5], 0)], -1)
    tconn = tr[:, 0]
    clients = [f"10.0.{(c + 2) >> 8 & 255}.{(c + 2) & 255}:{ports[c]}" for c in range(p.clients)]
    return RequestStream(
        packets=packets,
        to_server=is_up,
        truth=RequestTruth(
            connection=tconn,
            client_hi=np.zeros(len(tr), dtype=np.uint64),
            client_lo=client_lo[0] - np.uint64(conn[0]) + tconn.astype(np.uint64)
            if n
            else np.zeros(0, dtype=np.uint64),
            client_port=ports[tconn].astype(np.uint16),
            send_ns=tr[:, 1],
            seen_ns=tr[:, 2],
            latency_ns=tr[:, 3],
            depth=tr[:, 4],
            trigger=trigger,
        ),
        clients=clients,
        server=p.server,
        rtt_ns=rtts,
    )


def perturb_packets(
    table: PacketTable,
    loss: float,
    reorder: float,
    seed: int,
    *,
    reorder_delay_ns: int = 1 * MS,
) -> PacketTable:
    """``table`` as a capture that missed a fraction ``loss`` of its packets and saw a fraction
    ``reorder`` of the rest late, each by a uniform delay of up to ``reorder_delay_ns`` (so it
    swaps places with the packets sent just after it). Rows come back in time order; ``record``
    keeps each packet's original row."""
    if not (0 <= loss <= 1 and 0 <= reorder <= 1):
        raise ConfigError("loss and reorder must be fractions in [0, 1]")
    rng = np.random.default_rng(seed)
    kept = table.take(rng.random(len(table)) >= loss)
    late = rng.random(len(kept)) < reorder
    time = kept.time.copy()
    time[late] += rng.integers(1, reorder_delay_ns + 1, int(late.sum()))
    kept.time = time
    return kept.take(np.argsort(time, kind="stable"))
