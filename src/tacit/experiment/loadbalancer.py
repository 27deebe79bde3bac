"""A layer-4 load balancer in front of servers whose CPU allocation changes, with and without
Pirate's latency-aware weights.

Reproduces, in simulation, the load-balancer experiment of Pirate (Vannarth Shobhana et al.,
"Measuring (Round-Trip) Response Latencies Under Asymmetric Routing", arXiv 2505.14358, §4 and
its evaluation): clients reach a virtual IP through a Maglev load balancer
(:mod:`tacit.response_latency.maglev`) with direct server return, so the balancer sees only the
client → server packets; one server's CPU share drops for a while; the balancer feeds the packets
of each control interval to Pirate's streaming estimator
(:class:`tacit.response_latency.estimator.StreamingEstimator`), maps the per-connection
estimates to servers and lets the watermark controller
(:mod:`tacit.response_latency.watermark`) set the Maglev weights. The same seeded workload runs
once with equal weights and once with the controller; the result compares the clients' p50 and
p99 response latencies (the paper reports a 37 % lower p99).

The model
---------
- ``clients`` clients keep ``connections_per_client`` persistent TCP connections each to the
  virtual IP. A connection carries a geometric number of requests (mean
  ``requests_per_connection``) and is then closed (FIN) and replaced by a new one (new source
  port, so a new 5-tuple): Maglev places each new connection by the hash of its 5-tuple in the
  table current when its SYN passes; established connections stay on their server (Maglev's
  connection tracking, Maglev §3.3), so new weights act through new connections.
- Each connection is a causal chain: a request is sent when the previous response has fully
  arrived plus a client pause — with probability ``think_probability`` a think time
  (exponential, mean ``think_ns``), otherwise a short processing delay (exponential, mean
  ``client_processing_ns``).
- Requests (mean ``request_bytes``) and responses (mean ``response_bytes``) are ``100 +
  exponential`` bytes, at most 256 segments, cut into ``mss``-byte segments sent back to back
  (``segment_ns`` apart). The client acknowledges every second response segment and the last
  one (delayed ACKs), and the handshake and the close add their ACKs: all of it crosses the
  balancer ``lb_delay_ns`` after the client sent it. Every message takes ``one_way_ns`` from
  end to end.
- A server is a processor-sharing queue (CPU time shared equally by the requests in service,
  as a CPU scheduler shares one core among request threads); a request's CPU demand is
  exponential with mean ``service_ns`` at a full core, and the server's speed at time ``t`` is
  its CPU share (:class:`CpuEpisode`: ``share`` of a core for server ``server`` from
  ``start_ns`` to ``end_ns``, 1 otherwise).
- The truth is each request's client-side response latency: from the client sending its first
  byte to receiving the last byte of the response.

Every ``interval_ns`` the balancer hands the packets it forwarded in the interval (sorted by
time) to the estimator; the controller's input per server is the sample-weighted mean of the
latencies of its connections' estimates that closed in the interval, their sample count and the
number of its connections that sent packets in the interval. ``latency_source="truth"`` feeds
the controller the true mean latency of the requests answered in the interval instead (an
oracle, to tell the estimator's part from the controller's).

The event loop is compiled (numba) and stops at every interval boundary; randomness comes from
one seeded numpy Generator per run (the same seed in both runs, so they start alike).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from numba import njit

from tacit.errors import ConfigError
from tacit.hashing import hash64
from tacit.model.columns import StringPool
from tacit.model.packets import (
    ACK,
    FIN,
    PSH,
    SYN,
    TCP,
    PacketTable,
    concat_packets,
    parse_address,
)
from tacit.response_latency.estimator import ResponseAccounting, StreamingEstimator
from tacit.response_latency.maglev import MaglevParams, MaglevTable, flow_key
from tacit.response_latency.params import PirateParams
from tacit.response_latency.watermark import ACTION_NAMES, WatermarkController, WatermarkParams
from tacit.runs import distinct
from tacit.simulate.microservices import EPOCH_NS

MS = 1_000_000
SECOND = 1_000_000_000

LATENCY_SOURCES = ("pirate", "truth")
"""Where the controller's per-server latencies come from (module docstring)."""

VIP = "10.0.100.1"
"""The virtual IP the clients connect to; clients are 10.0.0.1, 10.0.0.2, ..."""
SERVICE_PORT = 80
FIRST_PORT = 10_000
"""Clients' source ports count up from here (reused only after 55,536 connections of a client,
as the estimator takes a reused 5-tuple for the same connection)."""
MAX_SEGMENTS = 256
"""Requests and responses are cut at this many segments."""
HEADER_BYTES = 54
"""Ethernet + IPv4 + TCP headers of every simulated frame."""

_OPEN, _ARRIVE, _SERVE = 0, 1, 2
_RESERVE = MAX_SEGMENTS + 8  # packets one event may add at most


@dataclass(frozen=True)
class CpuEpisode:
    """Server ``server`` gets ``share`` of a core from ``start_ns`` to ``end_ns`` (relative to
    the start of the run)."""

    server: int
    start_ns: int
    end_ns: int
    share: float


@dataclass(frozen=True)
class LoadBalancerParams:
    """Simulation parameters (module docstring). Pirate §5.6's experiment has 2 clients and 4
    servers behind a Katran load balancer on Cloudlab machines, at varying loads; the paper
    gives neither the servers' work nor what slows one, so the sizes here are tacit's: server 0
    at a quarter of a core from 10 s to 30 s of a 40 s run, 2 ms of CPU per request, 8
    connections per client, and a control interval (``interval_ns``) of 1 s, the estimator's
    default epoch, which the estimator is given."""

    clients: int = 2
    servers: int = 4
    connections_per_client: int = 8
    duration_ns: int = 40 * SECOND
    interval_ns: int = 1 * SECOND
    cpu: tuple[CpuEpisode, ...] = (CpuEpisode(0, 10 * SECOND, 30 * SECOND, 0.25),)
    service_ns: float = 2 * MS
    one_way_ns: float = 100_000.0
    lb_delay_ns: float = 50_000.0
    segment_ns: float = 1_200.0
    mss: int = 1448
    request_bytes: float = 2_000.0
    response_bytes: float = 6_000.0
    requests_per_connection: float = 100.0
    think_probability: float = 0.1
    think_ns: float = 20 * MS
    client_processing_ns: float = 100_000.0
    controller: WatermarkParams = field(default_factory=WatermarkParams)
    maglev: MaglevParams = field(default_factory=MaglevParams)
    latency_source: str = "pirate"
    seed: int = 0

    def __post_init__(self) -> None:  # noqa: C901
        if min(self.clients, self.servers, self.connections_per_client) < 1:
            raise ConfigError("need at least one client, server and connection per client")
        if self.clients > 254:
            raise ConfigError(f"at most 254 clients (10.0.0.1-254), got {self.clients}")
        if self.interval_ns <= 0 or self.duration_ns < self.interval_ns:
            raise ConfigError("need 0 < interval_ns ≤ duration_ns")
        positive = ("service_ns", "segment_ns", "mss", "request_bytes", "response_bytes")
        if any(getattr(self, k) <= 0 for k in positive) or self.requests_per_connection < 1:
            raise ConfigError(f"{', '.join(positive)} must be > 0, requests_per_connection ≥ 1")
        if min(self.one_way_ns, self.think_ns, self.client_processing_ns) < 0:
            raise ConfigError("delays and think times must be ≥ 0")
        if not 0 <= self.lb_delay_ns <= self.one_way_ns:
            raise ConfigError("lb_delay_ns must lie within [0, one_way_ns]")
        if not 0.0 <= self.think_probability <= 1.0:
            raise ConfigError("think_probability must be a probability")
        for e in self.cpu:
            if not 0 <= e.server < self.servers or e.start_ns >= e.end_ns or e.share <= 0:
                raise ConfigError(f"bad CPU episode {e}: need a server, start < end, share > 0")
        if self.latency_source not in LATENCY_SOURCES:
            raise ConfigError(f"latency_source must be one of {LATENCY_SOURCES}")


@dataclass
class RequestLog:
    """Every request of a run, one row each: its connection (index into the run's
    connections), server, client send time, arrival at and departure from the server, and the
    arrival of the last response byte at the client (ns since the start of the run; -1 while
    not reached when the run ended)."""

    connection: np.ndarray
    server: np.ndarray
    sent: np.ndarray
    arrived: np.ndarray
    done: np.ndarray
    received: np.ndarray

    def completed(self) -> np.ndarray:
        """Per request: answered before the end of the run."""
        return self.received >= 0

    def latency_ns(self) -> np.ndarray:
        """Client-side response latency of the completed requests."""
        ok = self.completed()
        return self.received[ok] - self.sent[ok]


@dataclass(frozen=True)
class RunSummary:
    """One run: latency percentiles (ms) over the completed requests and how the requests and
    connections spread over the servers."""

    p50_ms: float
    p99_ms: float
    mean_ms: float
    requests: int
    unfinished: int
    connections: int
    packets: int
    requests_per_server: list[int]

    @classmethod
    def of(cls, log: RequestLog, connections: int, packets: int, servers: int) -> RunSummary:
        lat = log.latency_ns() / MS
        ok = log.completed()
        return cls(
            p50_ms=float(np.percentile(lat, 50)),
            p99_ms=float(np.percentile(lat, 99)),
            mean_ms=float(lat.mean()),
            requests=int(ok.sum()),
            unfinished=int((~ok).sum()),
            connections=connections,
            packets=packets,
            requests_per_server=np.bincount(log.server[ok], minlength=servers).tolist(),
        )


@dataclass
class Run:
    """What one run produced: the request log; per interval and server the weights, the
    controller's actions and input latency (NaN where none), and the true mean latency of the
    requests answered in the interval; how many intervals late the input is (Pirate's estimate
    of an epoch comes when the epoch closes, with the next interval's packets: 1; the oracle:
    0); the estimator's packet accounting (packets per bucket); a summary; and, when asked for,
    every packet the balancer saw (client → server, in time order)."""

    log: RequestLog
    weights: np.ndarray
    actions: np.ndarray
    estimated_ns: np.ndarray
    true_ns: np.ndarray
    input_lag: int
    accounting: dict[str, int]
    summary: RunSummary
    packets: PacketTable | None = None

    def estimate_errors(self) -> np.ndarray:
        """Relative errors of the controller's latency inputs against the truth of the
        interval they measured, where both exist."""
        lag = self.input_lag
        est = self.estimated_ns[lag:]
        true = self.true_ns[: len(self.true_ns) - lag]
        both = np.isfinite(est) & np.isfinite(true) & (true > 0)
        return est[both] / true[both] - 1.0


@dataclass
class LoadBalancerResult:
    """Equal-weight Maglev against Maglev with the watermark controller on the same workload."""

    params: LoadBalancerParams
    unweighted: Run
    controlled: Run

    @property
    def p99_reduction(self) -> float:
        """Relative reduction of the p99 latency by the controller (0.37 = 37 % lower)."""
        return 1.0 - self.controlled.summary.p99_ms / self.unweighted.summary.p99_ms

    def as_dict(self) -> dict[str, Any]:
        w = self.controlled.weights
        errors = np.abs(self.controlled.estimate_errors())
        return {
            "unweighted": asdict(self.unweighted.summary),
            "controlled": asdict(self.controlled.summary),
            "p50_reduction": 1.0 - self.controlled.summary.p50_ms / self.unweighted.summary.p50_ms,
            "p99_reduction": self.p99_reduction,
            "intervals": int(w.shape[0]),
            "latency_source": self.params.latency_source,
            "weights": {
                "min_per_server": w.min(axis=0).round(3).tolist(),
                "mean_per_server": w.mean(axis=0).round(3).tolist(),
                "final": w[-1].round(3).tolist(),
                "actions": {
                    name: int((self.controlled.actions == code).sum())
                    for code, name in enumerate(ACTION_NAMES)
                },
            },
            "estimate_vs_truth": {
                "server_intervals": len(errors),
                "input_lag_intervals": self.controlled.input_lag,
                "median_relative_error": float(np.median(errors)) if len(errors) else None,
            },
            "estimator_packets": self.controlled.accounting,
        }


def run_loadbalancer_experiment(params: LoadBalancerParams | None = None) -> LoadBalancerResult:
    """Run the workload of ``params`` with equal weights and with the controller."""
    params = params or LoadBalancerParams()
    return LoadBalancerResult(
        params, simulate_run(params, controlled=False), simulate_run(params, controlled=True)
    )


# --------------------------------------------------------------------------------------------
# One run

# Rows of the 2-D arrays the compiled loop works on (numba folds these globals as constants).
_EVENT, _TAG = 0, 1  # slot times: next event of an opening / sending connection; finish tag
_PHASE, _SERVER, _CONN, _REQUEST, _LEFT, _SEQ, _ACK, _CLIENT = range(8)  # slot integers
_VIRTUAL, _LAST = 0, 1  # server times: processor-sharing virtual time, when it was updated
_SENT, _ARRIVED, _DONE, _RECEIVED = range(4)  # request times
_R_CONN, _R_SERVER, _R_RESPONSE = range(3)  # request integers (response size in bytes)
_C_CLIENT, _C_PORT, _C_SERVER = range(3)  # connection integers
_P_CONN, _P_FLAGS, _P_SEQ, _P_ACK, _P_LEN = range(5)  # packet integers


class _Records:
    """Growable output of the compiled loop: requests, connections and packets (``counts``:
    how many of each), columns as rows of 2-D arrays."""

    def __init__(self, cap: int) -> None:
        self.req_t = np.full((4, cap), -1.0)
        self.req_i = np.full((3, cap), -1, dtype=np.int64)
        self.conn = np.full((3, max(cap // 16, 64)), -1, dtype=np.int64)
        self.pkt_t = np.full(4 * cap, np.inf)
        self.pkt_i = np.zeros((5, 4 * cap), dtype=np.int64)
        self.counts = np.zeros(3, dtype=np.int64)

    def grow(self) -> None:
        """Double the arrays the loop stopped for (:func:`_loop` says when it must stop)."""
        if self.counts[0] + 1 > self.req_t.shape[1]:
            self.req_t = _doubled(self.req_t, -1.0)
            self.req_i = _doubled(self.req_i, -1)
        if self.counts[1] + 1 > self.conn.shape[1]:
            self.conn = _doubled(self.conn, -1)
        if self.counts[2] + _RESERVE > len(self.pkt_t):
            self.pkt_t = _doubled(self.pkt_t, np.inf)
            self.pkt_i = _doubled(self.pkt_i, 0)

    def requests(self, duration_ns: int) -> RequestLog:
        """The request log; responses that arrive after ``duration_ns`` count as unanswered."""
        n = self.counts[0]
        received = self.req_t[_RECEIVED, :n].copy()
        received[received >= duration_ns] = -1
        return RequestLog(
            connection=self.req_i[_R_CONN, :n],
            server=self.req_i[_R_SERVER, :n],
            sent=self.req_t[_SENT, :n],
            arrived=self.req_t[_ARRIVED, :n],
            done=self.req_t[_DONE, :n],
            received=received,
        )

    def connection_servers(self, clients: int) -> np.ndarray:
        """The server of every connection, indexed by ``client << 16 | port`` (-1: none)."""
        n = self.counts[1]
        out = np.full(clients << 16, -1, dtype=np.int64)
        out[(self.conn[_C_CLIENT, :n] << 16) | self.conn[_C_PORT, :n]] = self.conn[_C_SERVER, :n]
        return out


def _doubled(a: np.ndarray, fill: float) -> np.ndarray:
    """``a`` twice as long along its last axis, the new part ``fill``."""
    return np.concatenate([a, np.full(a.shape, fill, dtype=a.dtype)], axis=-1)


class _State:
    """The event loop's state between intervals, per connection slot and per server."""

    def __init__(self, p: LoadBalancerParams, rng: np.random.Generator) -> None:
        slots = p.clients * p.connections_per_client
        self.slot_t = np.zeros((2, slots))
        # connections open over the first 10 ms, so that they do not start in lockstep
        self.slot_t[_EVENT] = rng.uniform(0, 10 * MS, slots)
        self.slot_i = np.zeros((8, slots), dtype=np.int64)
        self.slot_i[_PHASE] = _OPEN
        self.slot_i[_CLIENT] = np.arange(slots) // p.connections_per_client
        self.server_t = np.zeros((2, p.servers))
        self.jobs = np.zeros(p.servers, dtype=np.int64)
        self.next_port = np.full(p.clients, FIRST_PORT, dtype=np.int64)


def _cpu_knots(params: LoadBalancerParams) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Times where CPU shares change, each server's share from each knot on, and its cumulative
    work (ns of full-core CPU time) at each knot."""
    times = {0, *(e.start_ns for e in params.cpu), *(e.end_ns for e in params.cpu)}
    knots = np.array(sorted(times), dtype=np.float64)
    share = np.ones((params.servers, len(knots)))
    for e in params.cpu:
        share[e.server, (knots >= e.start_ns) & (knots < e.end_ns)] = e.share
    cum = np.zeros_like(share)
    cum[:, 1:] = np.cumsum(share[:, :-1] * np.diff(knots), axis=1)
    return knots, share, cum


def simulate_run(
    params: LoadBalancerParams, *, controlled: bool, keep_packets: bool = False
) -> Run:
    """One run of the workload, with equal Maglev weights or with the watermark controller
    (``keep_packets``: keep the packets the balancer saw in :attr:`Run.packets`)."""
    p = params
    rng = np.random.default_rng(p.seed)
    table = MaglevTable.build([f"server-{i}" for i in range(p.servers)], params=p.maglev)
    controller = WatermarkController(p.servers, p.controller)
    estimator = _Estimator(p) if controlled and p.latency_source == "pirate" else None
    cpu = _cpu_knots(p)
    conf = np.array(
        [
            p.one_way_ns, p.lb_delay_ns, p.segment_ns, p.service_ns, p.request_bytes,
            p.response_bytes, p.requests_per_connection, p.think_probability, p.think_ns,
            p.client_processing_ns, p.mss,
        ]
    )  # fmt: skip
    addresses = np.array([parse_address(f"10.0.0.{c + 1}") for c in range(p.clients)], "u8")
    vip = np.array(parse_address(VIP), dtype=np.uint64)
    state = _State(p, rng)
    slots = p.clients * p.connections_per_client
    rec = _Records(max(1024, slots * int(p.duration_ns / (p.service_ns + 4 * p.one_way_ns)) // 4))
    n_intervals = -(-p.duration_ns // p.interval_ns)
    weights = np.ones((n_intervals, p.servers))
    actions = np.zeros((n_intervals, p.servers), dtype=np.int8)
    estimated = np.full((n_intervals, p.servers), np.nan)
    true = np.full((n_intervals, p.servers), np.nan)
    emitted = 0
    kept: list[PacketTable] = []
    for k in range(n_intervals):
        t0, t1 = k * p.interval_ns, min((k + 1) * p.interval_ns, p.duration_ns)
        while _loop(
            float(t1), state.slot_t, state.slot_i, state.server_t, state.jobs, state.next_port,
            rec.counts, rec.req_t, rec.req_i, rec.conn, rec.pkt_t, rec.pkt_i,
            table.entries, *cpu, conf, addresses, vip, np.uint64(p.maglev.seed + 2), rng,
        ):  # fmt: skip
            rec.grow()
        batch, rows = _take_packets(rec, emitted, t1, addresses, vip, p.seed)
        emitted += len(rows)
        if keep_packets:
            kept.append(batch)
        log = rec.requests(p.duration_ns)
        answered = (log.received >= t0) & (log.received < t1)
        lat = log.received[answered] - log.sent[answered]
        counts = np.bincount(log.server[answered], minlength=p.servers)
        with np.errstate(invalid="ignore", divide="ignore"):
            true[k] = np.bincount(log.server[answered], weights=lat, minlength=p.servers) / counts
        if not controlled:
            continue
        active = np.bincount(
            rec.conn[_C_SERVER, distinct(rec.pkt_i[_P_CONN, rows])], minlength=p.servers
        )
        if estimator is not None:
            estimated[k], samples = estimator.per_server(batch, rec, addresses, p)
        else:
            estimated[k], samples = true[k], counts
        step = controller.step(estimated[k], samples, active)
        actions[k], weights[k] = step.action, step.weights
        if np.any(step.weights != table.weights):
            table = table.rebuild(step.weights)
    log = rec.requests(p.duration_ns)
    summary = RunSummary.of(log, int(rec.counts[1]), emitted, p.servers)
    lag, accounting = (1, estimator.accounting.as_dict()) if estimator else (0, {})
    packets = concat_packets(kept) if keep_packets else None
    return Run(log, weights, actions, estimated, true, lag, accounting, summary, packets)


def _take_packets(
    rec: _Records, emitted: int, t1: int, addresses: np.ndarray, vip: np.ndarray, seed: int
) -> tuple[PacketTable, np.ndarray]:
    """The buffered packets captured before ``t1``, as a time-sorted table, and their rows in
    the buffer. The buffer is reordered so that they follow the ``emitted`` rows and the later
    packets wait after them."""
    n = rec.counts[2]
    pending = np.arange(emitted, n)
    times = rec.pkt_t[pending]
    now = pending[times < t1]
    now = now[np.argsort(times[times < t1], kind="stable")]
    order = np.concatenate([now, pending[times >= t1]])
    rec.pkt_t[emitted:n] = rec.pkt_t[order]
    rec.pkt_i[:, emitted:n] = rec.pkt_i[:, order]
    rows = np.arange(emitted, emitted + len(now))
    conn = rec.pkt_i[_P_CONN, rows]
    client = rec.conn[_C_CLIENT, conn]
    length = rec.pkt_i[_P_LEN, rows]
    m = len(rows)
    cols = {
        "time": EPOCH_NS + np.rint(rec.pkt_t[rows]).astype(np.int64),
        "record": rows,
        "interface": np.zeros(m),
        "wire_len": length + HEADER_BYTES,
        "cap_len": length + HEADER_BYTES,
        "ip_version": np.full(m, 4),
        "src_hi": addresses[client, 0],
        "src_lo": addresses[client, 1],
        "dst_hi": np.full(m, vip[0]),
        "dst_lo": np.full(m, vip[1]),
        "proto": np.full(m, TCP),
        "sport": rec.conn[_C_PORT, conn],
        "dport": np.full(m, SERVICE_PORT),
        "ip_id": rows & 0xFFFF,
        "ttl": np.full(m, 64),
        "tcp_flags": rec.pkt_i[_P_FLAGS, rows],
        "seq": rec.pkt_i[_P_SEQ, rows] & 0xFFFF_FFFF,
        "ack": rec.pkt_i[_P_ACK, rows] & 0xFFFF_FFFF,
        "window": np.full(m, 0xFFFF),
        "ts_val": np.zeros(m),
        "ts_ecr": np.zeros(m),
        "has_ts": np.zeros(m, dtype=bool),
        "payload_len": length,
        "truncated": np.zeros(m, dtype=bool),
        "ident": hash64(rows, seed),
    }
    return PacketTable(StringPool(), **cols, sources=["simulated load balancer"]), rows


class _Estimator:
    """Pirate's streaming estimator at the balancer, its estimates mapped to servers.

    It runs tacit's centre-tracking histogram (``algorithm="centres"``), not the published
    proportional mode sum: these clients think between requests, and the mode sum takes the
    largest mode, think times here, for the inter-batch gap, and its estimates then follow the
    clients' think times rather than the servers' latency."""

    def __init__(self, params: LoadBalancerParams) -> None:
        self.estimator = StreamingEstimator(
            PirateParams(epoch_ns=params.interval_ns),
            server=f"{VIP}:{SERVICE_PORT}",
            algorithm="centres",
        )
        self.accounting = ResponseAccounting()

    def per_server(
        self, batch: PacketTable, rec: _Records, addresses: np.ndarray, p: LoadBalancerParams
    ) -> tuple[np.ndarray, np.ndarray]:
        """Sample-weighted mean latency and samples per server of the epochs that closed with
        this batch; the balancer knows each connection's server from its connection table."""
        out = self.estimator.feed(batch)
        self.accounting += out.accounting
        conns = out.connections
        client = np.searchsorted(addresses[:, 1], conns.client_lo[out.connection])
        port = conns.client_port[out.connection].astype(np.int64)
        server = rec.connection_servers(p.clients)[(client << 16) | port]
        samples = np.bincount(server, weights=out.samples, minlength=p.servers)
        total = np.bincount(server, weights=out.latency_ns * out.samples, minlength=p.servers)
        with np.errstate(invalid="ignore", divide="ignore"):
            return total / samples, samples


# --------------------------------------------------------------------------------------------
# The compiled event loop


@njit(cache=True, inline="always")
def _work(cum, share, knots, s, t):  # pragma: no cover - compiled
    """Full-core CPU time server ``s`` has had by time ``t``."""
    k = np.searchsorted(knots, t, side="right") - 1
    return cum[s, k] + share[s, k] * (t - knots[k])


@njit(cache=True, inline="always")
def _when(cum, share, knots, s, w):  # pragma: no cover - compiled
    """When server ``s`` will have had ``w`` of full-core CPU time."""
    k = np.searchsorted(cum[s], w, side="right") - 1
    return knots[k] + (w - cum[s, k]) / share[s, k]


@njit(cache=True, inline="always")
def _catch_up(server_t, jobs, cum, share, knots, s, t):  # pragma: no cover - compiled
    """Advance server ``s``'s processor-sharing virtual time to ``t``."""
    if jobs[s] > 0:
        done = _work(cum, share, knots, s, t) - _work(cum, share, knots, s, server_t[_LAST, s])
        server_t[_VIRTUAL, s] += done / jobs[s]
    server_t[_LAST, s] = t


@njit(cache=True, inline="always")
def _size(rng, mean, mss):  # pragma: no cover - compiled
    """A message size: 100 + exponential bytes, at most MAX_SEGMENTS segments."""
    return min(100 + int(rng.exponential(max(mean - 100.0, 1.0))), MAX_SEGMENTS * mss)


@njit(cache=True, inline="always")
def _push(counts, pkt_t, pkt_i, t, conn, flags, seq, ack, length):  # pragma: no cover
    i = counts[2]
    pkt_t[i] = t
    pkt_i[_P_CONN, i], pkt_i[_P_FLAGS, i], pkt_i[_P_SEQ, i] = conn, flags, seq
    pkt_i[_P_ACK, i], pkt_i[_P_LEN, i] = ack, length
    counts[2] = i + 1


# fmt: off
@njit(cache=True, error_model="numpy")
def _loop(
    t_stop, slot_t, slot_i, server_t, jobs, next_port, counts, req_t, req_i, conn_rec, pkt_t,
    pkt_i, entries, knots, share, cum, conf, addresses, vip, seed, rng,
):  # pragma: no cover - compiled
    """Process events until ``t_stop``; True when it stopped early for want of room in the
    output arrays (grow them and call again: no event was half done).

    The random draws are made here and handed to the helpers, and divisions follow numpy's
    error model (no divisor can be zero: shares, segment size and the Maglev table are
    checked), so that the helpers cannot raise: numba then drops the reference counting of
    the arrays they are given, which would cost more than an event."""
    mss, proc = int(conf[10]), conf[9]
    while True:
        if (counts[0] + 1 > req_t.shape[1] or counts[1] + 1 > conn_rec.shape[1]
                or counts[2] + _RESERVE > pkt_t.size):
            return True
        t, c, done_at = _next_event(slot_t, slot_i, server_t, jobs, knots, share, cum)
        if t >= t_stop:
            return False
        if done_at >= 0:  # server done_at answers the request of slot c
            _leave(t, done_at, server_t, jobs, knots, share, cum)
            received = _respond(t, c, slot_i, counts, req_t, req_i, pkt_t, pkt_i, conf)
            pause = rng.exponential(conf[8]) if rng.random() < conf[7] else rng.exponential(proc)
            t = received + pause
            send = _answered(t, c, slot_t, slot_i, counts, pkt_t, pkt_i, conf)
        elif slot_i[_PHASE, c] == _OPEN:  # SYN: Maglev places the new connection
            _connect(c, slot_i, next_port, counts, conn_rec, entries, addresses, vip, seed)
            isn, peer = rng.integers(0, 1 << 32), rng.integers(0, 1 << 32)
            _handshake(t, c, isn, peer, slot_i, counts, pkt_t, pkt_i, conf)
            slot_i[_LEFT, c] = rng.geometric(1.0 / conf[6])
            t = t + 2 * conf[0] + rng.exponential(proc)
            send = True
        else:  # the request of slot c reaches its server
            demand = rng.exponential(conf[3])
            _arrive(t, c, demand, slot_t, slot_i, server_t, jobs, req_t, knots, share, cum)
            send = False
        if send:  # slot c sends its next request at t
            size, response = _size(rng, conf[4], mss), _size(rng, conf[5], mss)
            _send(t, c, size, response, slot_t, slot_i, counts, req_t, req_i, pkt_t, pkt_i, conf)
# fmt: on


@njit(cache=True, inline="always")
def _next_event(slot_t, slot_i, server_t, jobs, knots, share, cum):  # pragma: no cover
    """The next event: a connection opening or a request reaching its server (per slot), or
    the next completion of a server (its request with the smallest finish tag). Returns its
    time, slot and the server that completes it (-1: not a completion)."""
    phase, event, tag, where = slot_i[_PHASE], slot_t[_EVENT], slot_t[_TAG], slot_i[_SERVER]
    t, c, done_at = np.inf, -1, -1
    for i in range(slot_i.shape[1]):
        if phase[i] != _SERVE and event[i] < t:
            t, c = event[i], i
    for s in range(jobs.size):
        if jobs[s] == 0:
            continue
        best = -1
        for i in range(slot_i.shape[1]):
            if phase[i] == _SERVE and where[i] == s and (best < 0 or tag[i] < tag[best]):
                best = i
        w = _work(cum, share, knots, s, server_t[_LAST, s])
        when = _when(cum, share, knots, s, w + (tag[best] - server_t[_VIRTUAL, s]) * jobs[s])
        if when < t:
            t, c, done_at = when, best, s
    return t, c, done_at


@njit(cache=True, error_model="numpy")
def _arrive(
    t, c, demand, slot_t, slot_i, server_t, jobs, req_t, knots, share, cum
):  # pragma: no cover
    """The request of slot ``c`` reaches its server at ``t`` and joins its processor-sharing
    queue, its finish tag its CPU ``demand`` past the server's virtual time."""
    s = slot_i[_SERVER, c]
    _catch_up(server_t, jobs, cum, share, knots, s, t)
    jobs[s] += 1
    slot_t[_TAG, c] = server_t[_VIRTUAL, s] + demand
    slot_i[_PHASE, c] = _SERVE
    req_t[_ARRIVED, slot_i[_REQUEST, c]] = t


@njit(cache=True, error_model="numpy")
def _leave(t, s, server_t, jobs, knots, share, cum):  # pragma: no cover - compiled
    """A request leaves server ``s``'s processor-sharing queue at ``t``."""
    _catch_up(server_t, jobs, cum, share, knots, s, t)
    jobs[s] -= 1


@njit(cache=True, error_model="numpy")
def _respond(t, c, slot_i, counts, req_t, req_i, pkt_t, pkt_i, conf):  # pragma: no cover
    """The server answers the request of slot ``c`` at ``t``: the response's segments reach
    the client one after another, ACKed in pairs (the ACKs pass the balancer), and the
    connection has one request fewer left. Returns when the last segment arrives."""
    d, lb, seg, mss = conf[0], conf[1], conf[2], int(conf[10])
    seq, ack, conn = slot_i[_SEQ], slot_i[_ACK], slot_i[_CONN, c]
    r = slot_i[_REQUEST, c]
    req_t[_DONE, r] = t
    size = req_i[_R_RESPONSE, r]
    segs = (size + mss - 1) // mss
    for j in range(segs):
        if j % 2 == 1 or j == segs - 1:
            _push(counts, pkt_t, pkt_i, t + d + (j + 1) * seg + lb, conn, ACK, seq[c],
                  ack[c] + min((j + 1) * mss, size), 0)  # fmt: skip
    ack[c] += size
    received = t + d + segs * seg
    req_t[_RECEIVED, r] = received
    slot_i[_LEFT, c] -= 1
    return received


@njit(cache=True, error_model="numpy")
def _answered(t, c, slot_t, slot_i, counts, pkt_t, pkt_i, conf):  # pragma: no cover
    """After its pause, at ``t``, slot ``c``'s client sends its next request (True) or, with
    no request left, closes the connection and opens a new one (False)."""
    if slot_i[_LEFT, c] != 0:
        return True
    d, lb = conf[0], conf[1]
    seq, ack, conn = slot_i[_SEQ, c], slot_i[_ACK, c], slot_i[_CONN, c]
    _push(counts, pkt_t, pkt_i, t + lb, conn, FIN | ACK, seq, ack, 0)
    _push(counts, pkt_t, pkt_i, t + 2 * d + lb, conn, ACK, seq + 1, ack + 1, 0)
    slot_i[_PHASE, c] = _OPEN
    slot_t[_EVENT, c] = t
    return False


@njit(cache=True, error_model="numpy")
def _connect(
    c, slot_i, next_port, counts, conn_rec, entries, addresses, vip, seed
):  # pragma: no cover
    """Slot ``c``'s client opens a new connection from its next port, placed by Maglev by the
    hash of its 5-tuple, and records it."""
    k = slot_i[_CLIENT, c]
    port = next_port[k]
    next_port[k] = FIRST_PORT + (port + 1 - FIRST_PORT) % (65536 - FIRST_PORT)
    h = flow_key(addresses[k, 0], addresses[k, 1], vip[0], vip[1], np.uint64(port),
                 np.uint64(SERVICE_PORT), np.uint64(TCP), seed)  # fmt: skip
    s = entries[np.int64(h % np.uint64(entries.size))]
    conn = counts[1]
    counts[1] = conn + 1
    conn_rec[_C_CLIENT, conn], conn_rec[_C_PORT, conn] = k, port
    conn_rec[_C_SERVER, conn] = s
    slot_i[_CONN, c], slot_i[_SERVER, c] = conn, s


@njit(cache=True, error_model="numpy")
def _handshake(t, c, isn, peer, slot_i, counts, pkt_t, pkt_i, conf):  # pragma: no cover
    """The client's SYN (initial sequence number ``isn``) at ``t`` and its ACK of the server's
    SYN-ACK (the server's ``peer``) pass the balancer."""
    d, lb, conn = conf[0], conf[1], slot_i[_CONN, c]
    _push(counts, pkt_t, pkt_i, t + lb, conn, SYN, isn, 0, 0)
    slot_i[_SEQ, c], slot_i[_ACK, c] = isn + 1, peer + 1
    _push(counts, pkt_t, pkt_i, t + 2 * d + lb, conn, ACK, slot_i[_SEQ, c], slot_i[_ACK, c], 0)


@njit(cache=True, error_model="numpy")
def _send(
    t, c, size, response, slot_t, slot_i, counts, req_t, req_i, pkt_t, pkt_i, conf
):  # pragma: no cover
    """Slot ``c`` sends a request of ``size`` bytes (answered by ``response`` bytes) at
    ``t``: its segments pass the balancer back to back."""
    d, lb, seg, mss = conf[0], conf[1], conf[2], int(conf[10])
    seq, ack, conn = slot_i[_SEQ], slot_i[_ACK], slot_i[_CONN, c]
    r = counts[0]
    counts[0] = r + 1
    req_t[_SENT, r] = t
    req_i[_R_CONN, r], req_i[_R_SERVER, r] = conn, slot_i[_SERVER, c]
    req_i[_R_RESPONSE, r] = response
    slot_i[_REQUEST, c] = r
    segs = (size + mss - 1) // mss
    for j in range(segs):
        length = min(mss, size - j * mss)
        flags = ACK | PSH if j == segs - 1 else ACK
        _push(counts, pkt_t, pkt_i, t + lb + j * seg, conn, flags, seq[c], ack[c], length)
        seq[c] += length
    slot_i[_PHASE, c] = _ARRIVE
    slot_t[_EVENT, c] = t + d + (segs - 1) * seg
