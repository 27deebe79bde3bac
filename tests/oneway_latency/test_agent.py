"""Two RDA agents on loopback replaying the two sides of a simulated stream from pcap files:
their per-interval results against the per-packet truth, through dropped connections, a late
peer, a missing peer, forged connections and mismatched configurations."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from oneway_agents import FAST, KEY, check_against_truth, intervals, pair, stream
from tacit.errors import ConfigError, InputError
from tacit.experiment.memcached import free_port
from tacit.oneway_latency.agent import Agent, AgentParams
from tacit.oneway_latency.capture_sources import PcapSource
from tacit.oneway_latency.intervals import IntervalParams, IntervalSplit, pipeline
from tacit.oneway_latency.protocol import ConfigMismatchError
from tacit.oneway_latency.rda import RDAParams, rda_interval
from tacit.oneway_latency.truth import latency_truth


def test_two_agents_measure_every_interval_exactly(pcaps) -> None:
    sender, receiver = asyncio.run(pair(pcaps))
    check_against_truth(pcaps, sender, receiver, FAST)
    summary = receiver.records[-1]
    assert summary["summary"] and summary["accounting"]["ip_packets"] == len(stream(pcaps[1]))
    assert not summary["rejected"] and summary["connections"] == 1


def test_sampling_and_fixed_synopsis_agree_with_central_rda(pcaps) -> None:
    params = AgentParams(rda=RDAParams(buckets_per_bank=256, sampling_rate=0.5, seed=7))
    _, receiver = asyncio.run(pair(pcaps, params, params))
    s, r = stream(pcaps[0]), stream(pcaps[1])
    split = [IntervalSplit(x, params.intervals, n) for x, n in ((s, "s"), (r, "r"))]
    for w in pipeline(*split):
        c, row = rda_interval(w, params.rda), intervals(receiver)[w.index]
        assert row["mean_ns"] == c.estimate.mean_ns and row["matched"] == c.estimate.useful_packets
        assert row["buckets_per_bank"] == 256


def cutting_proxy(cuts: list[int]):
    """A TCP proxy that cuts its n-th connection after ``cuts[n]`` bytes from the receiver
    (then forwards later connections whole)."""
    connections = []

    async def start(target: int) -> int:
        async def handle(cr, cw):
            n = len(connections)
            connections.append(n)
            sr, sw = await asyncio.open_connection("127.0.0.1", target)
            budget = cuts[n] if n < len(cuts) else None

            async def pump(src, dst, limit):
                sent = 0
                try:
                    while data := await src.read(4096):
                        if limit is not None and sent + len(data) > limit:
                            dst.write(data[: limit - sent])
                            break
                        dst.write(data)
                        sent += len(data)
                        await dst.drain()
                finally:
                    cw.close()
                    sw.close()

            await asyncio.gather(pump(cr, sw, None), pump(sr, cw, budget), return_exceptions=True)

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        return server.sockets[0].getsockname()[1]

    return start, connections


def test_dropped_connections_lose_no_interval(pcaps) -> None:
    start, connections = cutting_proxy([300, 1200, 2500])
    sender, receiver = asyncio.run(pair(pcaps, via=lambda r: start(r.port)))
    assert len(connections) == 4 and sender.connections == 3  # the first cut: in the handshake
    check_against_truth(pcaps, sender, receiver, FAST)


def test_a_peer_that_starts_late(pcaps) -> None:
    sender, receiver = asyncio.run(pair(pcaps, receiver_start_s=0.6))
    check_against_truth(pcaps, sender, receiver, FAST)
    sender, receiver = asyncio.run(pair(pcaps, sender_start_s=0.6))
    check_against_truth(pcaps, sender, receiver, FAST)


def test_a_missing_peer_is_published_not_skipped(pcaps) -> None:
    params = AgentParams(retention_ns=300_000_000)
    sender = Agent("sender", ("127.0.0.1", free_port()), KEY, PcapSource(pcaps[0]), params)
    sender.run_sync()
    rows = intervals(sender)
    truth = latency_truth(stream(pcaps[0]), stream(pcaps[1]), params.intervals)
    assert sorted(rows) == truth.index.tolist()
    assert {r["status"] for r in rows.values()} == {"peer_missing"}
    assert [r["packets_sender"] for _, r in sorted(rows.items())] == truth.sent.tolist()


def test_forged_and_garbage_connections_are_refused_and_survived(pcaps) -> None:
    async def attack(receiver: Agent) -> int:
        port = receiver.port
        for junk in (b"GET / HTTP/1.1\r\nHost: agent\r\n\r\n", b"TRDA" + bytes(40), b"\x00" * 3):
            _, w = await asyncio.open_connection("127.0.0.1", port)
            w.write(junk)
            await w.drain()
            w.close()
        impostor = Agent("sender", ("127.0.0.1", port), b"wrong key", PcapSource(pcaps[0]), FAST)
        task = asyncio.create_task(impostor.run())
        await asyncio.sleep(0.3)
        task.cancel()
        return port

    sender, receiver = asyncio.run(pair(pcaps, via=attack, sender_start_s=0.0))
    check_against_truth(pcaps, sender, receiver, FAST)
    refused = " ".join(receiver.records[-1]["rejected"])
    for reason in ("bad magic", "protocol version 0", "MAC does not verify"):
        assert reason in refused


def test_mismatched_configurations_are_refused(pcaps) -> None:
    other = dataclasses.replace(FAST, intervals=IntervalParams(length_ns=20_000_000))
    short = dataclasses.replace(FAST, retention_ns=500_000_000)

    async def run() -> Agent:
        port = free_port()
        receiver = Agent("receiver", ("127.0.0.1", port), KEY, PcapSource(pcaps[1]), short)
        sender = Agent("sender", ("127.0.0.1", port), KEY, PcapSource(pcaps[0]), other)
        task = asyncio.create_task(receiver.run())
        with pytest.raises(ConfigMismatchError, match="length_ns: here 20000000, peer 10000000"):
            await sender.run()
        await task
        return sender, receiver

    sender, receiver = asyncio.run(run())
    assert "configurations differ" in receiver.records[-1]["rejected"][0]
    assert {r["status"] for r in intervals(sender).values()} == {"peer_missing"}
    assert {r["status"] for r in intervals(receiver).values()} == {"peer_missing"}


def test_corrupt_capture_is_a_clear_error(tmp_path) -> None:
    bad = tmp_path / "bad.pcap"
    bad.write_bytes(b"\xd4\xc3\xb2\xa1" + bytes(20) + b"\xff" * 40)
    agent = Agent("sender", ("127.0.0.1", free_port()), KEY, PcapSource(bad), FAST)
    with pytest.raises(InputError, match=r"bad\.pcap"):
        agent.run_sync()
    assert agent.records[-1]["summary"] and "bad.pcap" in agent.records[-1]["source_error"]


@pytest.mark.parametrize("side", [0, 1])
def test_a_corrupt_record_ends_a_capture_after_the_intervals_before_it(pcaps, tmp_path, side):
    """A capture file with a corrupt record 90% of the way in (the sender's or the receiver's):
    the intervals its clock closed before the record are measured as in a clean run; the ones
    it may have left partial, and every later one, are published ``incomplete``, never
    measured as if the missing packets were lost; the agent reading it names the file."""
    data = bytearray(pcaps[side].read_bytes())
    pos, records = 24, 0
    cut_at = 0.9 * len(stream(pcaps[side]))
    while records < cut_at:
        pos += 16 + int.from_bytes(data[pos + 8 : pos + 12], "little")
        records += 1
    data[pos + 8 : pos + 12] = (0x7FFF0000).to_bytes(4, "little")
    bad = tmp_path / pcaps[side].name
    bad.write_bytes(bytes(data))
    port = free_port()
    files = [bad if k == side else pcaps[k] for k in (0, 1)]
    sender = Agent("sender", ("127.0.0.1", port), KEY, PcapSource(files[0]), FAST)
    receiver = Agent("receiver", ("127.0.0.1", port), KEY, PcapSource(files[1]), FAST)

    async def run():
        return await asyncio.gather(receiver.run(), sender.run(), return_exceptions=True)

    outcomes = asyncio.run(run())
    assert isinstance(outcomes[1 - side], InputError) and str(bad) in str(outcomes[1 - side])
    clean = intervals(asyncio.run(pair(pcaps))[1])
    for agent in (sender, receiver):
        rows = intervals(agent)
        complete = [i for i, r in rows.items() if r["status"] == "complete"]
        assert complete and all(
            rows[i] == {**clean[i], "role": agent.role.name.lower()} for i in complete
        )
        assert all(r["status"] == "incomplete" for i, r in rows.items() if i > max(complete))
    cut = [i for i, r in intervals(sender).items() if r["status"] == "incomplete"]
    assert cut and sorted(intervals(sender)) == sorted(clean)[: len(intervals(sender))]


def test_a_synopsis_larger_than_a_frame_is_refused_before_the_agent_starts() -> None:
    """It was accepted, and the receiver died of the sender's refusal to build it."""
    with pytest.raises(ConfigError, match="buckets per bank: at most 1118480"):
        AgentParams(rda=RDAParams(buckets_per_bank=99_999_999_999_999))
    AgentParams(rda=RDAParams(buckets_per_bank=1_118_480))  # three banks in one frame
