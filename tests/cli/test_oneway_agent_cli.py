"""``tacit latency oneway agent``: two agent processes on loopback replaying the two sides of a
simulated stream publish every interval, each equal to central RDA's result; bad arguments are
one line and exit code 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clirun import finish, start
from oneway_streams import agent_captures
from tacit.experiment.memcached import free_port
from tacit.formats.pcap import read_packets
from tacit.oneway_latency.intervals import IntervalParams, IntervalSplit, pipeline
from tacit.oneway_latency.rda import RDAParams, rda_interval
from tacit.oneway_latency.stream import PacketStream


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[tuple[Path, Path], dict]:
    d = tmp_path_factory.mktemp("agent_cli")
    sender, receiver = agent_captures(str(d))
    (d / "key").write_bytes(b"a shared key for both agents")
    peer = f"127.0.0.1:{free_port()}"
    common = ("--peer", peer, "--key-file", d / "key", "--interval", "10ms", "--json")
    procs = {
        "receiver": start(
            "latency", "oneway", "agent", "--role", "receiver", "--pcap", receiver, *common, cwd=d
        ),
    }
    procs["sender"] = start(
        "latency", "oneway", "agent", "--role", "sender", "--pcap", sender, *common, cwd=d
    )
    procs["both_sources"] = start(
        "latency",
        "oneway",
        "agent",
        "--role",
        "sender",
        "--pcap",
        sender,
        "--interface",
        "lo",
        *common,
        cwd=d,
    )
    procs["bad_role"] = start(
        "latency", "oneway", "agent", "--role", "relay", "--pcap", sender, *common, cwd=d
    )
    return (sender, receiver), finish(procs)


def stream(path: Path) -> PacketStream:
    p = read_packets(path).packets
    return PacketStream(p.ident, p.time)


def test_agents_publish_what_central_rda_computes(runs) -> None:
    (sender, receiver), r = runs
    for role in ("sender", "receiver"):
        assert r[role].returncode == 0, r[role].stderr
    rows = [json.loads(line) for line in r["receiver"].stdout.splitlines() if line.strip()]
    published = {row["interval"]: row for row in rows if "interval" in row}
    assert len(published) == len([row for row in rows if "interval" in row])
    params = IntervalParams(length_ns=10_000_000)
    central = {
        w.index: rda_interval(w, RDAParams())
        for w in pipeline(
            IntervalSplit(stream(sender), params, "sender"),
            IntervalSplit(stream(receiver), params, "receiver"),
        )
    }
    assert sorted(published) == sorted(central)
    for i, c in central.items():
        row = published[i]
        assert row["status"] == "complete"
        assert (row["mean_ns"], row["std_ns"]) == (c.estimate.mean_ns, c.estimate.std_ns)
    summary = [row for row in rows if row.get("summary")]
    assert len(summary) == 1


def test_bad_arguments_are_one_line_and_exit_2(runs) -> None:
    _, r = runs
    for name in ("both_sources", "bad_role"):
        assert r[name].returncode == 2, (name, r[name].stderr)
        assert len(r[name].stderr.strip().splitlines()) == 1
        assert "Traceback" not in r[name].stderr
