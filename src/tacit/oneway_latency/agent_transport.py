"""The agents' connection over TCP: the handshake, frames out, the replies to the receiver's
requests matched to the requests that await them, and the bounded log of refusals (the frames
themselves, their authentication and payloads are :mod:`~tacit.oneway_latency.protocol`)."""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import deque
from typing import Any

import numpy as np

from tacit.oneway_latency.protocol import (
    Channel,
    MessageType,
    Role,
    SynopsisArrays,
    encode_ids,
    encode_interval_count,
)


class IntervalExpired(Exception):
    """The sender answered that it no longer holds an interval."""


class Connection:
    """One authenticated connection: frames out, replies to awaited requests in."""

    def __init__(
        self, channel: Channel, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        self.channel = channel
        self.reader = reader
        self.writer = writer
        self.waiting: dict[tuple[MessageType, int], asyncio.Future] = {}

    def send_now(self, mtype: MessageType, payload: bytes) -> None:
        """Queue a frame (sealing and writing in one step keeps sequence numbers in order)."""
        self.writer.write(self.channel.seal(mtype, payload))

    async def send(self, mtype: MessageType, payload: bytes) -> None:
        self.send_now(mtype, payload)
        await self.writer.drain()

    def expect(self, mtype: MessageType, interval: int) -> asyncio.Future:
        fut = asyncio.get_running_loop().create_future()
        self.waiting[(mtype, interval)] = fut
        return fut

    def deliver(self, mtype: MessageType, interval: int, value: Any) -> None:
        fut = self.waiting.pop((mtype, interval), None)
        if fut is None or fut.done():
            raise self.channel.error(f"unexpected {mtype.name} for interval {interval}")
        fut.set_result(value)

    def expired(self, interval: int) -> None:
        """The sender no longer holds ``interval``: fail whatever awaits it."""
        for (_, i), fut in list(self.waiting.items()):
            if i == interval and not fut.done():
                fut.set_exception(IntervalExpired(interval))

    def close(self) -> None:
        for fut in self.waiting.values():
            if not fut.done():
                fut.set_exception(ConnectionError("connection closed"))
        self.waiting.clear()
        self.writer.close()

    async def request_synopsis(self, interval: int, per_bank: int) -> SynopsisArrays:
        """Receiver: the sender's synopsis of ``interval`` with ``per_bank`` buckets per bank."""
        reply = self.expect(MessageType.SYNOPSIS, interval)
        await self.send(MessageType.SYNOPSIS_REQUEST, encode_interval_count(interval, per_bank))
        arrays = await reply
        if arrays.buckets_per_bank != per_bank:
            raise self.channel.error(f"synopsis of interval {interval} has the wrong size")
        return arrays

    async def request_timestamps(
        self, interval: int, ids: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Receiver: ``(found, timestamps)`` of ``ids`` in the sender's cache of ``interval``."""
        reply = self.expect(MessageType.TIMESTAMPS, interval)
        await self.send(MessageType.TIMESTAMP_REQUEST, encode_ids(interval, ids))
        found, ts = await reply
        if len(found) != len(ids):
            raise self.channel.error(f"timestamps of interval {interval}: wrong count")
        return found, ts


async def handshake(
    channel: Channel,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    role: Role,
    config: dict[str, Any],
) -> None:
    """Run the challenge-response handshake of :mod:`~tacit.oneway_latency.protocol` on a new
    connection, then exchange and check configurations (:class:`ConfigMismatchError` names the
    differences). The listener reveals its configuration only after the connector's proof,
    and the connector only after the listener's."""
    peer = Role.RECEIVER if role == Role.SENDER else Role.SENDER
    if channel.connector:
        writer.write(channel.hello(role))
        await writer.drain()
        channel.accept_challenge(await channel.read(reader), peer)
        writer.write(channel.proof() + channel.config_frame(config))
        await writer.drain()
        channel.accept_config(await channel.read(reader), config)
        return
    channel.accept_hello(await channel.read(reader), peer)
    writer.write(channel.challenge(role))
    await writer.drain()
    channel.accept_proof(await channel.read(reader))
    theirs = await channel.read(reader)
    writer.write(channel.config_frame(config))  # to a proven peer: it may name the differences
    await writer.drain()
    channel.accept_config(theirs, config)


log = logging.getLogger("tacit.oneway_latency.agent")  # the agent's own log
LOG_EVERY_S = 1.0
"""Refusals written to the log at most this often: a flood of connections that cannot
authenticate would otherwise write a warning for each, without bound."""


class RejectionLog:
    """The last ``kept`` refused frames or connections, with their reasons, and how many were
    refused in all (an unauthenticated peer can be refused without end: the log stays small)."""

    def __init__(self, kept: int) -> None:
        self.recent: deque[str] = deque(maxlen=kept)
        self.total = 0
        self._logged_at = -math.inf
        self._unlogged = 0

    def add(self, reason: str) -> None:
        self.recent.append(reason)
        self.total += 1

    def warn(self, what: str, reason: str) -> None:
        """Log ``what: reason`` unless a refusal was logged within :data:`LOG_EVERY_S`; the
        next one logged says how many were not."""
        now = time.monotonic()
        if now - self._logged_at < LOG_EVERY_S:
            self._unlogged += 1
            return
        more = f" ({self._unlogged} more refused since the last logged)" if self._unlogged else ""
        log.warning("%s: %s%s", what, reason, more)
        self._logged_at, self._unlogged = now, 0
