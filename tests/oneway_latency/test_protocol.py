"""The agents' wire protocol: round trips, and every kind of bad frame refused by name."""

from __future__ import annotations

import asyncio
import struct

import numpy as np
import pytest

from oneway_channels import CONFIG, KEY, connected, handshake
from tacit.oneway_latency.agent import AgentParams
from tacit.oneway_latency.intervals import IntervalParams
from tacit.oneway_latency.protocol import (
    HEADER,
    MAC_BYTES,
    MAX_HANDSHAKE_PAYLOAD,
    MAX_PAYLOAD,
    VERSION,
    Channel,
    ConfigMismatchError,
    Frame,
    MessageType,
    ProtocolError,
    Role,
    decode_ids,
    decode_synopsis,
    decode_timestamps,
    encode_ids,
    encode_synopsis,
    encode_timestamps,
)
from tacit.oneway_latency.rda import RDAParams


def test_round_trip_of_every_payload() -> None:
    a, b = connected()
    rng = np.random.default_rng(1)
    idx, ts = (
        rng.integers(0, 2**63, 30, dtype=np.uint64),
        rng.integers(0, 2**63, 30).astype(np.uint64),
    )
    count = rng.integers(-3, 4, 30).astype(np.int32)
    frame = b.decode(a.seal(MessageType.SYNOPSIS, encode_synopsis(7, 10, idx, ts, count)))
    syn = decode_synopsis(b, frame.payload, k=3)
    assert (syn.interval, syn.buckets_per_bank) == (7, 10)
    assert np.array_equal(syn.idx, idx) and np.array_equal(syn.ts, ts)
    assert np.array_equal(syn.count, count)
    ids = np.array([1, 2**64 - 1, 5], np.uint64)
    frame = a.decode(b.seal(MessageType.TIMESTAMP_REQUEST, encode_ids(-2, ids)))
    assert frame.sequence == 2 and frame.type == MessageType.TIMESTAMP_REQUEST
    interval, got = decode_ids(a, frame.payload)
    assert interval == -2 and np.array_equal(got, ids)
    found, stamps = np.array([True, False, True]), np.array([10, 0, -4], np.int64)
    frame = b.decode(a.seal(MessageType.TIMESTAMPS, encode_timestamps(3, found, stamps)))
    i, f, t = decode_timestamps(b, frame.payload)
    assert i == 3 and f.tolist() == found.tolist() and t.tolist() == stamps.tolist()


def test_replayed_and_reordered_frames_are_refused() -> None:
    a, b = connected()
    first = a.seal(MessageType.BYE, b"")
    second = a.seal(MessageType.BYE, b"")
    with pytest.raises(ProtocolError, match="sequence number 4, expected 3"):
        b.decode(second)
    b.decode(first)
    with pytest.raises(ProtocolError, match="sequence number 3, expected 4"):
        b.decode(first)


def test_frames_of_another_connection_or_direction_do_not_verify() -> None:
    a, b = connected()
    c, _ = connected()
    with pytest.raises(ProtocolError, match="MAC does not verify"):
        b.decode(c.seal(MessageType.BYE, b""))  # same key, another connection
    with pytest.raises(ProtocolError, match="MAC does not verify"):
        a.decode(a.seal(MessageType.BYE, b""))  # reflected back to its sender


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda f: b"XRDA" + f[4:], "bad magic"),
        (lambda f: f[:4] + b"\x01" + f[5:], "protocol version 1, this agent speaks 2"),
        (lambda f: f[:5] + b"\x63" + f[6:], "unknown message type 99"),
        (lambda f: f[:6] + b"\x00\x01" + f[8:], "reserved header field"),
        (lambda f: f[:-40] + bytes([f[-40] ^ 1]) + f[-39:], "MAC does not verify"),
        (lambda f: f[:-1], "frame cut"),
        (lambda f: f[:10], "header cut"),
        (
            lambda f: f[:8] + struct.pack("!I", MAX_PAYLOAD + 1) + f[12:],
            "exceeds the 67108864 limit",
        ),
    ],
)
def test_bad_frames_are_refused_with_their_reason(mutate, message) -> None:
    a, b = connected()
    frame = a.seal(MessageType.SKETCH, bytes(range(40)))
    with pytest.raises(ProtocolError, match=message):
        b.decode(mutate(frame))


def payload(frame: bytes) -> bytes:
    return frame[HEADER.size : -MAC_BYTES]


def test_a_listener_without_the_key_fails_its_proof() -> None:
    a = Channel(KEY, connector=True, peer="10.0.0.9:1234")
    b = Channel(b"attacker", connector=False)
    b.accept_hello(Frame(MessageType.HELLO, 0, payload(a.hello(Role.SENDER))), Role.SENDER)
    challenge = b.challenge(Role.RECEIVER)
    with pytest.raises(ProtocolError, match=r"10\.0\.0\.9:1234: .*MAC does not verify"):
        a.decode(challenge)  # the challenge frame is MAC'd with the key
    # and the proof inside it, should its frame's MAC be taken, does not verify either
    with pytest.raises(ProtocolError, match="listener's proof does not verify"):
        a.accept_challenge(Frame(MessageType.CHALLENGE, 0, payload(challenge)), Role.RECEIVER)
    assert not a.authenticated


def test_a_captured_handshake_replayed_into_a_new_session_is_refused() -> None:
    old_a, old_b = Channel(KEY, True), Channel(KEY, False)
    hello, _, proof = handshake(old_a, old_b)
    replayed = Channel(KEY, connector=False)
    replayed.accept_hello(replayed.decode(hello), Role.SENDER)  # a hello proves nothing
    replayed.challenge(Role.RECEIVER)  # a fresh nonce: the old proof is for another session
    with pytest.raises(ProtocolError, match="MAC does not verify"):
        replayed.decode(proof)
    assert not replayed.authenticated
    with pytest.raises(ProtocolError, match="configuration withheld"):
        replayed.config_frame(CONFIG)


def test_configuration_and_data_only_after_authentication() -> None:
    a, b = Channel(KEY, True), Channel(KEY, False)
    with pytest.raises(ProtocolError, match="configuration withheld"):
        b.config_frame(CONFIG)
    with pytest.raises(ProtocolError, match="no proof before"):
        a.proof()
    sketch = HEADER.pack(b"TRDA", VERSION, MessageType.SKETCH, 0, 10, 0)
    with pytest.raises(ProtocolError, match="a SKETCH frame before authentication"):
        b.check_header(sketch)


def test_the_proofs_are_bound_to_the_roles() -> None:
    a, b = Channel(KEY, True), Channel(KEY, False)
    with pytest.raises(ProtocolError, match="peer is a receiver, expected a sender"):
        b.accept_hello(b.decode(a.hello(Role.RECEIVER)), Role.SENDER)


@pytest.mark.parametrize("length", [MAX_HANDSHAKE_PAYLOAD + 1, MAX_PAYLOAD])
def test_a_large_frame_before_authentication_is_refused_on_its_header(length: int) -> None:
    b = Channel(KEY, connector=False)
    header = HEADER.pack(b"TRDA", VERSION, MessageType.HELLO, 0, length, 0)

    async def read() -> int:
        reader = asyncio.StreamReader()
        reader.feed_data(header + bytes(1000))  # whatever follows is not read
        with pytest.raises(ProtocolError, match="limit before authentication"):
            await b.read(reader)
        return len(await reader.read(2000))

    assert asyncio.run(asyncio.wait_for(read(), 2)) == 1000


def test_oversized_frame_is_refused_before_its_payload_is_read() -> None:
    _, b = connected()
    header = HEADER.pack(b"TRDA", VERSION, MessageType.SYNOPSIS, 0, 2**31, 0)

    async def read() -> None:
        reader = asyncio.StreamReader()
        reader.feed_data(header)  # no payload follows: reading it would hang
        await b.read(reader)

    with pytest.raises(ProtocolError, match="exceeds"):
        asyncio.run(asyncio.wait_for(read(), 2))


@pytest.mark.parametrize(
    ("other", "field"),
    [
        (AgentParams(intervals=IntervalParams(length_ns=5_000_000)), "IntervalParams.length_ns"),
        (AgentParams(rda=RDAParams(k=4)), "RDAParams.k"),
        (AgentParams(rda=RDAParams(seed=3)), "RDAParams.seed"),
        (AgentParams(rda=RDAParams(sampling_rate=0.1)), "RDAParams.sampling_rate"),
        (AgentParams(rda=RDAParams(buckets_per_bank=100)), "RDAParams.buckets_per_bank"),
        (AgentParams(lookahead=2), "lookahead"),
    ],
)
def test_mismatched_configurations_are_refused_by_name(other, field) -> None:
    with pytest.raises(ConfigMismatchError, match=f"configurations differ: {field}: here"):
        connected(CONFIG, other.config())


def test_local_settings_need_not_match() -> None:
    connected(CONFIG, AgentParams(grace_ns=0, retention_ns=5 * 10**9, concurrency=2).config())


def test_malformed_payloads() -> None:
    _, b = connected()
    with pytest.raises(ProtocolError, match="synopsis: payload of"):
        decode_synopsis(
            b, encode_synopsis(1, 10, *(np.zeros(30, t) for t in ("u8", "u8", "i4")))[:-1], 3
        )
    with pytest.raises(ProtocolError, match="found flags"):
        decode_timestamps(b, encode_timestamps(1, np.array([2], np.uint8), np.zeros(1, int)))


@pytest.mark.parametrize(("sent", "refused"), [(0, False), (1, True), (19, True), (25, True)])
def test_a_stream_ending_inside_a_frame_is_a_cut_frame(sent: int, refused: bool) -> None:
    a, b = connected()
    frame = a.seal(MessageType.BYE, b"")

    async def read() -> None:
        reader = asyncio.StreamReader()
        reader.feed_data(frame[:sent])
        reader.feed_eof()
        await b.read(reader)

    with pytest.raises(ProtocolError if refused else asyncio.IncompleteReadError):
        asyncio.run(read())
