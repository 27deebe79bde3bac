"""Benchmark: what a peer without the key can do to a receiving RDA agent.

Prints one JSON object:
- ``large_hellos``: 20 unauthenticated connections at once, each declaring a 64 MiB hello and
  sending up to 64 MiB of it, to a receiver running in its own process: the receiver's resident
  memory growth (MB) at its peak and one second after the connections ended, whether it was
  released (growth after ≤ 5 MB), how many connections the receiver closed, and how many bytes
  past the headers the attackers wrote (into socket buffers, before the receiver's close
  reached them). Without the limit on frames before authentication, this receiver grew by
  1.28 GB (all 20 × 64 MiB).
- ``replayed_handshake``: a sender's handshake, captured on the wire, replayed 20 times into new
  connections while that sender is connected (its later frames held back meanwhile): whether
  every replay was rejected, and whether the sender was unaffected (one connection, every
  interval measured complete).
- ``places_held``: connections without the key from two addresses, silent, hold every
  handshake place (8) with a handshake deadline longer than the run, before the sender starts:
  whether the sender got in (the oldest held place gives way) and measured every interval, and
  how long after its start its connection was up. Before places gave way, such connections
  kept a sender out until the deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import multiprocessing
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from bench_serve import proc_status
from oneway_agents import recording_proxy, sender_handshake_bytes
from tacit.experiment.memcached import free_port
from tacit.oneway_latency.agent import Agent, AgentParams
from tacit.oneway_latency.capture_sources import PcapSource
from tacit.oneway_latency.protocol import HEADER, MAX_PAYLOAD, VERSION, MessageType
from tacit.oneway_latency.simulate import StreamParams, simulate_stream, write_captures

KEY = b"bench key of the two agents"
PARAMS = AgentParams(retention_ns=60 * 10**9)
ATTACKERS = 20
REPLAYS = 20
MB = 2**20


def rss_bytes(pid: int) -> tuple[int, int]:
    """``(resident, peak resident)`` of a process, from /proc."""
    return proc_status(pid, "VmRSS") * 1024, proc_status(pid, "VmHWM") * 1024


def run_receiver(port: int, capture: str) -> None:
    Agent("receiver", ("127.0.0.1", port), KEY, PcapSource(Path(capture)), PARAMS).run_sync()


async def large_hello(port: int) -> tuple[int, bool]:
    """Declare a 64 MiB hello and send as much of it as the receiver takes: ``(bytes sent past
    the header, closed by the receiver)``."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(HEADER.pack(b"TRDA", VERSION, MessageType.HELLO, 0, MAX_PAYLOAD, 0))
    chunk, sent = bytes(MB), 0
    try:
        async with asyncio.timeout(20):
            while sent < MAX_PAYLOAD:
                writer.write(chunk)
                await writer.drain()
                sent += len(chunk)
            closed = await reader.read() == b""
    except (ConnectionError, TimeoutError):
        closed = True
    writer.close()
    return sent, closed


async def wait_listening(port: int) -> None:
    for _ in range(600):
        with contextlib.suppress(OSError):
            _, w = await asyncio.open_connection("127.0.0.1", port)
            w.close()
            return
        await asyncio.sleep(0.1)
    raise RuntimeError("the receiver did not start")


def large_hellos(capture: Path) -> dict:
    port = free_port()
    proc = multiprocessing.get_context("spawn").Process(
        target=run_receiver, args=(port, str(capture)), daemon=True
    )
    proc.start()
    assert proc.pid is not None
    try:
        asyncio.run(wait_listening(port))
        time.sleep(1.0)
        Path(f"/proc/{proc.pid}/clear_refs").write_text("5")  # the peak starts from here
        before, _ = rss_bytes(proc.pid)
        t0 = time.perf_counter()
        outcomes = asyncio.run(_attack(port))
        seconds = time.perf_counter() - t0
        time.sleep(1.0)
        after, peak = rss_bytes(proc.pid)
    finally:
        proc.terminate()
        proc.join(10)
    return {
        "connections": ATTACKERS,
        "declared_bytes_each": MAX_PAYLOAD,
        "seconds": round(seconds, 3),
        "closed_by_receiver": sum(closed for _, closed in outcomes),
        "bytes_sent_past_headers_mb": round(sum(sent for sent, _ in outcomes) / MB, 1),
        "memory_growth_peak_mb": round((peak - before) / MB, 1),
        "memory_growth_after_mb": round((after - before) / MB, 1),
        "released": after - before <= 5 * MB,
    }


async def _attack(port: int) -> list[tuple[int, bool]]:
    return await asyncio.gather(*(large_hello(port) for _ in range(ATTACKERS)))


async def replayed_handshake(captures: tuple[Path, Path]) -> dict:
    """The sender goes through a proxy that records its bytes; once its handshake has passed,
    its later frames wait while the handshake is replayed into new connections."""
    handshake_bytes = sender_handshake_bytes(PARAMS)
    start, recorded, release = recording_proxy(handshake_bytes)
    port = free_port()
    receiver = Agent("receiver", ("127.0.0.1", port), KEY, PcapSource(captures[1]), PARAMS)
    await receiver.listen()
    proxy_port = await start(port)
    sender = Agent("sender", ("127.0.0.1", proxy_port), KEY, PcapSource(captures[0]), PARAMS)
    outcomes: list[bool] = []

    async def replay() -> None:
        while len(recorded) < handshake_bytes or receiver.connections < 1:
            await asyncio.sleep(0.01)
        for _ in range(REPLAYS):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(bytes(recorded[:handshake_bytes]))
            try:
                async with asyncio.timeout(10):
                    while await reader.read(4096):
                        pass
                outcomes.append(True)  # closed by the receiver
            except ConnectionError:
                outcomes.append(True)
            except TimeoutError:
                outcomes.append(False)
            writer.close()
        release.set()

    replaying = asyncio.create_task(replay())
    t0 = time.perf_counter()
    await asyncio.gather(receiver.run(), sender.run(), replaying)
    rows = [r for r in receiver.records if "interval" in r]
    complete = sum(r["status"] == "complete" for r in rows)
    return {
        "replays": REPLAYS,
        "rejected": receiver.rejections.total == REPLAYS and all(outcomes),
        "rejections": receiver.rejections.total,
        "receiver_connections": receiver.connections,
        "sender_connections": sender.connections,
        "intervals_complete": f"{complete}/{len(rows)}",
        "sender_unaffected": receiver.connections == 1 and complete == len(rows) > 0,
        "seconds": round(time.perf_counter() - t0, 3),
    }


async def places_held(captures: tuple[Path, Path]) -> dict:
    params = replace(PARAMS, handshake_timeout_ns=600 * 10**9)
    port = free_port()
    receiver = Agent("receiver", ("127.0.0.1", port), KEY, PcapSource(captures[1]), params)
    await receiver.listen()
    held = []
    for source in ("127.0.0.2", "127.0.0.3") * (params.max_unauthenticated // 2):
        held.append(await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0)))
    while receiver.unauthenticated < len(held):
        await asyncio.sleep(0.01)
    sender = Agent("sender", ("127.0.0.1", port), KEY, PcapSource(captures[0]), params)
    t0 = time.perf_counter()
    connected: list[float] = []

    async def watch() -> None:
        while receiver.connections < 1:
            await asyncio.sleep(0.001)
        connected.append(time.perf_counter() - t0)

    await asyncio.gather(receiver.run(), sender.run(), watch())
    for _, writer in held:
        writer.close()
    rows = [r for r in receiver.records if "interval" in r]
    complete = sum(r["status"] == "complete" for r in rows)
    return {
        "places": params.max_unauthenticated,
        "held_by_peers_without_the_key": len(held),
        "sender_connected_after_seconds": round(connected[0], 3) if connected else None,
        "evicted": sum("evicted" in r for r in receiver.rejections.recent),
        "intervals_complete": f"{complete}/{len(rows)}",
    }


def main() -> None:
    with tempfile.TemporaryDirectory() as d:
        captures = Path(d) / "sender.pcap", Path(d) / "receiver.pcap"
        sim = simulate_stream(StreamParams(rate_pps=200_000, loss_rate=3e-3, reorder_rate=0.3))
        write_captures(sim, *captures)
        result = {
            "large_hellos": large_hellos(captures[1]),
            "replayed_handshake": asyncio.run(replayed_handshake(captures)),
            "places_held": asyncio.run(places_held(captures)),
        }
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
