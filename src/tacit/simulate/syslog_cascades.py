"""A simulated datacenter network whose device syslogs hold cascades with known causal rules.

The ground truth for YTrace's network diagnosis (Kanuparthy et al., arXiv 1602.03273, §4): a
three-tier topology (core, aggregation, top-of-rack switches, hosts under each rack), incidents
that follow the rules "link down → spanning-tree topology change on the same device →
line-protocol down on the link's peer" (each step with a probability and a random delay), noise
templates logged at random by every device (some in bursts), and RPCs between hosts whose
one-way delay grows while they cross a device with an incident. Lines are RFC 5424 text; every
line carries its true template name, every incident its devices and time, every RPC its truth.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tacit.errors import ConfigError
from tacit.formats.syslog import format_rfc5424
from tacit.model.topology import Topology

S = 1_000_000_000
MS = 1_000_000

LINK_DOWN = "link_down"
STP_CHANGE = "stp_change"
PEER_DOWN = "peer_lineproto_down"
CASCADE_TEMPLATES = {
    LINK_DOWN: "%LINK-3-UPDOWN: Interface {ifname}, changed state to down",
    STP_CHANGE: "%SPANTREE-5-TOPOTRAP: Topology Change Trap for vlan {vlan} instance {n}",
    PEER_DOWN: "%LINEPROTO-5-UPDOWN: Line protocol on Interface {ifname}, changed state to down",
}
TRUE_RULES = ((LINK_DOWN, STP_CHANGE, "intra"), (STP_CHANGE, PEER_DOWN, "inter"))
"""The rules the cascades follow: (cause, effect, scope)."""

NOISE_TEMPLATES = {
    "config": "%SYS-5-CONFIG_I: Configured from console by {user} on vty{n} ({ip})",
    "login": "%SEC_LOGIN-5-LOGIN_SUCCESS: Login Success [user: {user}] [Source: {ip}]",
    "ntp": "%NTP-6-PEERSYNC: NTP synced to peer {ip}",
    "snmp": "%SNMP-3-AUTHFAIL: Authentication failure for SNMP req from host {ip}",
    "fan": "%ENVMON-4-FAN_LOW_RPM: Fan {n} running at low speed, {rpm} rpm",
    "duplex": "%CDP-4-DUPLEX_MISMATCH: duplex mismatch discovered on {ifname} (not full duplex)",
}
USERS = ("admin", "netops", "backup", "monitor")


@dataclass(frozen=True)
class CascadeParams:
    """Scenario: sizes, duration, incident rate, the rules' probabilities and delays, noise."""

    n_core: int = 2
    n_agg: int = 4
    n_tor: int = 8
    hosts_per_tor: int = 1
    duration_ns: int = 12 * 3600 * S
    incidents_per_hour: float = 6.0
    p_stp: float = 0.9
    p_peer: float = 0.8
    max_delay_ns: int = 20 * S
    noise_per_device_hour: float = 2.0
    burst_max: int = 5
    n_rpcs: int = 30_000
    base_one_way_ns: tuple[int, int] = (50_000, 400_000)
    jitter_ns: int = 30_000
    server_ns: tuple[int, int] = (1 * MS, 5 * MS)
    incident_queueing_ns: tuple[int, int] = (5 * MS, 30 * MS)
    incident_effect_ns: int = 60 * S
    seed: int = 0

    def __post_init__(self) -> None:
        if min(self.n_core, self.n_agg, self.n_tor) < 1 or self.hosts_per_tor < 1:
            raise ConfigError("every tier needs at least one device")
        if not (0 <= self.p_stp <= 1 and 0 <= self.p_peer <= 1):
            raise ConfigError("probabilities must be in [0, 1]")


@dataclass
class SyslogCascades:
    """The simulated syslog (``lines``, sorted by time) with each line's true template name,
    the topology, the incidents (time, device, peer), and RPC columns with their truth
    (``rpc_incident``: index of the incident whose device the RPC crossed, -1 if none)."""

    lines: list[str]
    line_template: list[str]
    topology: Topology
    devices: list[str]
    incidents: list[tuple[int, str, str]]
    rpc_time: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    rpc_src: np.ndarray = field(default_factory=lambda: np.zeros(0, object))
    rpc_dst: np.ndarray = field(default_factory=lambda: np.zeros(0, object))
    rpc_one_way_ns: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    rpc_end_to_end_ns: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    rpc_incident: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def _topology(p: CascadeParams) -> tuple[Topology, list[str], list[str]]:
    core = [f"core{i}" for i in range(p.n_core)]
    agg = [f"agg{i}" for i in range(p.n_agg)]
    tor = [f"tor{i}" for i in range(p.n_tor)]
    links = [(c, a) for c in core for a in agg]
    links += [(agg[2 * (i // 2) % p.n_agg], t) for i, t in enumerate(tor)]
    links += [(agg[(2 * (i // 2) + 1) % p.n_agg], t) for i, t in enumerate(tor)]
    hosts = []
    for t in tor:
        for j in range(p.hosts_per_tor):
            h = f"{t}-host{j}"
            hosts.append(h)
            links.append((t, h))
    return Topology(links), core + agg + tor, hosts


def _fill(rng: np.random.Generator, template: str) -> str:
    return template.format(
        ifname=f"GigabitEthernet{rng.integers(1, 4)}/0/{rng.integers(1, 48)}",
        vlan=int(rng.integers(1, 400)),
        n=int(rng.integers(0, 8)),
        user=USERS[int(rng.integers(len(USERS)))],
        ip=".".join(str(int(x)) for x in rng.integers(1, 255, 4)),
        rpm=int(rng.integers(900, 2000)),
    )


def simulate_cascades(params: CascadeParams | None = None) -> SyslogCascades:
    """Simulate the scenario of the module docstring (seeded)."""
    p = params or CascadeParams()
    rng = np.random.default_rng(p.seed)
    topo, devices, hosts = _topology(p)
    dev_links = [(a, b) for a, b in topo.links() if a in devices and b in devices]
    events: list[tuple[int, str, str]] = []  # (time, device, true template)
    n_inc = rng.poisson(p.incidents_per_hour * p.duration_ns / (3600 * S))
    incidents = []
    for t0 in np.sort(rng.integers(0, p.duration_ns, n_inc)):
        a, b = dev_links[int(rng.integers(len(dev_links)))]
        dev, peer = (a, b) if rng.random() < 0.5 else (b, a)
        incidents.append((int(t0), dev, peer))
        events.append((int(t0), dev, LINK_DOWN))
        if rng.random() < p.p_stp:
            t1 = int(t0 + rng.integers(1 * S, p.max_delay_ns))
            events.append((t1, dev, STP_CHANGE))
            if rng.random() < p.p_peer:
                events.append((int(t1 + rng.integers(1 * S, p.max_delay_ns)), peer, PEER_DOWN))
    noise = list(NOISE_TEMPLATES)
    rate = p.noise_per_device_hour * p.duration_ns / (3600 * S)
    for dev in devices:
        for name in noise:
            for t in rng.integers(0, p.duration_ns, rng.poisson(rate)):
                burst = int(rng.integers(1, p.burst_max + 1)) if name == "snmp" else 1
                for j in range(burst):
                    events.append((int(t + j * rng.integers(0, 2 * S)), dev, name))
    events.sort()
    templates = {**CASCADE_TEMPLATES, **NOISE_TEMPLATES}
    lines = [format_rfc5424(t, d, "switchd", _fill(rng, templates[name])) for t, d, name in events]
    out = SyslogCascades(lines, [e[2] for e in events], topo, devices, incidents)
    _rpcs(out, hosts, p, rng)
    return out


def _rpcs(
    sim: SyslogCascades, hosts: list[str], p: CascadeParams, rng: np.random.Generator
) -> None:
    """RPCs between random host pairs; crossing an incident's device within
    ``incident_effect_ns`` of it adds queueing to the one-way delay."""
    n = p.n_rpcs
    src = rng.integers(0, len(hosts), n)
    dst = (src + rng.integers(1, len(hosts), n)) % len(hosts)
    time = np.sort(rng.integers(0, p.duration_ns, n))
    pair_base = rng.integers(*p.base_one_way_ns, (len(hosts), len(hosts)))
    one_way = pair_base[src, dst] + rng.integers(0, p.jitter_ns, n)
    inc_t = np.asarray([i[0] for i in sim.incidents], dtype=np.int64)
    incident = np.full(n, -1, dtype=np.int64)
    paths: dict[tuple[int, int], set[str]] = {}
    for i in range(n):
        key = (int(src[i]), int(dst[i]))
        if key not in paths:
            paths[key] = sim.topology.on_shortest_paths(hosts[key[0]], hosts[key[1]])
        lo = np.searchsorted(inc_t, time[i] - p.incident_effect_ns, "left")
        hi = np.searchsorted(inc_t, time[i], "right")
        for j in range(lo, hi):
            if sim.incidents[j][1] in paths[key]:
                incident[i] = j
                break
    hit = incident >= 0
    one_way[hit] += rng.integers(*p.incident_queueing_ns, int(hit.sum()))
    back = pair_base[dst, src] + rng.integers(0, p.jitter_ns, n)
    sim.rpc_time = time
    sim.rpc_src = np.asarray(hosts, dtype=object)[src]
    sim.rpc_dst = np.asarray(hosts, dtype=object)[dst]
    sim.rpc_one_way_ns = one_way.astype(np.int64)
    sim.rpc_end_to_end_ns = (one_way + back + rng.integers(*p.server_ns, n)).astype(np.int64)
    sim.rpc_incident = incident


def rule_precision_recall(
    mined: list[tuple[str, str, str]], truth: tuple[tuple[str, str, str], ...] = TRUE_RULES
) -> tuple[float, float]:
    """Precision and recall of mined rules named by true template (cause, effect, scope)."""
    found, true = set(mined), set(truth)
    hits = len(found & true)
    precision = hits / len(found) if found else float("nan")
    return precision, hits / len(true) if true else float("nan")
