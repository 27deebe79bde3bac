"""What a peer without the key can do to a receiving agent: its frames are refused on their
header, it learns nothing of the configuration, a handshake it replays fails, it cannot displace
the authenticated sender, and its connections are capped, timed out and logged in bounded
memory."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import tracemalloc
from pathlib import Path

from oneway_agents import (
    FAST,
    KEY,
    check_against_truth,
    pair,
    recording_proxy,
    sender_handshake_bytes,
)
from tacit.oneway_latency.agent import Agent, AgentParams
from tacit.oneway_latency.capture_sources import PcapSource
from tacit.oneway_latency.protocol import (
    HEADER,
    MAC_BYTES,
    MAX_PAYLOAD,
    VERSION,
    Channel,
    MessageType,
    Role,
)

CHALLENGE_BYTES = HEADER.size + 1 + 32 + 32 + MAC_BYTES


async def listening(pcaps: tuple[Path, Path], params: AgentParams = FAST) -> tuple[Agent, int]:
    """A receiving agent accepting connections (its capture not started)."""
    receiver = Agent("receiver", ("127.0.0.1", 0), KEY, PcapSource(pcaps[1]), params)
    return receiver, await receiver.listen()


async def until_closed(reader: asyncio.StreamReader, seconds: float) -> bytes | None:
    """Everything the agent sends until it closes the connection; None if it is still open
    after ``seconds``."""
    got = bytearray()
    try:
        async with asyncio.timeout(seconds):
            while data := await reader.read(65536):
                got += data
    except ConnectionError:
        pass
    except TimeoutError:
        return None
    return bytes(got)


def test_a_64_mib_hello_is_refused_on_its_header_and_buffers_nothing(pcaps) -> None:
    """20 connections each declare a 64 MiB hello and send 4 MiB of it: every one is closed
    after its header, and the receiver's stream buffers hold almost nothing."""
    header = HEADER.pack(b"TRDA", VERSION, MessageType.HELLO, 0, MAX_PAYLOAD, 0)
    chunk = bytes(256 * 1024)

    async def attack(port: int) -> bytes | None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(header)
        with contextlib.suppress(ConnectionError):
            for _ in range(16):
                writer.write(chunk)
                await writer.drain()
        answer = await until_closed(reader, 3.0)
        writer.close()
        return answer

    async def run() -> tuple[Agent, list[bytes | None], int]:
        receiver, port = await listening(pcaps)
        tracemalloc.start()
        try:
            answers = await asyncio.gather(*(attack(port) for _ in range(20)))
            await asyncio.sleep(0.1)  # the agent's handlers finish
            gc.collect()
            snapshot = tracemalloc.take_snapshot()
        finally:
            tracemalloc.stop()
        buffered = snapshot.filter_traces([tracemalloc.Filter(True, "*asyncio/streams.py")])
        return receiver, answers, sum(s.size for s in buffered.statistics("filename"))

    receiver, answers, buffered = asyncio.run(run())
    assert answers == [b""] * 20  # closed, having sent nothing
    assert buffered < 1_000_000
    assert receiver.rejections.total == 20
    assert "limit before authentication" in " ".join(receiver.rejections.recent)


def test_no_configuration_before_the_peer_proves_the_key(pcaps) -> None:
    async def run() -> tuple[bytes | None, bytes, bytes | None, bytes | None]:
        _, port = await listening(pcaps)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        silent = await until_closed(reader, 0.5)  # the receiver speaks only when spoken to
        writer.close()
        # A hello that verifies (as one captured from an earlier session) gets the challenge.
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(Channel(KEY, connector=True).hello(Role.SENDER))
        challenge = await reader.readexactly(CHALLENGE_BYTES)
        writer.write(HEADER.pack(b"TRDA", VERSION, MessageType.PROOF, 0, 32, 1) + bytes(64))
        after_bad_proof = await until_closed(reader, 3.0)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)  # without the key
        writer.write(Channel(b"guess", connector=True).hello(Role.SENDER))
        forged = await until_closed(reader, 3.0)
        return silent, challenge, after_bad_proof, forged

    silent, challenge, after_bad_proof, forged = asyncio.run(run())
    assert silent is None
    assert challenge[4:6] == bytes([VERSION, MessageType.CHALLENGE])
    assert after_bad_proof == b"" and forged == b""  # closed, nothing more said


def test_a_replayed_handshake_neither_authenticates_nor_displaces_the_sender(pcaps) -> None:
    """The sender's handshake, captured on the wire, is replayed ten times while the sender is
    connected (its later frames held back meanwhile): every replay is refused at its proof, the
    sender keeps its one connection, and every interval is measured."""
    handshake_bytes = sender_handshake_bytes(FAST)
    start, recorded, release = recording_proxy(handshake_bytes)
    refused: list[bytes | None] = []
    replays = []

    async def replay(receiver: Agent) -> None:
        while len(recorded) < handshake_bytes or receiver.connections < 1:
            await asyncio.sleep(0.01)
        for _ in range(10):
            reader, writer = await asyncio.open_connection("127.0.0.1", receiver.port)
            writer.write(bytes(recorded[:handshake_bytes]))
            refused.append(await until_closed(reader, 3.0))
            writer.close()
        release.set()

    async def via(receiver: Agent) -> int:
        replays.append(asyncio.create_task(replay(receiver)))
        assert receiver.port is not None
        return await start(receiver.port)

    params = dataclasses.replace(FAST, handshake_timeout_ns=30 * 10**9)
    sender, receiver = asyncio.run(pair(pcaps, params, params, via=via))
    # each replay got a challenge of its own (a fresh nonce), then was closed at its proof
    assert [len(r or b"") for r in refused] == [CHALLENGE_BYTES] * 10 and len(set(refused)) == 10
    assert receiver.connections == 1 and sender.connections == 1
    assert receiver.rejections.total == 10
    assert all("MAC does not verify" in r for r in receiver.rejections.recent)
    check_against_truth(pcaps, sender, receiver, params)


async def silent(port: int, source: str = "127.0.0.1") -> tuple[float, bytes | None]:
    """Connect from ``source`` and say nothing: (seconds until closed, what the agent sent)."""
    loop = asyncio.get_running_loop()
    begin = loop.time()
    reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))
    answer = await until_closed(reader, 5.0)
    writer.close()
    return loop.time() - begin, answer


def test_unauthenticated_connections_are_capped_timed_out_and_logged_in_bounds(pcaps) -> None:
    params = dataclasses.replace(
        FAST, max_unauthenticated=8, handshake_timeout_ns=10**9, rejections_kept=100
    )

    async def garbage(port: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET / HTTP/1.1\r\nHost: agent\r\n\r\n")
        await until_closed(reader, 3.0)
        writer.close()

    async def run() -> tuple[Agent, list[tuple[float, bytes | None]]]:
        receiver, port = await listening(pcaps, params)
        waits = await asyncio.gather(*(silent(port) for _ in range(20)))
        for _ in range(15):
            await asyncio.gather(*(garbage(port) for _ in range(4)))
        return receiver, waits

    receiver, waits = asyncio.run(run())
    assert all(answer == b"" for _, answer in waits)  # every one closed, told nothing
    log = receiver.rejections
    assert log.total == 20 + 60 and len(log.recent) == 80
    # one address holds 4 places: each newer connection took the place of its oldest, and the
    # newest 4 were held until the handshake deadline
    assert sum("evicted" in r for r in log.recent) == 16
    assert sum("no handshake within" in r for r in log.recent) == 4
    assert all(t >= 0.95 for t in sorted(t for t, _ in waits)[-4:])
    assert sum("bad magic" in r for r in log.recent) == 60


def test_peers_without_the_key_filling_every_place_cannot_keep_the_sender_out(pcaps) -> None:
    """Eight silent connections from two other addresses hold every handshake place for far
    longer than the run; the sender still gets in (the oldest of them gives way) and every
    interval is measured."""
    params = dataclasses.replace(FAST, handshake_timeout_ns=30 * 10**9)
    held: list[asyncio.Task] = []

    async def via(receiver: Agent) -> int:
        assert receiver.port is not None
        for source in ("127.0.0.2", "127.0.0.3") * 4:
            held.append(asyncio.create_task(silent(receiver.port, source)))
        while receiver.unauthenticated < 8:
            await asyncio.sleep(0.01)
        return receiver.port

    sender, receiver = asyncio.run(pair(pcaps, params, params, via=via))
    assert receiver.connections == 1
    assert sum("evicted" in r for r in receiver.rejections.recent) == 1
    check_against_truth(pcaps, sender, receiver, params)


def test_a_flood_of_refusals_is_logged_about_once_a_second(caplog, monkeypatch):
    """Every refusal is kept and counted; the log gets one line a second at most, the next
    saying how many went unlogged."""
    from tacit.oneway_latency import agent_transport
    from tacit.oneway_latency.agent_transport import RejectionLog

    clock = iter([0.0, 0.1, 0.2, 0.5, 1.2, 1.3])
    monkeypatch.setattr(agent_transport.time, "monotonic", lambda: next(clock))
    rejections = RejectionLog(3)
    with caplog.at_level("WARNING", logger="tacit.oneway_latency.agent"):
        for k in range(6):
            rejections.add(f"bad {k}")
            rejections.warn("refused connection", f"bad {k}")
    assert rejections.total == 6 and list(rejections.recent) == ["bad 3", "bad 4", "bad 5"]
    assert [r.getMessage() for r in caplog.records] == [
        "refused connection: bad 0",
        "refused connection: bad 4 (3 more refused since the last logged)",
    ]
