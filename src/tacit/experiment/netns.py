"""RDA's two agents measuring one-way latency across an emulated path, against per-packet truth.

The RDA paper ("Every Timestamp Counts: Accurate Tracking of Network Latencies using
Reconcilable Difference Aggregator", §VII) evaluates on traces; this experiment runs the
service (:mod:`tacit.oneway_latency.agent`) live, on this machine:

    ns S (sender)  s0 ── veth ── m0  ns M (router)  m1 ── veth ── r0  ns R (receiver)
    10.x.1.1/24                10.x.1.2   10.x.2.1                 10.x.2.2/24

The router M impairs the path toward R with delay, jitter, loss and reordering, in one of two
ways (:attr:`NetnsParams.impairment`): netem on ``m1`` (the router's egress toward R) where the
kernel has it, or else the userspace relay of :mod:`tacit.experiment.impair`, which forwards in
M's place (IP forwarding off) and impairs as netem would; its counts are reported and must agree
with the captures. The router is needed because libpcap on Linux sees an outgoing packet after
the interface's qdisc: netem on ``s0`` itself would delay packets before the sender's capture
point saw them, and the measured latency would not include it. A UDP generator in S sends
datagrams of varying content (a sequence number and a varying pad, so every packet has its own
identifier) to R; one agent captures live on ``s0``, the other on ``r0``, and they exchange
synopses over TCP across the same path. tcpdump (nanosecond timestamps, immediate mode: without
it the packets still in libpcap's buffer when it stops are lost) captures both ends for the
truth: packets matched by identifier (:func:`tacit.oneway_latency.truth.latency_truth`),
with the packets lost and those that arrived out of order. The namespaces and their veth pairs
have unique names and are always deleted, and every process started is ended by its id.

The agents' timestamps are libpcap's microseconds (:mod:`tacit.formats.live`), tcpdump's are
nanoseconds of the same kernel clock: the agents' means differ from the truth by the rounding
(< 1 µs) on delays of milliseconds.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tacit.errors import ConfigError
from tacit.experiment.capture import Capture
from tacit.experiment.impair import ImpairParams
from tacit.formats.pcap import read_packets
from tacit.oneway_latency.intervals import IntervalParams
from tacit.oneway_latency.stream import PacketStream
from tacit.oneway_latency.truth import latency_truth, packet_latencies

_CLI = "from tacit.cli.main import main; main()"
IMPAIRMENTS = ("auto", "netem", "relay", "none")


@dataclass(frozen=True)
class NetnsParams:
    """The emulated path and the traffic; a 5 ms ± 1 ms path with 1 % loss and 5 % of the
    packets reordered (sent at once, ahead of the delayed ones) — a wide-area-like path, chosen
    by us; δ = 200 ms keeps ~200 packets per interval at 1000 packets/s."""

    delay_ms: float = 5.0
    jitter_ms: float = 1.0
    loss_percent: float = 1.0
    reorder_percent: float = 5.0
    rate_pps: float = 1000.0
    duration_s: float = 2.0
    interval_ns: int = 200_000_000
    data_port: int = 9000
    control_port: int = 7700
    impairment: str = "auto"
    """``netem`` (the kernel's qdisc), ``relay`` (:mod:`tacit.experiment.impair` in userspace),
    ``auto`` (netem where the kernel has it, else the relay), or ``none`` (the router's kernel
    forwarding only)."""
    subnet: int = 77
    """The path uses 10.<subnet>.1.0/24 and 10.<subnet>.2.0/24, inside the namespaces only."""
    seed: int = 0

    def __post_init__(self) -> None:
        if self.impairment not in IMPAIRMENTS:
            raise ConfigError(f"impairment must be one of {IMPAIRMENTS}, got {self.impairment!r}")

    def netem(self) -> list[str]:
        return [
            "delay",
            f"{self.delay_ms}ms",
            f"{self.jitter_ms}ms",
            "loss",
            f"{self.loss_percent}%",
            "reorder",
            f"{self.reorder_percent}%",
            "50%",
        ]

    def relay(self) -> ImpairParams:
        return ImpairParams(
            delay_ns=round(self.delay_ms * 1e6),
            jitter_ns=round(self.jitter_ms * 1e6),
            loss=self.loss_percent / 100,
            reorder=self.reorder_percent / 100,
            seed=self.seed,
        )


@dataclass
class NetnsResult:
    """Per sender interval: the agents' result beside the truth; the overall errors over the
    intervals the agents completed (relative errors of the mean and the standard deviation:
    mean and largest absolute value); the impairment that ran (``netem``, ``relay`` or
    ``none``) and, for the relay, its counts (:class:`tacit.experiment.impair.RelayStats`); and
    the truth over the whole run: datagrams captured at S and at R, those lost, and those that
    reached R after a datagram S sent later (out of order)."""

    params: NetnsParams
    rows: list[dict[str, Any]]
    complete: int
    mean_error: float
    mean_error_max: float
    std_error: float
    std_error_max: float
    impairment: str = "none"
    relay: dict[str, Any] = field(default_factory=dict)
    truth_sent: int = 0
    truth_received: int = 0
    truth_lost: int = 0
    truth_reordered: int = 0
    sender_summary: dict[str, Any] = field(default_factory=dict)
    receiver_summary: dict[str, Any] = field(default_factory=dict)
    captures: dict[str, dict[str, int]] = field(default_factory=dict)
    """tcpdump's closing counts at S and at R (:class:`.capture.CaptureStats`)."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _run(*cmd: str) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=30)


def _probe() -> tuple[str | None, str | None]:
    """Why namespaces cannot be used here, and why netem cannot (None: they can)."""
    if os.geteuid() != 0:
        return "network namespaces need root", "netem needs root"
    for tool in ("ip", "tcpdump"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed", f"{tool} is not installed"
    ns = f"tacit-probe-{os.getpid()}-{secrets.token_hex(3)}"
    try:
        for step in (
            ["ip", "netns", "add", ns],
            ["ip", "-n", ns, "link", "add", "p0", "type", "veth", "peer", "name", "p1"],
        ):
            done = _run(*step)
            if done.returncode:
                reason = f"{' '.join(step[:3])} refused: {done.stderr.strip()}"
                return reason, reason
        if shutil.which("tc") is None:
            return None, "tc is not installed"
        done = _run("tc", "-n", ns, "qdisc", "add", "dev", "p0", "root", "netem", "delay", "1ms")
        return None, (
            f"tc qdisc add … netem refused: {done.stderr.strip()}" if done.returncode else None
        )
    finally:
        _run("ip", "netns", "del", ns)


def namespaces_unavailable(impairment: str = "auto") -> str | None:
    """Why the experiment cannot run here with ``impairment`` (None: it can): not root, a tool
    missing, or the kernel refusing network namespaces, veth pairs or (for ``netem`` only) the
    netem qdisc. ``auto`` needs namespaces only: without netem the relay impairs."""
    namespaces, netem = _probe()
    return namespaces or (netem if impairment == "netem" else None)


def resolve_impairment(impairment: str) -> str:
    """The impairment ``auto`` stands for here: ``netem`` where the kernel has it, else
    ``relay``; any other choice as it is."""
    if impairment != "auto":
        return impairment
    return "relay" if _probe()[1] else "netem"


class ManagedProcess:
    """A process we started, its stderr collected by a thread. ``name`` is what its messages
    call it (default ``cmd[4]``, the program ``ip netns exec NS`` runs, or the last part of a
    shorter command); ``popen`` are further arguments of :class:`subprocess.Popen` (``env``,
    ``pass_fds``)."""

    def __init__(
        self, cmd: list[str], stdout=subprocess.DEVNULL, *, name: str | None = None, **popen: Any
    ) -> None:
        self.cmd = cmd
        self.name = name or cmd[min(4, len(cmd) - 1)]
        self.proc = subprocess.Popen(cmd, stdout=stdout, stderr=subprocess.PIPE, text=True, **popen)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None  # started with stderr=PIPE
        for line in self.proc.stderr:
            self.lines.append(line.rstrip())

    def wait_for(self, text: str, timeout: float) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if any(text in line for line in self.lines):
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.02)
        raise ConfigError(f"{self.name} did not report {text!r}: " + " | ".join(self.lines[-5:]))

    def end(self, sig: int = signal.SIGTERM) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._reader.join(timeout=1)


def run_netns_experiment(params: NetnsParams, workdir: str | Path) -> NetnsResult:  # noqa: C901, PLR0912, PLR0915
    """Build the path, run the generator, both agents and both tcpdumps, and compare."""
    reason = namespaces_unavailable(params.impairment)
    if reason:
        raise ConfigError(f"the namespace experiment cannot run here: {reason}")
    impairment = resolve_impairment(params.impairment)
    work = Path(workdir)
    work.mkdir(parents=True, exist_ok=True)
    tag = f"{os.getpid() % 10000:04d}{secrets.token_hex(2)}"
    ns = {side: f"tacit-{tag}-{side}" for side in ("s", "m", "r")}
    net = f"10.{params.subnet}"
    procs: list[ManagedProcess] = []
    captures: dict[str, Capture] = {}
    relay_stats = work / "relay.json"
    try:
        _build_path(ns, tag, net, params, impairment)
        if impairment == "relay":
            relay_proc = _start_relay(ns, net, params, relay_stats)
            procs.append(relay_proc)
            relay_proc.wait_for("relaying", 30)
        key = work / "agent.key"
        key.write_text(secrets.token_hex(16))
        bpf = f"udp and dst port {params.data_port}"
        dumps = {side: work / f"truth-{side}.pcap" for side in ("s", "r")}
        for side, dev in (("s", "s0"), ("r", "r0")):
            captures[side] = Capture(dumps[side], bpf, dev, namespace=ns[side], nanoseconds=True)
            captures[side].start()
        agents = {}
        for side, role, dev in (("r", "receiver", "r0"), ("s", "sender", "s0")):
            out = work / f"{role}.jsonl"
            cli = [
                sys.executable, "-c", _CLI, "latency", "oneway", "agent", "--role", role,
                "--peer", f"{net}.2.2:{params.control_port}", "--interface", dev,
                "--filter", bpf, "--key-file", str(key), "--interval",
                f"{params.interval_ns}ns", "--duration", f"{params.duration_s + 60}s",
                "--retention", "20s", "--output", str(out), "--json",
            ]  # fmt: skip
            agents[role] = (ManagedProcess(["ip", "netns", "exec", ns[side], *cli]), out)
            procs.append(agents[role][0])
        for proc, _ in agents.values():
            proc.wait_for("capturing on", 60)
        generate = [
            sys.executable, "-m", "tacit.experiment.netns", f"{net}.2.2",
            str(params.data_port), str(params.rate_pps), str(params.duration_s),
            str(params.seed),
        ]  # fmt: skip
        gen = ManagedProcess(["ip", "netns", "exec", ns["s"], *generate])
        procs.append(gen)
        gen.proc.wait(timeout=params.duration_s + 30)
        time.sleep(0.5 + 2 * params.delay_ms / 1e3)  # the last packets reach both captures
        for proc, _ in agents.values():
            proc.proc.send_signal(signal.SIGTERM)  # stop capturing, finish the intervals
        for role, (proc, _) in agents.items():
            try:
                proc.proc.wait(timeout=params.duration_s + 60)
            except subprocess.TimeoutExpired:
                said = " | ".join(proc.lines[-3:]) or "nothing on stderr"
                raise ConfigError(
                    f"the {role} agent did not finish within {params.duration_s + 60:g} s of "
                    f"SIGTERM: {said}"
                ) from None
            if proc.proc.returncode:
                raise ConfigError(f"agent failed: {' | '.join(proc.lines[-3:])}")
        stats = {side: c.stop() for side, c in captures.items()}
        relay = {}
        if impairment == "relay":
            relay_proc.end()  # the relay writes its counts and exits
            if not relay_stats.exists():
                raise ConfigError(f"the relay failed: {' | '.join(relay_proc.lines[-3:])}")
            relay = json.loads(relay_stats.read_text())
        records = {r: _records(o) for r, (_, o) in agents.items()}
        result = _compare(params, dumps, records, impairment, relay)
        result.captures = {side: st.as_dict() if st else {} for side, st in stats.items()}
        return result
    finally:
        for c in captures.values():
            c.stop()
        for p in procs:
            p.end()
        for name in ns.values():
            _run("ip", "netns", "del", name)


def _build_path(
    ns: dict[str, str], tag: str, net: str, params: NetnsParams, impairment: str
) -> None:
    s, m, r = ns["s"], ns["m"], ns["r"]
    steps = [
        *(["ip", "netns", "add", n] for n in (s, m, r)),
        ["ip", "link", "add", f"ts{tag}", "netns", s, "type", "veth", "peer", "name", f"tm{tag}",
         "netns", m],
        ["ip", "link", "add", f"tn{tag}", "netns", m, "type", "veth", "peer", "name", f"tr{tag}",
         "netns", r],
        ["ip", "-n", s, "link", "set", f"ts{tag}", "name", "s0"],
        ["ip", "-n", m, "link", "set", f"tm{tag}", "name", "m0"],
        ["ip", "-n", m, "link", "set", f"tn{tag}", "name", "m1"],
        ["ip", "-n", r, "link", "set", f"tr{tag}", "name", "r0"],
        ["ip", "-n", s, "addr", "add", f"{net}.1.1/24", "dev", "s0"],
        ["ip", "-n", m, "addr", "add", f"{net}.1.2/24", "dev", "m0"],
        ["ip", "-n", m, "addr", "add", f"{net}.2.1/24", "dev", "m1"],
        ["ip", "-n", r, "addr", "add", f"{net}.2.2/24", "dev", "r0"],
        *(["ip", "-n", n, "link", "set", d, "up"]
          for n, d in ((s, "s0"), (m, "m0"), (m, "m1"), (r, "r0"), (s, "lo"), (r, "lo"))),
        ["ip", "-n", s, "route", "add", "default", "via", f"{net}.1.2"],
        ["ip", "-n", r, "route", "add", "default", "via", f"{net}.2.1"],
    ]  # fmt: skip
    sysctl = ["ip", "netns", "exec", m, "sysctl", "-qw"]
    if impairment == "relay":  # M's kernel neither forwards nor answers what the relay relays
        steps += [
            [*sysctl, "net.ipv4.ip_forward=0"],
            [*sysctl, "net.ipv4.conf.all.send_redirects=0"],
            *(["ip", "netns", "exec", n, sys.executable, "-m", "tacit.experiment.impair",
               "no-tx-checksum", d] for n, d in ((s, "s0"), (r, "r0"))),
        ]  # fmt: skip
    else:
        steps.append([*sysctl, "net.ipv4.ip_forward=1"])
    if impairment == "netem":
        steps.append(["tc", "-n", m, "qdisc", "add", "dev", "m1", "root", "netem", *params.netem()])
    for step in steps:
        done = _run(*step)
        if done.returncode:
            raise ConfigError(f"{' '.join(step)}: {done.stderr.strip()}")


def _start_relay(ns: dict[str, str], net: str, params: NetnsParams, stats: Path) -> ManagedProcess:
    """Start the relay in M, between S's ``s0`` and R's ``r0`` (their MACs read in their
    namespaces); it reports "relaying" once its sockets are bound."""
    mac = {}
    for side, dev in (("s", "s0"), ("r", "r0")):
        done = _run("ip", "netns", "exec", ns[side], "cat", f"/sys/class/net/{dev}/address")
        if done.returncode:
            raise ConfigError(f"cannot read the MAC of {dev}: {done.stderr.strip()}")
        mac[side] = done.stdout.strip()
    p = params.relay()
    cmd = [
        sys.executable, "-m", "tacit.experiment.impair", "relay",
        "--a", "m0", "--a-peer", mac["s"], "--b", "m1", "--b-peer", mac["r"],
        "--own", f"{net}.1.2", f"{net}.2.1", "--data-port", str(params.data_port),
        "--delay-ns", str(p.delay_ns), "--jitter-ns", str(p.jitter_ns),
        "--loss", str(p.loss), "--reorder", str(p.reorder), "--seed", str(p.seed),
        "--stats", str(stats),
    ]  # fmt: skip
    # At a raised priority: the relay stands for the network, which other work on the machine
    # should not stall (a stall of tens of ms holds back a whole interval's packets).
    return ManagedProcess(["ip", "netns", "exec", ns["m"], "nice", "-n", "-10", *cmd], name="relay")


def _records(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def out_of_order(sender: PacketStream, receiver: PacketStream) -> int:
    """How many of the packets both points saw reached the receiver after a packet the sender
    sent later (each packet's identifier is unique to it)."""
    if not len(sender) or not len(receiver):
        return 0
    rank = np.empty(len(sender), np.int64)  # the order the sender sent in
    rank[np.argsort(sender.time, kind="stable")] = np.arange(len(sender))
    order = np.argsort(sender.ident, kind="stable")
    sid, srank = sender.ident[order], rank[order]
    arrived = receiver.ident[np.argsort(receiver.time, kind="stable")]
    pos = np.minimum(np.searchsorted(sid, arrived), len(sid) - 1)
    sent = srank[pos[sid[pos] == arrived]]  # send ranks in the order of arrival
    return int(np.sum(sent < np.maximum.accumulate(sent))) if len(sent) else 0


def _compare(
    params: NetnsParams,
    dumps: dict[str, Path],
    records: dict[str, list[dict[str, Any]]],
    impairment: str,
    relay: dict[str, Any],
) -> NetnsResult:
    sides = {}
    for side, path in dumps.items():
        packets = read_packets(path).packets
        sides[side] = PacketStream(packets.ident, packets.time)
    truth = latency_truth(sides["s"], sides["r"], IntervalParams(length_ns=params.interval_ns))
    received, _ = packet_latencies(sides["s"], sides["r"])
    published = {r["interval"]: r for r in records["receiver"] if "interval" in r}
    rows = []
    for pos, i in enumerate(truth.index.tolist()):
        got = published.get(i, {})
        rows.append(
            {
                "interval": i,
                "status": got.get("status", "not published"),
                "mean_ns": got.get("mean_ns"),
                "std_ns": got.get("std_ns"),
                "packets_sender": got.get("packets_sender"),
                "matched": got.get("matched"),
                "truth_sent": int(truth.sent[pos]),
                "truth_matched": int(truth.matched[pos]),
                "truth_mean_ns": float(truth.mean_ns[pos]),
                "truth_std_ns": float(truth.std_ns[pos]),
            }
        )
    done = [r for r in rows if r["status"] == "complete" and r["std_ns"] is not None]
    mean_err = np.array([r["mean_ns"] / r["truth_mean_ns"] - 1 for r in done])
    std_err = np.array([r["std_ns"] / r["truth_std_ns"] - 1 for r in done])

    def stats(e: np.ndarray) -> tuple[float, float]:
        return (float(np.abs(e).mean()), float(np.abs(e).max())) if len(e) else (np.nan, np.nan)

    summary = {k: next((r for r in v if r.get("summary")), {}) for k, v in records.items()}
    return NetnsResult(
        params,
        rows,
        len(done),
        *stats(mean_err),
        *stats(std_err),
        impairment=impairment,
        relay=relay,
        truth_sent=len(sides["s"]),
        truth_received=len(sides["r"]),
        truth_lost=int(np.sum(~received)),
        truth_reordered=out_of_order(sides["s"], sides["r"]),
        sender_summary=summary.get("sender", {}),
        receiver_summary=summary.get("receiver", {}),
    )


def generate(dst: str, port: int, rate_pps: float, duration_s: float, seed: int) -> int:
    """Send UDP datagrams to ``dst:port`` at ``rate_pps`` for ``duration_s``: an 8-byte
    sequence number and a pad of varying length (so that every packet's identifier differs).
    Returns the number sent."""
    import socket

    rng = np.random.default_rng(seed)
    pads = rng.integers(0, 64, size=int(rate_pps * duration_s) + 1)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        start = time.monotonic()
        for n, pad in enumerate(pads.tolist()):
            time.sleep(max(0.0, start + n / rate_pps - time.monotonic()))
            sock.sendto(n.to_bytes(8, "big") + bytes(pad), (dst, port))
    return len(pads)


if __name__ == "__main__":
    a = sys.argv[1:]
    generate(a[0], int(a[1]), float(a[2]), float(a[3]), int(a[4]))
