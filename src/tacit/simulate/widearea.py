"""A wide-area message-trace simulator with ground truth, for black-box causal path analysis.

WAP5 (Reynolds et al., "WAP5: Black-box Performance Debugging for Wide-Area Systems", WWW '06)
infers causal paths from the messages that nodes send and receive, with clocks that disagree by
seconds and network delays of tens of milliseconds. Its evaluation (§6) traces two kinds of
wide-area system: a content distribution network (CoDeeN and Coral's HTTP proxies) and a
distributed hash table (Coral's DSHT, Chord-like lookups). This module produces message traces of
both, with the truth an evaluation needs: each message's causal parent and request, each host's
clock offset, the true node and network delays, and how often each path shape occurred.

The model
---------
Every node runs on its own host. Hosts sit at random points of a square map ``net_span_ms`` on
a side; the base one-way delay of a host pair is ``net_min_ms`` plus their distance (so tens of
milliseconds, the same both ways), and each message adds an exponential jitter of mean
``net_jitter`` times the base (so the two directions of a pair are symmetric in expectation, as
WAP5 §5.2 assumes). A node takes a processing delay between receiving a message and sending the
message it causes; it is lognormal with median ``step_median_ms[step]`` times a per-node factor
(lognormal with spread ``node_spread``; ``n_slow`` nodes are ``slow_factor`` times slower) and
shape ``delay_sigma``. Nodes serve requests concurrently without queueing (an infinite-server
model), so many requests overlap at every node and the delays do not depend on the load.
Requests arrive as a Poisson process of ``rate`` per second for ``duration_s`` seconds.

``scenario="cdn"`` (WAP5 §6, CoDeeN/Coral CDN): a client sends an HTTP request to its first-hop
proxy (clients sit near their proxy, ``client_distance_ms`` away on average; client ``i`` uses
proxy ``i mod n_proxies``). With probability ``hit_first`` the proxy answers from its cache
(shape ``hit1``). Otherwise it forwards the request to a second-hop proxy chosen by URL hash
(uniformly among the others), which answers from its cache with probability ``hit_second``
(``hit2``); on a miss it fetches the object from an origin server (``miss``), first resolving the
origin's name with a request/response to the DNS server with probability ``dns_lookup`` (a
``miss+dns``, the rare path: (1 - 0.5)(1 - 0.6)(0.15) = 3 % of requests by default). Responses
flow back along the path. Steps: ``hit``, ``forward`` (send upstream on a miss), ``resolve``
(send the DNS query), ``fetch`` (send to the origin after the DNS answer), ``relay`` (pass a
response back), ``serve`` (origin) and ``lookup`` (DNS).

``scenario="dht"`` (WAP5 §6, Coral's DSHT, Chord-like): ``dht_nodes`` nodes sit on a ring at
consecutive positions with full Chord finger tables. A lookup from a client starts at a random
entry node and routes to the owner of a random key by the largest finger that does not pass it,
so it contacts popcount(distance) + 1 nodes (1 to log2 N + 1, mean 1 + ½·log2 N). A lookup is
recursive with probability ``recursive_fraction`` and iterative otherwise. Iterative: the client
asks each node in turn, and each answers with the next hop (step ``route``; the owner answers
with the value, ``answer``) after which the client asks the next one (``next``). Recursive: each
node forwards the lookup to the next hop (``route``); the owner sends the value straight to the
client (``recursive_reply="direct"``) or back along the path (``"path"``, step ``relay``). Shapes
are ``iterative-K`` and ``recursive-K`` with K the nodes contacted.

In both scenarios every proxy (CDN) or DHT node also sends a heartbeat every
``heartbeat_interval_s`` (random phase, ±10 % jitter) to a peer (a random other proxy; the DHT
successor), which answers it (``pong``) when ``heartbeat_reply``. A heartbeat has no cause: it
is the first message of its own request, of shape ``heartbeat``.

What is recorded
----------------
One message per request, response, query or heartbeat, with its nodes, hosts, endpoints
(``ip:port``: servers listen on well-known ports, connections come from per-host ephemeral ports
in order of use; DHT nodes and heartbeats use one UDP port at both ends), size, and ``flow``
shared by the request and response of one exchange (a recursive hop or a direct reply is a flow
of its own). Send and receive times are on the clock of the sending and the receiving host,
each off from true time by a uniform offset within ±``clock_offset_max_s``; an end whose node is
not traced is :data:`~tacit.model.messages.MISSING` (by default CDN clients are not traced, DHT
clients are; origins and DNS can be untraced too, giving A→B→A with no visible middle). A
message that neither end traced is left out, and a child's parent then skips to its nearest
visible ancestor. Messages are sorted by true send time. All randomness comes from one numpy
Generator seeded by ``seed``; the run is vectorized (requests are independent without queues),
so a million messages take a second or two.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from tacit.errors import ConfigError
from tacit.model.messages import MISSING, MessageTable, MessageTruth
from tacit.model.spans import StringPool
from tacit.runs import distinct, run_heads
from tacit.simulate.microservices import EPOCH_NS

SCENARIOS = ("cdn", "dht")
"""The two settings of WAP5 §6."""
REPLY_MODES = ("direct", "path")
"""How a recursive DHT lookup's answer returns to the client."""

STEPS = (
    "hit",
    "forward",
    "resolve",
    "fetch",
    "relay",
    "serve",
    "lookup",
    "route",
    "answer",
    "next",
    "pong",
)
"""The kinds of processing step a node takes between a receipt and the send it causes."""

DEFAULT_STEP_MEDIAN_MS: dict[str, float] = {
    "hit": 1.0,  # a proxy answers from its cache
    "forward": 0.5,  # a proxy sends a missed request upstream (second hop or origin)
    "resolve": 0.3,  # the second-hop proxy sends a DNS query
    "fetch": 0.4,  # ... and, on the answer, the request to the origin
    "relay": 0.3,  # a proxy (or DHT node) passes a response back
    "serve": 20.0,  # an origin web server produces the object
    "lookup": 5.0,  # the DNS server resolves a name
    "route": 0.8,  # a DHT node picks the next hop
    "answer": 1.5,  # the key's owner reads the value
    "next": 0.3,  # an iterative DHT client asks the next hop
    "pong": 0.2,  # a peer answers a heartbeat
}
"""Median processing delay of each step (ms) before the per-node factor."""

HEARTBEAT = "heartbeat"
"""The shape of a heartbeat (and its answer)."""

_EPHEMERAL_LOW = 32768
_EPHEMERAL_COUNT = 28232  # Linux's default ip_local_port_range, 32768-60999
_PORTS = {"proxy": 3128, "heartbeat": 3130, "origin": 80, "dns": 53, "dht": 4000}
_SUBNET = {"client": 1, "proxy": 2, "origin": 3, "dns": 4, "dht": 5}
_HEARTBEAT_JITTER = 0.1  # fraction of the interval


@dataclass(frozen=True)
class WideAreaParams:
    """What to simulate; see the module docstring for the model each field drives.

    Defaults give a CDN of 8 proxies serving 16 clients at 200 requests/s for 60 s (25 client
    requests/s per first-hop proxy, ~12 000 requests, ~42 000 messages), clocks off by up to
    5 s, and a DHT of 32 nodes at 200 lookups/s.
    """

    scenario: str = "cdn"
    rate: float = 200.0
    """Client requests (CDN) or lookups (DHT) per second, all clients together."""
    duration_s: float = 60.0
    seed: int = 0
    n_clients: int = 16

    # CDN (WAP5 §6, CoDeeN / Coral proxies)
    n_proxies: int = 8
    n_origins: int = 4
    hit_first: float = 0.5
    """Probability that the first-hop proxy has the object."""
    hit_second: float = 0.6
    """Probability that the second-hop proxy has it, given a miss at the first."""
    dns_lookup: float = 0.15
    """Probability that a miss at the second-hop proxy needs a DNS lookup first."""
    client_distance_ms: float = 3.0
    """Mean distance (one-way ms beyond ``net_min_ms``) of a client from its proxy."""

    # DHT (WAP5 §6, Coral's DSHT; Chord routing)
    dht_nodes: int = 32
    recursive_fraction: float = 0.5
    recursive_reply: str = "direct"

    # Nodes
    step_median_ms: Mapping[str, float] = field(
        default_factory=lambda: dict(DEFAULT_STEP_MEDIAN_MS)
    )
    delay_sigma: float = 0.5
    """Lognormal shape of every processing delay."""
    node_spread: float = 0.3
    """Lognormal spread of the per-node factor on the step medians."""
    n_slow: int = 1
    """How many proxies (CDN) or DHT nodes are ``slow_factor`` times slower."""
    slow_factor: float = 10.0

    # Network
    net_min_ms: float = 2.0
    net_span_ms: float = 70.0
    """Side of the square map; one-way base delays reach ``net_min_ms + 1.41 * net_span_ms``."""
    net_jitter: float = 0.1
    """Mean exponential jitter of a message as a fraction of its pair's base delay."""

    # Clocks
    clock_offset_max_s: float = 5.0

    # Background traffic
    heartbeat_interval_s: float = 1.0
    """Period of each proxy's (DHT node's) heartbeat; 0 for none."""
    heartbeat_reply: bool = True

    # Tracing
    trace_clients: bool | None = None
    """Whether clients are traced; ``None``: not in the CDN, yes in the DHT."""
    trace_origins: bool = True
    trace_dns: bool = True
    untraced: tuple[str, ...] = ()
    """Further nodes (by name, e.g. ``"proxy-3"``) that are not traced."""


@dataclass
class WideAreaRun:
    """A simulated trace and its ground truth.

    ``messages`` are sorted by true send time; ``truth`` gives each message's causal parent and
    request (numbered by start time, heartbeats included) and each host's clock offset (ns).
    Per message, ``true_send``/``true_recv`` are the true times (ns since the epoch, the clock a
    host with offset 0 reads) and ``step`` indexes :data:`STEPS` for the processing step its
    sender took since receiving the parent (-1 for the first message of a request). Per request,
    ``request_shape`` indexes ``shapes``. ``shape_fraction`` is the fraction of client requests
    (CDN) or lookups (DHT) of each shape, heartbeats left out; ``n_requests`` is their number.
    ``node_delay`` is the true mean processing delay (ns) of each (node, step) that occurs,
    ``network_delay`` the true mean one-way delay (ns) of each (source host, destination host)
    pair that carries messages. ``traced`` says which nodes were traced.
    """

    params: WideAreaParams
    messages: MessageTable
    truth: MessageTruth
    true_send: np.ndarray
    true_recv: np.ndarray
    step: np.ndarray
    request_shape: np.ndarray
    shapes: tuple[str, ...]
    shape_fraction: dict[str, float]
    n_requests: int
    node_delay: dict[tuple[str, str], float]
    network_delay: dict[tuple[str, str], float]
    traced: dict[str, bool]
    slow_nodes: tuple[str, ...]


# --------------------------------------------------------------------------------------------
# Path templates


@dataclass(frozen=True)
class _Template:
    """The messages of one path shape, for a group of requests with the same shape.

    A group gives each request a row of role nodes; ``path[i]`` is the role column of the i-th
    node on the path, so message ``j`` goes from ``path[j]`` to ``path[j + 1]``, after the
    sender took step ``steps[j]`` (None for the first message). ``flows[j]`` is the exchange
    slot of message ``j`` (its first message is the request, later ones responses) and
    ``ports[slot]`` is (the responder's port, the initiator's port or -1 for ephemeral).
    """

    shape: str
    path: tuple[int, ...]
    steps: tuple[str | None, ...]
    flows: tuple[int, ...]
    ports: tuple[tuple[int, int], ...]
    sizes: tuple[str, ...]


def _cdn_templates() -> list[_Template]:
    # Roles: 0 client, 1 first-hop proxy, 2 second-hop proxy, 3 DNS server, 4 origin.
    http, dns, origin = (_PORTS["proxy"], -1), (_PORTS["dns"], -1), (_PORTS["origin"], -1)
    return [
        _Template("hit1", (0, 1, 0), (None, "hit"), (0, 0), (http,), ("req", "obj")),
        _Template(
            "hit2",
            (0, 1, 2, 1, 0),
            (None, "forward", "hit", "relay"),
            (0, 1, 1, 0),
            (http, http),
            ("req", "fwd", "obj", "obj"),
        ),
        _Template(
            "miss",
            (0, 1, 2, 4, 2, 1, 0),
            (None, "forward", "forward", "serve", "relay", "relay"),
            (0, 1, 2, 2, 1, 0),
            (http, http, origin),
            ("req", "fwd", "fwd", "obj", "obj", "obj"),
        ),
        _Template(
            "miss+dns",
            (0, 1, 2, 3, 2, 4, 2, 1, 0),
            (None, "forward", "resolve", "lookup", "fetch", "serve", "relay", "relay"),
            (0, 1, 2, 2, 3, 3, 1, 0),
            (http, http, dns, origin),
            ("req", "fwd", "dnsq", "dnsr", "fwd", "obj", "obj", "obj"),
        ),
    ]


def _dht_template(k: int, recursive: bool, reply: str) -> _Template:
    """Roles: 0 client, 1..k the nodes contacted in order (k the owner)."""
    udp = (_PORTS["dht"], _PORTS["dht"])
    nodes = list(range(1, k + 1))
    if not recursive:
        path = [0]
        steps: list[str | None] = [None]
        flows: list[int] = []
        for i, n in enumerate(nodes):
            path += [n, 0]
            steps += ["answer" if n == k else "route", "next"]
            flows += [i, i]
        steps.pop()  # the client takes no step after the owner's answer
        return _Template(
            f"iterative-{k}",
            tuple(path),
            tuple(steps),
            tuple(flows),
            (udp,) * k,
            ("q", "r") * k,
        )
    forward_steps: list[str | None] = [None, *(["route"] * (k - 1))]
    if reply == "direct" or k == 1:
        path = [0, *nodes, 0]
        steps = [*forward_steps, "answer"]
        flows = [*range(k), 0 if k == 1 else k]
        sizes = ("q",) * k + ("r",)
    else:
        path = [0, *nodes, *reversed(nodes[:-1]), 0]
        steps = [*forward_steps, "answer", *(["relay"] * (k - 1))]
        flows = [*range(k), *reversed(range(k))]
        sizes = ("q",) * k + ("r",) * k
    return _Template(
        f"recursive-{k}",
        tuple(path),
        tuple(steps),
        tuple(flows),
        (udp,) * (max(flows) + 1),
        sizes,
    )


def _heartbeat_template(port: int, reply: bool) -> _Template:
    ports = ((port, port),)
    if reply:
        return _Template(HEARTBEAT, (0, 1, 0), (None, "pong"), (0, 0), ports, ("ping", "ping"))
    return _Template(HEARTBEAT, (0, 1), (None,), (0,), ports, ("ping",))


# --------------------------------------------------------------------------------------------
# Simulation


def simulate_widearea(params: WideAreaParams | None = None) -> WideAreaRun:
    """Simulate the CDN or DHT of ``params`` (defaults: :class:`WideAreaParams`)."""
    params = params or WideAreaParams()
    _check(params)
    return _Simulation(params).run()


def _check(p: WideAreaParams) -> None:  # noqa: C901, PLR0912
    def bad(name: str, rule: str) -> ConfigError:
        return ConfigError(f"WideAreaParams.{name} must be {rule}, got {getattr(p, name)!r}")

    if p.scenario not in SCENARIOS:
        raise bad("scenario", " or ".join(SCENARIOS))
    if p.recursive_reply not in REPLY_MODES:
        raise bad("recursive_reply", " or ".join(REPLY_MODES))
    for name in ("rate", "duration_s", "net_span_ms", "slow_factor"):
        v = getattr(p, name)
        if not (isinstance(v, int | float) and math.isfinite(v) and v > 0):
            raise bad(name, "a positive number")
    for name in (
        "client_distance_ms",
        "delay_sigma",
        "node_spread",
        "net_min_ms",
        "net_jitter",
        "clock_offset_max_s",
        "heartbeat_interval_s",
    ):
        v = getattr(p, name)
        if not (isinstance(v, int | float) and math.isfinite(v) and v >= 0):
            raise bad(name, "a number >= 0")
    for name in ("hit_first", "hit_second", "dns_lookup", "recursive_fraction"):
        if not 0.0 <= getattr(p, name) <= 1.0:
            raise bad(name, "a probability in [0, 1]")
    if p.n_clients < 1:
        raise bad("n_clients", ">= 1")
    if p.n_origins < 1:
        raise bad("n_origins", ">= 1")
    if p.n_proxies < 2:
        raise bad("n_proxies", ">= 2 (a miss goes to another proxy)")
    if p.dht_nodes < 2:
        raise bad("dht_nodes", ">= 2")
    if p.n_slow < 0:
        raise bad("n_slow", ">= 0")
    missing = [s for s in STEPS if s not in p.step_median_ms]
    unknown = [s for s in p.step_median_ms if s not in STEPS]
    if missing or unknown:
        raise ConfigError(
            f"WideAreaParams.step_median_ms must name every step ({', '.join(STEPS)}); "
            f"missing: {missing}, unknown: {unknown}"
        )
    if any(not (math.isfinite(v) and v > 0) for v in p.step_median_ms.values()):
        raise bad("step_median_ms", "positive medians")


class _Simulation:
    """The nodes, hosts and network of one run, and the message columns it accumulates."""

    def __init__(self, p: WideAreaParams) -> None:
        self.p = p
        self.rng = np.random.default_rng(p.seed)
        self._make_nodes()
        self._make_network()
        self._make_delays()
        self.parts: list[dict[str, np.ndarray]] = []
        self.flow_parts: list[dict[str, np.ndarray]] = []
        self.request_start: list[np.ndarray] = []
        self.request_shape: list[np.ndarray] = []
        self.shapes: list[str] = []
        self.n_messages = 0
        self.n_flows = 0
        self.n_req = 0

    # -- set-up

    def _add_role(self, role: str, names: list[str]) -> np.ndarray:
        first = len(self.names)
        self.names += names
        self.roles += [role] * len(names)
        self.ips += [f"10.{_SUBNET[role]}.{i // 250}.{i % 250 + 1}" for i in range(len(names))]
        return np.arange(first, first + len(names))

    def _make_nodes(self) -> None:
        p = self.p
        self.names: list[str] = []
        self.roles: list[str] = []
        self.ips: list[str] = []
        self.clients = self._add_role("client", [f"client-{i}" for i in range(p.n_clients)])
        if p.scenario == "cdn":
            self.proxies = self._add_role("proxy", [f"proxy-{i}" for i in range(p.n_proxies)])
            self.origins = self._add_role("origin", [f"origin-{i}" for i in range(p.n_origins)])
            self.dns = int(self._add_role("dns", ["dns"])[0])
            self.servers = self.proxies
        else:
            self.dht = self._add_role("dht", [f"dht-{i}" for i in range(p.dht_nodes)])
            self.servers = self.dht
        n = len(self.names)
        trace_clients = p.trace_clients if p.trace_clients is not None else p.scenario == "dht"
        traced = np.ones(n, dtype=bool)
        roles = np.array(self.roles)
        traced[roles == "client"] = trace_clients
        traced[roles == "origin"] = p.trace_origins
        traced[roles == "dns"] = p.trace_dns
        for name in p.untraced:
            if name not in self.names:
                raise ConfigError(f"WideAreaParams.untraced: no node {name!r}")
            traced[self.names.index(name)] = False
        self.traced = traced

    def _make_network(self) -> None:
        p, rng = self.p, self.rng
        n = len(self.names)
        pos = rng.uniform(0.0, p.net_span_ms, size=(n, 2))
        if p.scenario == "cdn":
            # Clients sit near their first-hop proxy (client i uses proxy i mod n_proxies).
            self.first_hop = self.proxies[np.arange(p.n_clients) % p.n_proxies]
            angle = rng.uniform(0.0, 2 * np.pi, p.n_clients)
            radius = rng.exponential(p.client_distance_ms, p.n_clients)
            pos[self.clients] = pos[self.first_hop] + radius[:, None] * np.column_stack(
                [np.cos(angle), np.sin(angle)]
            )
        dist = np.sqrt(((pos[:, None, :] - pos[None, :, :]) ** 2).sum(axis=2))
        self.base_ns = (p.net_min_ms + dist) * 1e6
        self.offset_ns = np.rint(
            rng.uniform(-p.clock_offset_max_s, p.clock_offset_max_s, n) * 1e9
        ).astype(np.int64)

    def _make_delays(self) -> None:
        p, rng = self.p, self.rng
        n = len(self.names)
        factor = np.exp(p.node_spread * rng.standard_normal(n))
        slow = rng.choice(self.servers, size=min(p.n_slow, len(self.servers)), replace=False)
        factor[slow] *= p.slow_factor
        self.slow = tuple(self.names[i] for i in sorted(slow.tolist()))
        medians = np.array([p.step_median_ms[s] for s in STEPS]) * 1e6
        self.median_ns = factor[:, None] * medians[None, :]

    # -- randomness

    def _proc(self, node: np.ndarray, step: int) -> np.ndarray:
        z = self.rng.standard_normal(len(node))
        return self.median_ns[node, step] * np.exp(self.p.delay_sigma * z)

    def _net(self, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        base = self.base_ns[src, dst]
        return base * (1.0 + self.p.net_jitter * self.rng.standard_exponential(len(src)))

    def _arrivals(self) -> np.ndarray:
        p = self.p
        count = self.rng.poisson(p.rate * p.duration_s)
        return np.sort(self.rng.uniform(0.0, p.duration_s * 1e9, count))

    # -- requests

    def run(self) -> WideAreaRun:
        if self.p.scenario == "cdn":
            self._cdn()
            port = _PORTS["heartbeat"]
        else:
            self._dht()
            port = _PORTS["dht"]
        self._heartbeats(port)
        return self._result()

    def _cdn(self) -> None:
        p, rng = self.p, self.rng
        start = self._arrivals()
        n = len(start)
        client = rng.integers(0, p.n_clients, n)
        first = self.first_hop[client]
        second = self.proxies[
            (first - self.proxies[0] + rng.integers(1, p.n_proxies, n)) % p.n_proxies
        ]
        origin = self.origins[rng.integers(0, p.n_origins, n)]
        roles = np.column_stack([self.clients[client], first, second, np.full(n, self.dns), origin])
        u = rng.random((n, 3))
        shape = np.where(
            u[:, 0] < p.hit_first,
            0,
            np.where(u[:, 1] < p.hit_second, 1, np.where(u[:, 2] < p.dns_lookup, 3, 2)),
        )
        obj = np.rint(rng.lognormal(np.log(8000.0), 1.2, n)).astype(np.int64)
        for k, tpl in enumerate(_cdn_templates()):
            rows = np.flatnonzero(shape == k)
            self._chains(tpl, roles[rows], start[rows], obj[rows])

    def _dht(self) -> None:
        p, rng = self.p, self.rng
        start = self._arrivals()
        n = len(start)
        size = p.dht_nodes
        client = self.clients[rng.integers(0, p.n_clients, n)]
        entry = rng.integers(0, size, n)
        left = (rng.integers(0, size, n) - entry) % size  # ring distance to the key's owner
        hops = np.zeros(n, dtype=np.int64)
        cols = [entry]
        at = entry.copy()
        while left.any():
            # Chord: jump by the largest finger (power of two) that does not pass the owner.
            _, bits = np.frexp(np.maximum(left, 1).astype(np.float64))
            jump = np.where(left > 0, 1 << (bits.astype(np.int64) - 1), 0)
            at = (at + jump) % size
            left = left - jump
            hops += jump > 0
            cols.append(at)
        ring = np.column_stack(cols)
        recursive = rng.random(n) < p.recursive_fraction
        for rec in (False, True):
            for k in range(1, int(hops.max()) + 2):
                rows = np.flatnonzero((hops + 1 == k) & (recursive == rec))
                if len(rows):
                    roles = np.column_stack([client[rows], self.dht[ring[rows, :k]]])
                    tpl = _dht_template(k, rec, p.recursive_reply)
                    self._chains(tpl, roles, start[rows], np.zeros(len(rows), np.int64))

    def _heartbeats(self, port: int) -> None:
        p, rng = self.p, self.rng
        interval = p.heartbeat_interval_s * 1e9
        if interval <= 0:
            return
        senders = self.servers
        per = math.ceil(p.duration_s * 1e9 / interval)
        phase = rng.uniform(0.0, interval, len(senders))
        k = np.arange(per)
        times = phase[:, None] + interval * k[None, :]
        times += rng.uniform(-1.0, 1.0, times.shape) * _HEARTBEAT_JITTER * interval
        sender = np.repeat(np.arange(len(senders)), per)
        times = times.ravel()
        keep = (times >= 0) & (times < p.duration_s * 1e9)
        sender, times = sender[keep], times[keep]
        m = len(senders)
        if p.scenario == "cdn":
            peer = (sender + rng.integers(1, m, len(sender))) % m
        else:
            peer = (sender + 1) % m  # Chord's successor
        roles = np.column_stack([senders[sender], senders[peer]])
        tpl = _heartbeat_template(port, p.heartbeat_reply)
        self._chains(tpl, roles, times, np.zeros(len(times), np.int64))

    def _shape_code(self, shape: str) -> int:
        if shape not in self.shapes:
            self.shapes.append(shape)
        return self.shapes.index(shape)

    def _chains(
        self,
        tpl: _Template,
        roles: np.ndarray,
        start: np.ndarray,
        obj: np.ndarray,
    ) -> None:
        """Run one group of requests of the shape ``tpl`` (one row of ``roles`` each)."""
        code = self._shape_code(tpl.shape)
        n, m = len(start), len(tpl.steps)
        if n == 0:
            return
        nodes = roles[:, list(tpl.path)]
        send = np.empty((n, m))
        recv = np.empty((n, m))
        step = np.full(m, -1, dtype=np.int64)
        for j, name in enumerate(tpl.steps):
            src, dst = nodes[:, j], nodes[:, j + 1]
            if name is None:
                send[:, j] = start
            else:
                step[j] = STEPS.index(name)
                send[:, j] = recv[:, j - 1] + self._proc(src, int(step[j]))
            recv[:, j] = send[:, j] + self._net(src, dst)
        slots = len(tpl.ports)
        flow_base = self.n_flows + slots * np.arange(n)[:, None]
        flows = np.asarray(tpl.flows)
        first_of_slot = np.array([tpl.flows.index(s) for s in range(slots)])
        response = np.array([tpl.flows.index(f) != j for j, f in enumerate(tpl.flows)])
        msg_base = self.n_messages + m * np.arange(n)[:, None]
        parent = np.where(np.arange(m) > 0, msg_base + np.arange(m) - 1, -1)
        self.parts.append(
            {
                "src": nodes[:, :-1].ravel(),
                "dst": nodes[:, 1:].ravel(),
                "send": send.ravel(),
                "recv": recv.ravel(),
                "step": np.broadcast_to(step, (n, m)).ravel(),
                "flow": (flow_base + flows).ravel(),
                "response": np.broadcast_to(response, (n, m)).ravel(),
                "size": self._sizes(tpl.sizes, obj).ravel(),
                "parent": parent.ravel(),
                "request": np.repeat(self.n_req + np.arange(n), m),
            }
        )
        self.flow_parts.append(
            {
                "init": nodes[:, first_of_slot].ravel(),
                "first": send[:, first_of_slot].ravel(),
                "service": np.broadcast_to(np.array([s for s, _ in tpl.ports]), (n, slots)).ravel(),
                "fixed": np.broadcast_to(np.array([f for _, f in tpl.ports]), (n, slots)).ravel(),
            }
        )
        self.request_start.append(np.asarray(start, dtype=np.float64))
        self.request_shape.append(np.full(n, code, dtype=np.int64))
        self.n_messages += n * m
        self.n_flows += n * slots
        self.n_req += n

    def _sizes(self, kinds: tuple[str, ...], obj: np.ndarray) -> np.ndarray:
        n = len(obj)
        rng = self.rng
        out = np.empty((n, len(kinds)), dtype=np.int64)
        for j, kind in enumerate(kinds):
            if kind == "obj":
                out[:, j] = obj + 280  # the object and its response headers
            else:
                low, high = {
                    "req": (300, 600),
                    "fwd": (350, 700),  # with the proxy's added headers
                    "dnsq": (30, 60),
                    "dnsr": (60, 200),
                    "q": (60, 100),
                    "r": (80, 200),
                    "ping": (48, 48),
                }[kind]
                out[:, j] = rng.integers(low, high + 1, n)
        return out

    # -- output

    def _result(self) -> WideAreaRun:
        p = self.p
        cols = {k: np.concatenate([part[k] for part in self.parts]) for k in self.parts[0]}
        flows = {
            k: np.concatenate([part[k] for part in self.flow_parts]) for k in self.flow_parts[0]
        }
        src, dst = cols["src"], cols["dst"]

        # Leave out what neither end traced; a parent left out passes to its nearest visible
        # ancestor.
        visible = self.traced[src] | self.traced[dst]
        parent = cols["parent"]
        while True:
            hidden = (parent >= 0) & ~visible[np.maximum(parent, 0)]
            if not hidden.any():
                break
            parent = np.where(hidden, cols["parent"][np.maximum(parent, 0)], parent)
        keep = np.flatnonzero(visible)
        order = keep[np.argsort(cols["send"][keep], kind="stable")]
        row_of = np.full(len(src) + 1, -1, dtype=np.int64)  # the last slot maps -1 to -1
        row_of[order] = np.arange(len(order))
        parent = row_of[parent[order]]

        # Requests numbered by start time.
        start = np.concatenate(self.request_start)
        req_order = np.argsort(start, kind="stable")
        req_id = np.empty(len(start), dtype=np.int64)
        req_id[req_order] = np.arange(len(start))
        request_shape = np.concatenate(self.request_shape)[req_order]

        # Ports: ephemeral ones in order of use per initiating host.
        port = flows["fixed"].copy()
        eph = np.flatnonzero(port < 0)
        by = eph[np.lexsort((flows["first"][eph], flows["init"][eph]))]
        host = flows["init"][by]
        pos = np.arange(len(by))
        group_start = np.maximum.accumulate(np.where(run_heads(host), pos, 0))
        port[by] = _EPHEMERAL_LOW + (pos - group_start) % _EPHEMERAL_COUNT
        flow, response = cols["flow"][order], cols["response"][order]
        src, dst = src[order], dst[order]
        src_port = np.where(response, flows["service"][flow], port[flow])
        dst_port = np.where(response, port[flow], flows["service"][flow])

        strings = StringPool(self.names)
        keys = np.concatenate([src * 65536 + src_port, dst * 65536 + dst_port])
        uniq, inverse = np.unique(keys, return_inverse=True)
        ep_codes = np.array(
            [strings.code(f"{self.ips[k >> 16]}:{k & 0xFFFF}") for k in uniq.tolist()],
            dtype=np.int64,
        )[inverse]
        n = len(order)

        # Flows renumbered by first appearance.
        _, first_row, flow_inv = np.unique(flow, return_index=True, return_inverse=True)
        flow_rank = np.empty(len(first_row), dtype=np.int64)
        flow_rank[np.argsort(first_row)] = np.arange(len(first_row))

        true_send = np.rint(cols["send"][order]).astype(np.int64) + EPOCH_NS
        true_recv = np.rint(cols["recv"][order]).astype(np.int64) + EPOCH_NS
        send = np.where(self.traced[src], true_send + self.offset_ns[src], MISSING)
        recv = np.where(self.traced[dst], true_recv + self.offset_ns[dst], MISSING)
        messages = MessageTable(
            strings,
            src=src,
            dst=dst,
            src_host=src,
            dst_host=dst,
            src_endpoint=ep_codes[:n],
            dst_endpoint=ep_codes[n:],
            send=send,
            recv=recv,
            size=cols["size"][order],
            flow=flow_rank[flow_inv],
            record=np.arange(n),
            sources=[f"simulate:widearea-{p.scenario}"],
        )
        truth = MessageTruth(
            parent=parent,
            request=req_id[cols["request"][order]],
            host_offset={name: int(o) for name, o in zip(self.names, self.offset_ns, strict=True)},
        )
        step = cols["step"][order]
        return WideAreaRun(
            params=p,
            messages=messages,
            truth=truth,
            true_send=true_send,
            true_recv=true_recv,
            step=step,
            request_shape=request_shape,
            shapes=tuple(self.shapes),
            shape_fraction=self._fractions(request_shape),
            n_requests=int((request_shape != self._heartbeat_code()).sum()),
            node_delay=self._node_delay(src, step),
            network_delay=self._network_delay(src, dst),
            traced={name: bool(t) for name, t in zip(self.names, self.traced, strict=True)},
            slow_nodes=self.slow,
        )

    def _heartbeat_code(self) -> int:
        return self.shapes.index(HEARTBEAT) if HEARTBEAT in self.shapes else -1

    def _fractions(self, request_shape: np.ndarray) -> dict[str, float]:
        heartbeat = self._heartbeat_code()
        counts = np.bincount(request_shape, minlength=len(self.shapes))
        total = counts.sum() - (counts[heartbeat] if heartbeat >= 0 else 0)
        return {
            s: (float(counts[i] / total) if total else 0.0)
            for i, s in enumerate(self.shapes)
            if i != heartbeat
        }

    def _node_delay(self, src: np.ndarray, step: np.ndarray) -> dict[tuple[str, str], float]:
        has = step >= 0
        pairs = distinct(src[has] * len(STEPS) + step[has]).tolist()
        scale = math.exp(self.p.delay_sigma**2 / 2)  # lognormal mean / median
        return {
            (self.names[a], STEPS[b]): float(self.median_ns[a, b] * scale)
            for a, b in (divmod(k, len(STEPS)) for k in pairs)
        }

    def _network_delay(self, src: np.ndarray, dst: np.ndarray) -> dict[tuple[str, str], float]:
        n = len(self.names)
        pairs = distinct(src * n + dst).tolist()
        scale = 1.0 + self.p.net_jitter
        return {
            (self.names[a], self.names[b]): float(self.base_ns[a, b] * scale)
            for a, b in (divmod(k, n) for k in pairs)
        }
