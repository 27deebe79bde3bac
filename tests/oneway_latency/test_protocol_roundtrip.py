"""The agents' wire protocol on generated contents: every message type survives encoding,
sealing, and the streaming reader fed in arbitrary chunks; a cut or altered frame or payload is
refused as a :class:`ProtocolError`, never anything else."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from oneway_channels import KEY, connected, handshake
from tacit.oneway_latency.agent import AgentParams
from tacit.oneway_latency.protocol import (
    Channel,
    MessageType,
    ProtocolError,
    Role,
    Sketch,
    SynopsisArrays,
    decode_end,
    decode_ids,
    decode_interval_count,
    decode_result,
    decode_sketch,
    decode_synopsis,
    decode_timestamps,
    encode_end,
    encode_ids,
    encode_interval_count,
    encode_json,
    encode_sketch,
    encode_synopsis,
    encode_timestamps,
)

K = AgentParams().rda.k
"""Banks of a synopsis: the agreed configuration's, which the receiver decodes with."""

intervals = st.integers(-(2**63), 2**63 - 1)
u32 = st.integers(0, 2**32 - 1)
u64 = st.integers(0, 2**64 - 1)
lengths = st.integers(0, 40)
u64_arrays = arrays(np.uint64, lengths)


def synopses(k: int) -> st.SearchStrategy[SynopsisArrays]:
    def of(interval: int, m: int) -> st.SearchStrategy[SynopsisArrays]:
        n = k * m
        return st.builds(
            SynopsisArrays,
            st.just(interval),
            st.just(m),
            arrays(np.uint64, n),
            arrays(np.uint64, n),
            arrays(np.int32, n),
        )

    return st.tuples(intervals, st.integers(0, 12)).flatmap(lambda t: of(*t))


@st.composite
def timestamps(draw: st.DrawFn) -> tuple[int, np.ndarray, np.ndarray]:
    n = draw(lengths)
    return draw(intervals), draw(arrays(np.bool_, n)), draw(arrays(np.int64, n))


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=12,
)
results = st.builds(
    lambda rest, i: {**rest, "interval": i},
    st.dictionaries(st.text(max_size=12), json_values, max_size=8),
    st.integers(),
)


@dataclass(frozen=True)
class Kind:
    """One message type's payload: how to make, encode and decode it."""

    type: MessageType
    values: st.SearchStrategy[Any]
    encode: Callable[[Any], bytes]
    decode: Callable[[Channel, bytes], Any]


KINDS = [
    Kind(
        MessageType.SKETCH,
        st.builds(Sketch, intervals, u64, u64_arrays),
        lambda s: encode_sketch(s.interval, s.size, s.values),
        decode_sketch,
    ),
    Kind(
        MessageType.SYNOPSIS_REQUEST,
        st.tuples(intervals, u32),
        lambda v: encode_interval_count(*v),
        decode_interval_count,
    ),
    Kind(
        MessageType.SYNOPSIS,
        synopses(K),
        lambda s: encode_synopsis(s.interval, s.buckets_per_bank, s.idx, s.ts, s.count),
        lambda ch, data: decode_synopsis(ch, data, K),
    ),
    Kind(
        MessageType.TIMESTAMP_REQUEST,
        st.tuples(intervals, u64_arrays),
        lambda v: encode_ids(*v),
        decode_ids,
    ),
    Kind(MessageType.TIMESTAMPS, timestamps(), lambda v: encode_timestamps(*v), decode_timestamps),
    Kind(MessageType.RESULT, results, encode_json, decode_result),
    Kind(MessageType.END, intervals, encode_end, decode_end),
    Kind(MessageType.EXPIRED, intervals, encode_end, decode_end),
    Kind(MessageType.BYE, st.just(b""), bytes, lambda ch, data: data),
]
FIRST = 3
"""The connector's first data frame's sequence number (after hello, proof, configuration)."""
WITH_PAYLOAD = [k for k in KINDS if k.type != MessageType.BYE]
BINARY = [k for k in WITH_PAYLOAD if k.type != MessageType.RESULT]
"""The payloads whose length is fixed by their counts (JSON tolerates trailing spaces)."""


def plain(value: Any) -> Any:
    """A comparable form of a decoded value: arrays with their dtype, dataclasses as tuples."""
    if isinstance(value, np.ndarray):
        return (value.dtype.name, value.tolist())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return tuple(plain(getattr(value, f.name)) for f in dataclasses.fields(value))
    if isinstance(value, tuple):
        return tuple(plain(v) for v in value)
    return value


def messages(kinds: list[Kind] = KINDS) -> st.SearchStrategy[tuple[Kind, Any]]:
    return st.sampled_from(kinds).flatmap(lambda k: st.tuples(st.just(k), k.values))


def chunked(data: bytes, draw: st.DrawFn) -> list[bytes]:
    """``data`` (at least two bytes) cut at arbitrary points into non-empty chunks."""
    cuts = draw(st.sets(st.integers(1, len(data) - 1), max_size=12))
    return [data[lo:hi] for lo, hi in itertools.pairwise([0, *sorted(cuts), len(data)])]


async def read_frames(channel: Channel, chunks: list[bytes], count: int) -> list[Any]:
    """Read ``count`` frames while the chunks arrive one at a time, then the end of stream."""
    reader = asyncio.StreamReader()

    async def feed() -> None:
        for chunk in chunks:
            reader.feed_data(chunk)
            await asyncio.sleep(0)
        reader.feed_eof()

    feeder = asyncio.create_task(feed())
    try:
        return [await channel.read(reader) for _ in range(count)]
    finally:
        await feeder


def read_one(channel: Channel, data: bytes) -> Any:
    return asyncio.run(read_frames(channel, [data], 1))[0]


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.type.name)
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_every_payload_decodes_to_what_was_encoded(kind: Kind, data: st.DataObject) -> None:
    value = data.draw(kind.values)
    a, b = connected()
    frame = b.decode(a.seal(kind.type, kind.encode(value)))
    assert (frame.type, frame.sequence) == (kind.type, FIRST)
    assert plain(kind.decode(b, frame.payload)) == plain(value)


@pytest.mark.parametrize("k", [1, 2, 3, 5])
@given(synopsis=st.data())
@settings(max_examples=30, deadline=None)
def test_synopses_of_any_bank_count_round_trip(k: int, synopsis: st.DataObject) -> None:
    s = synopsis.draw(synopses(k))
    _, b = connected()
    payload = encode_synopsis(s.interval, s.buckets_per_bank, s.idx, s.ts, s.count)
    assert plain(decode_synopsis(b, payload, k)) == plain(s)


@given(config=st.dictionaries(st.text(max_size=12), json_values, max_size=8))
@settings(max_examples=60, deadline=None)
def test_configurations_cross_after_the_handshake(config: dict[str, Any]) -> None:
    a, b = Channel(KEY, connector=True), Channel(KEY, connector=False)
    handshake(a, b)
    assert b.accept_config(b.decode(a.config_frame(config)), config) == config
    assert a.accept_config(a.decode(b.config_frame(config)), config) == config


@given(data=st.data())
@settings(max_examples=100, deadline=None)
def test_every_handshake_frame_altered_is_refused(data: st.DataObject) -> None:
    """Any byte of the hello, the challenge or the proof changed: the handshake fails with a
    :class:`ProtocolError` and the listener never counts the connector as authenticated."""
    a, b = Channel(KEY, connector=True), Channel(KEY, connector=False)
    which = data.draw(st.integers(0, 2))
    steps = [
        (lambda: a.hello(Role.SENDER), lambda f: b.accept_hello(b.decode(f), Role.SENDER)),
        (
            lambda: b.challenge(Role.RECEIVER),
            lambda f: a.accept_challenge(a.decode(f), Role.RECEIVER),
        ),
        (a.proof, lambda f: b.accept_proof(b.decode(f))),
    ]
    for n, (make, take) in enumerate(steps):
        frame = bytearray(make())
        if n == which:
            at = data.draw(st.integers(0, len(frame) - 1))
            frame[at] ^= data.draw(st.integers(1, 255))
            with pytest.raises(ProtocolError):
                take(bytes(frame))
            break
        take(bytes(frame))
    assert not b.authenticated


@given(stream=st.data())
@settings(max_examples=60, deadline=None)
def test_frames_read_from_a_stream_in_any_chunks(stream: st.DataObject) -> None:
    sent = stream.draw(st.lists(messages(), min_size=1, max_size=6))
    a, b = connected()
    wire = b"".join(a.seal(kind.type, kind.encode(value)) for kind, value in sent)
    frames = asyncio.run(read_frames(b, chunked(wire, stream.draw), len(sent)))
    assert [(f.type, f.sequence) for f in frames] == [
        (kind.type, n) for n, (kind, _) in enumerate(sent, start=FIRST)
    ]
    for frame, (kind, value) in zip(frames, sent, strict=True):
        assert plain(kind.decode(b, frame.payload)) == plain(value)


@given(message=messages(), cut=st.data())
@settings(max_examples=80, deadline=None)
def test_a_cut_frame_is_refused(message: tuple[Kind, Any], cut: st.DataObject) -> None:
    kind, value = message
    a, b = connected()
    frame = a.seal(kind.type, kind.encode(value))
    at = cut.draw(st.integers(1, len(frame) - 1))
    with pytest.raises(ProtocolError):
        b.decode(frame[:at])
    with pytest.raises(ProtocolError):
        read_one(b, frame[:at])


@given(message=messages(), change=st.data())
@settings(max_examples=150, deadline=None)
def test_an_altered_frame_is_refused(message: tuple[Kind, Any], change: st.DataObject) -> None:
    kind, value = message
    a, b = connected()
    frame = bytearray(a.seal(kind.type, kind.encode(value)))
    at = change.draw(st.integers(0, len(frame) - 1))
    frame[at] ^= change.draw(st.integers(1, 255))
    with pytest.raises(ProtocolError):
        b.decode(bytes(frame))
    with pytest.raises(ProtocolError):
        read_one(b, bytes(frame))


@given(message=messages(WITH_PAYLOAD), data=st.data())
@settings(max_examples=80, deadline=None)
def test_a_cut_payload_is_refused(message: tuple[Kind, Any], data: st.DataObject) -> None:
    kind, value = message
    payload = kind.encode(value)
    _, b = connected()
    with pytest.raises(ProtocolError):
        kind.decode(b, payload[: data.draw(st.integers(0, len(payload) - 1))])


@given(
    message=messages(BINARY),
    extra=st.binary(min_size=1, max_size=24),
)
@settings(max_examples=80, deadline=None)
def test_a_payload_with_bytes_past_its_counts_is_refused(
    message: tuple[Kind, Any], extra: bytes
) -> None:
    kind, value = message
    _, b = connected()
    with pytest.raises(ProtocolError):
        kind.decode(b, kind.encode(value) + extra)


@given(found=timestamps(), data=st.data())
@settings(max_examples=40, deadline=None)
def test_found_flags_other_than_0_and_1_are_refused(
    found: tuple[int, np.ndarray, np.ndarray], data: st.DataObject
) -> None:
    interval, flags, ts = found
    if not len(flags):
        flags, ts = np.zeros(1, bool), np.zeros(1, np.int64)
    payload = bytearray(encode_timestamps(interval, flags, ts))
    flag = data.draw(st.integers(len(payload) - len(flags), len(payload) - 1))
    payload[flag] = data.draw(st.integers(2, 255))
    _, b = connected()
    with pytest.raises(ProtocolError, match="found flags"):
        decode_timestamps(b, bytes(payload))


@given(config=st.dictionaries(st.text(max_size=12), json_values, max_size=8), data=st.data())
@settings(max_examples=60, deadline=None)
def test_a_cut_configuration_is_refused(config: dict[str, Any], data: st.DataObject) -> None:
    a, b = Channel(KEY, connector=True), Channel(KEY, connector=False)
    handshake(a, b)
    frame = b.decode(a.config_frame(config))
    cut = data.draw(st.integers(0, len(frame.payload) - 1))
    with pytest.raises(ProtocolError):
        b.accept_config(dataclasses.replace(frame, payload=frame.payload[:cut]), config)


def test_results_are_json_objects_with_an_integer_interval() -> None:
    _, b = connected()
    for bad in (b"[1]", b'{"interval": "3"}', json.dumps({"mean_ns": 1}).encode(), b"\xff"):
        with pytest.raises(ProtocolError):
            decode_result(b, bad)
