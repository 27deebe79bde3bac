"""The two agents of the RDA one-way latency service: each captures at one point, the receiver
reconciles, both publish one JSON line per interval.

"Every Timestamp Counts: Accurate Tracking of Network Latencies using Reconcilable Difference
Aggregator" (RDA) measures between two capture points that exchange, per interval, small
summaries instead of every timestamp. Here that exchange runs over TCP between two processes
(:mod:`~tacit.oneway_latency.agent_transport`; the frames are
:mod:`~tacit.oneway_latency.protocol`), and per sender interval ``i``:

1. Both agents cut their packets into intervals ``t_{i+1} = t_i + δ`` and close interval ``i``
   once their capture clock is ``grace_ns`` past its end (late deliveries from the capture);
   a closed interval's packets become an :class:`~tacit.oneway_latency.intervals.IntervalCache`
   (flow-hash sampled as configured; a packet identifier seen twice in one interval is kept
   once and counted as a duplicate): :mod:`~tacit.oneway_latency.interval_book`.
2. The sender sends the interval's MinHash sketch (late binding, RDA step 2).
3. The receiver, once it has also closed ``i + lookahead`` (late arrivals live there), sizes the
   synopsis from the two sketches and asks for the sender's synopsis of that size.
4. The receiver reconciles (:func:`tacit.oneway_latency.rda.reconcile`, the same code as the
   single-process algorithm). Reconciliation looks the decoded identifiers up in both sides'
   caches; the sender's cache is remote, so the lookups it needs are gathered, requested from
   the sender in one message, and reconciliation is rerun with the answers until it needs
   none it lacks (at most ``max_peel_rounds`` requests: each peeling round may list new ids):
   :mod:`~tacit.oneway_latency.remote_cache`.
5. The receiver publishes the result and sends it to the sender, which publishes it too and
   forgets the interval.

Which side listens: the receiver (a documented choice: the receiver does the decoding and so
the waiting; a sender can come and go). The sender connects and retries with exponential
backoff; after every (re)connection it re-announces every interval still unanswered, and the
receiver answers again from what it kept (a result it already published is resent, not
recomputed), so a dropped connection or a late peer loses no interval that can still be
completed.

Retention (documented limits): an interval waits for its peer at most ``retention_ns``
(wall clock) after it closed; at most ``max_pending`` intervals wait at once — a file source
then pauses (backpressure), a live source publishes the oldest as given up. An interval that
cannot be completed is published with its status: ``peer_missing`` (the peer never asked for
or sent it), ``incomplete`` (the exchange began but did not finish, or either side's capture
failed before the interval's end: a corrupt record ends a capture file, and the intervals
closed before it are still measured), ``expired`` (the receiver no longer held its packets).
``complete`` and ``undecodable`` (the difference could not be fully listed; the mean and
standard deviation then rest on the clean buckets only, as in RDA Algorithm 2) are the outcomes
of a reconciliation. Intervals in which the sender saw no packet
are not published (there is nothing to measure); the final summary line counts them.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import math
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from tacit.errors import ConfigError, TacitError
from tacit.model.captures import PacketAccounting
from tacit.oneway_latency.agent_transport import (
    Connection,
    IntervalExpired,
    RejectionLog,
    handshake,
)
from tacit.oneway_latency.capture_sources import LiveSource, PcapSource
from tacit.oneway_latency.interval_book import IntervalBook
from tacit.oneway_latency.intervals import IntervalCache, IntervalParams, IntervalWork
from tacit.oneway_latency.minhash import BottomK, bottom_k
from tacit.oneway_latency.protocol import (
    MAX_PAYLOAD,
    Channel,
    ConfigMismatchError,
    Frame,
    MessageType,
    ProtocolError,
    Role,
    Sketch,
    decode_end,
    decode_ids,
    decode_interval_count,
    decode_result,
    decode_sketch,
    decode_synopsis,
    decode_timestamps,
    encode_end,
    encode_json,
    encode_sketch,
    encode_synopsis,
    encode_timestamps,
    params_config,
)
from tacit.oneway_latency.rda import RDAParams, late_binding_size, reconcile
from tacit.oneway_latency.remote_cache import RemoteCache, reconcile_remote
from tacit.oneway_latency.synopsis import Synopsis

log = logging.getLogger("tacit.oneway_latency.agent")

NS = 1_000_000_000

COMPLETE, UNDECODABLE = "complete", "undecodable"
PEER_MISSING, INCOMPLETE, EXPIRED = "peer_missing", "incomplete", "expired"
STATUSES = (COMPLETE, UNDECODABLE, PEER_MISSING, INCOMPLETE, EXPIRED)
"""Every status an interval record can have (module docstring)."""


def max_buckets_per_bank(k: int) -> int:
    """The most buckets per bank a synopsis of ``k`` banks may have: 20 bytes a bucket, and
    the synopsis sent in one frame of at most ``MAX_PAYLOAD`` bytes (64 of them a header)."""
    return (MAX_PAYLOAD - 64) // (20 * k)


@dataclass(frozen=True)
class AgentParams:
    """Parameters of one agent; both agents must agree on ``intervals``, ``rda`` and
    ``lookahead`` (checked in the handshake, once both have proven the key), the rest is local.

    ``grace_ns`` (50 ms): how long after an interval's end its packets may still be delivered
    by the capture (libpcap buffers up to its timeout; a replayed file needs none but the
    margin costs nothing). ``retention_ns`` (60 s) and ``max_pending`` (1000 intervals, 10 s
    at δ = 10 ms): the retention limits of the module docstring. ``concurrency``: intervals
    the receiver reconciles at once (their exchanges overlap on the connection, so that a
    round-trip time longer than δ does not make the receiver fall behind). Retries wait
    ``retry_initial_ns`` doubling up to ``retry_max_ns``.

    Limits on unauthenticated peers (anyone who can reach the receiver's port): at most
    ``max_unauthenticated_per_address`` (4) connections from one address in their handshake at
    once and ``max_unauthenticated`` (8) in all; a connection beyond either takes the place of
    the oldest handshake of its own address, or else of the address holding the most. Peers
    without the key then cannot hold the places and keep a reconnecting sender out: they would
    have to open connections faster than the sender completes its handshake (one round trip),
    and from more than one address. A handshake must complete within
    ``handshake_timeout_ns`` (5 s); the agent keeps the last ``rejections_kept`` (100) refusals
    with their reasons, and counts them all.

    These are engineering choices of ours; the RDA paper describes no agent protocol.
    """

    intervals: IntervalParams = field(default_factory=IntervalParams)
    rda: RDAParams = field(default_factory=RDAParams)
    lookahead: int = 1
    grace_ns: int = 50_000_000
    retention_ns: int = 60 * NS
    max_pending: int = 1000
    concurrency: int = 8
    retry_initial_ns: int = 50_000_000
    retry_max_ns: int = 2 * NS
    max_unauthenticated: int = 8
    max_unauthenticated_per_address: int = 4
    handshake_timeout_ns: int = 5 * NS
    rejections_kept: int = 100

    def __post_init__(self) -> None:
        counts = (
            self.lookahead,
            self.max_pending,
            self.concurrency,
            self.max_unauthenticated,
            self.max_unauthenticated_per_address,
            self.rejections_kept,
        )
        if min(counts) < 1:
            raise ConfigError(
                "lookahead, max_pending, concurrency, max_unauthenticated (in all and per "
                "address) and rejections_kept must be at least 1"
            )
        waits = (
            self.retention_ns,
            self.retry_initial_ns,
            self.retry_max_ns,
            self.handshake_timeout_ns,
        )
        if self.grace_ns < 0 or min(waits) <= 0:
            raise ConfigError(
                "grace must be non-negative; retention, retries and handshake time positive"
            )
        most = max_buckets_per_bank(self.rda.k)
        if self.rda.buckets_per_bank and self.rda.buckets_per_bank > most:
            raise ConfigError(f"buckets per bank: at most {most} (a synopsis is one frame)")

    def config(self) -> dict[str, Any]:
        """What both agents must agree on (exchanged once both have proven the key)."""
        return {**params_config(self.intervals, self.rda), "lookahead": self.lookahead}


@dataclass(eq=False)
class _Handshake:
    """A connection in its handshake: the peer's address and the stream to close it."""

    address: str
    writer: asyncio.StreamWriter


# Sources: a blocking iterator of (packets or None, capture clock ns) run in a thread.


def _warm_up(params: AgentParams) -> None:
    """Load the compiled kernels (numba) before capturing rather than while packets wait."""
    ids = np.arange(1, 9, dtype=np.uint64)
    cache = IntervalCache(ids, ids.astype(np.int64))
    work = IntervalWork(0, 0, 1, cache, cache, IntervalCache.empty())
    layout = params.rda.layout(params.rda.min_buckets_per_bank)
    syn = Synopsis.build(layout, ids, cache.ts)
    reconcile(syn.copy(), syn, work, 1)
    layout.positions(ids)  # weighing the clean buckets of an interval that did not decode
    cache.sampled(params.rda.sampling_rate, params.rda.seed)
    bottom_k(ids, 4, 0)


@dataclass
class _Pending:
    """A sender interval waiting for its result."""

    cache: IntervalCache
    packets: int
    closed_at: float
    requested: bool = False


class Agent:
    """One of the two agents. ``role`` "sender" connects to ``peer`` (host, port); "receiver"
    listens on it (port 0: any free port, see :attr:`port` after :meth:`listen`). ``key`` is
    the shared HMAC key; ``source`` a :class:`PcapSource` or :class:`LiveSource`;
    ``publish`` receives every published record (one per interval, then a summary).
    """

    def __init__(
        self,
        role: str,
        peer: tuple[str, int],
        key: bytes,
        source: PcapSource | LiveSource,
        params: AgentParams | None = None,
        publish: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        if role not in ("sender", "receiver"):
            raise ConfigError(f"role must be sender or receiver, got {role!r}")
        self.role = Role.SENDER if role == "sender" else Role.RECEIVER
        self.peer = peer
        self.key = key
        self.source = source
        self.params = params or AgentParams()
        self.records: list[dict[str, Any]] = []
        self._publish = publish
        self.book = IntervalBook(self.params.intervals, self.params.rda, self.params.grace_ns)
        self.accounting = PacketAccounting()
        self.rejections = RejectionLog(self.params.rejections_kept)
        self.connections = 0
        self.port: int | None = None
        self._config = self.params.config()
        self._source_done = False
        self._source_error: TacitError | None = None
        self._cut_at: int | None = None
        """After the capture failed, the first interval it may not have covered whole: from it
        on no interval is measured (each is published ``incomplete``)."""
        self._changed: asyncio.Event | None = None
        self._conn: Connection | None = None
        self._handshakes: list[_Handshake] = []  # unauthenticated, oldest first
        self._server: asyncio.base_events.Server | None = None
        self._finished = False
        # sender
        self._pending: dict[int, _Pending] = {}
        self._last_interval = -1
        # receiver
        self._caches: dict[int, IntervalCache] = {}
        self._received: dict[int, int] = {}
        self._forgotten_below = 0
        self._sketches: dict[int, Sketch] = {}
        self._results: dict[int, dict[str, Any]] = {}
        self._tasks: dict[int, asyncio.Task] = {}
        self._sender_end: int | None = None
        self._bye = False
        self._done_at: float | None = None

    # ---------------------------------------------------------------- running

    async def listen(self) -> int:
        """Receiver: start listening (idempotent); the bound port."""
        if self._server is None:
            self._server = await asyncio.start_server(self._accept, self.peer[0], self.peer[1])
        port: int = self._server.sockets[0].getsockname()[1]
        self.port = port
        return port

    def run_sync(self) -> list[dict[str, Any]]:
        """Run until done (:meth:`run` in a new event loop)."""
        return asyncio.run(self.run())

    async def run(self) -> list[dict[str, Any]]:
        """Capture, exchange and publish until the source has ended and every interval is
        published; returns the published records. A source error (e.g. a corrupt capture) is
        raised after the intervals read before it are finished."""
        changed = self._changed = asyncio.Event()
        _warm_up(self.params)
        if self.role == Role.RECEIVER:
            await self.listen()
        tasks = [asyncio.create_task(self._consume(changed))]
        if self.role == Role.SENDER:
            tasks.append(asyncio.create_task(self._connect_loop()))
        try:
            await self._until_done(tasks, changed)
        finally:
            self._finished = True
            self.source.stop()
            for t in [*tasks, *self._tasks.values()]:
                t.cancel()
            await asyncio.gather(*tasks, *self._tasks.values(), return_exceptions=True)
            self._give_up()
            if self._conn is not None:
                self._conn.close()
                with contextlib.suppress(OSError, TimeoutError):
                    await asyncio.wait_for(self._conn.writer.wait_closed(), 1.0)
            if self._server is not None:
                self._server.close()
            self._emit(self._summary())
        if self._source_error is not None:
            raise self._source_error
        return self.records

    async def _until_done(self, tasks: list[asyncio.Task], changed: asyncio.Event) -> None:
        while True:
            self._expire()
            if self._done():
                return
            changed.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(changed.wait(), timeout=0.1)
            for t in [t for t in [*tasks, *self._tasks.values()] if t.done()]:
                t.result()  # a fatal error (configuration mismatch) or a bug: raise it

    def _give_up(self) -> None:
        """Publish every interval still waiting when the agent stops (never silently lost)."""
        for i in sorted(self._pending):
            p = self._pending.pop(i)
            self._emit(self._record(i, INCOMPLETE if p.requested else PEER_MISSING, p.packets))
        self._abandon_sketches()

    def _abandon_sketches(self) -> None:
        """Publish, as incomplete, every interval whose reconciliation the receiver began but
        never finished (the connection closed in the middle of it, and no peer came back)."""
        for i in sorted(self._sketches):
            if i not in self._results:
                self._results[i] = self._record(i, INCOMPLETE, self._sketches[i].size)
                self._emit(self._results[i])

    def _poke(self) -> None:
        if self._changed is not None:
            self._changed.set()

    def _emit(self, record: dict[str, Any]) -> None:
        record = {**record, "role": self.role.name.lower()}
        self.records.append(record)
        if self._publish is not None:
            self._publish(record)

    # ---------------------------------------------------------------- source

    async def _consume(self, changed: asyncio.Event) -> None:  # noqa: C901
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue = asyncio.Queue(maxsize=4)
        done = object()

        def put(item: object) -> None:
            asyncio.run_coroutine_threadsafe(queue.put(item), loop).result()

        def produce() -> None:
            try:
                try:
                    for batch in self.source.batches():
                        if self._finished:
                            return
                        put(batch)
                except TacitError as e:
                    put(e)
                    return
                put(done)
            except (RuntimeError, concurrent.futures.CancelledError):
                return  # the agent stopped (its loop closed) while we were reading

        thread = threading.Thread(target=produce, name="tacit-agent-source", daemon=True)
        thread.start()
        while True:
            while not self.source.live and self._backlog() >= self.params.max_pending:
                changed.clear()
                await changed.wait()
            item = await queue.get()
            if item is done:
                break
            if isinstance(item, TacitError):
                log.error("source failed: %s", item)
                self._source_error = item
                self._cut_at = self.book.closed_below or 0
                break
            if item.read is not None:
                self.accounting = self.accounting + item.read.accounting
                self.book.add(item.read.packets.ident, item.read.packets.time)
            self._closed(self.book.close(item.clock_ns))
        self._closed(self.book.close(None))
        self._source_done = True
        if self.role == Role.SENDER and self._conn is not None:
            self._safe_send(MessageType.END, encode_end(self._last_interval))
            if not self._pending:  # every interval already answered
                self._safe_send(MessageType.BYE, b"")
        self._poke()

    def _backlog(self) -> int:
        return len(self._pending) if self.role == Role.SENDER else len(self._caches)

    def _closed(self, intervals: list[tuple[int, IntervalCache, int]]) -> None:
        now = time.monotonic()
        for i, cache, packets in intervals:
            if self.role == Role.SENDER:
                if not packets:
                    continue
                if self._cut_short(i):
                    self._emit(self._record(i, INCOMPLETE, packets))
                    continue
                self._pending[i] = _Pending(cache, packets, now)
                self._last_interval = max(self._last_interval, i)
                self._announce(i)
            else:
                self._caches[i] = cache
                self._received[i] = packets
        if self.role == Role.RECEIVER:
            self._forget_old_caches()
        if intervals:
            self._poke()

    # ---------------------------------------------------------------- both

    def _done(self) -> bool:
        if not self._source_done:
            return False
        if self.role == Role.SENDER:
            return not self._pending
        if self._sender_end is None:
            return False  # waits for the sender (or for retention, see _expire)
        unresolved = [i for i in self._sketches if i not in self._results]
        return not unresolved and self._bye

    def _expire(self) -> None:
        """Publish what waited longer than the retention limits."""
        now = time.monotonic()
        if self.role == Role.SENDER:
            old = [
                i
                for i, p in self._pending.items()
                if now - p.closed_at > self.params.retention_ns / NS
            ]
            over = sorted(self._pending)[: max(0, len(self._pending) - self.params.max_pending)]
            for i in sorted(set(old) | (set(over) if self.source.live else set())):
                p = self._pending.pop(i)
                self._emit(self._record(i, INCOMPLETE if p.requested else PEER_MISSING, p.packets))
            return
        if not self._source_done:
            return
        if self._done_at is None:
            self._done_at = now
        if now - self._done_at > self.params.retention_ns / NS:
            if self._sender_end is None:  # the sender never finished: say what we saw
                for i, n in sorted(self._received.items()):
                    if n and i not in self._results:
                        self._results[i] = self._record(i, PEER_MISSING, None)
                        self._emit(self._results[i])
            # Reconciliations cut off by a closed connection would otherwise wait forever.
            self._abandon_sketches()
            self._sender_end = self._sender_end if self._sender_end is not None else -1
            self._bye = True

    def _record(self, i: int, status: str, sender_packets: int | None) -> dict[str, Any]:
        iv = self.params.intervals
        return {
            "interval": i,
            "start_ns": iv.start(i),
            "end_ns": iv.start(i + 1),
            "status": status,
            "mean_ns": None,
            "std_ns": None,
            "packets_sender": sender_packets,
            "packets_receiver": self._received.get(i),
            "matched": None,
            "set_difference": None,
        }

    def _summary(self) -> dict[str, Any]:
        return {
            "summary": True,
            "intervals_published": sum(1 for r in self.records if "interval" in r),
            "accounting": self.accounting.as_dict(),
            "packets": self.book.counts,
            "capture": None if self.source.stats is None else asdict(self.source.stats),
            "duplicates": self.book.duplicates,
            "rejected": list(self.rejections.recent),
            "rejected_total": self.rejections.total,
            "connections": self.connections,
            "source_error": None if self._source_error is None else str(self._source_error),
        }

    def _safe_send(self, mtype: MessageType, payload: bytes) -> None:
        conn = self._conn
        if conn is None:
            return
        try:
            conn.send_now(mtype, payload)
        except (ConnectionError, OSError, RuntimeError) as e:
            log.warning("send failed: %s", e)
            self._drop(conn, str(e))

    def _drop(self, conn: Connection, why: str) -> None:
        if self._conn is conn:
            self._conn = None
            for i, t in list(self._tasks.items()):
                t.cancel()
                del self._tasks[i]
        conn.close()
        log.info("connection closed: %s", why)
        self._poke()

    async def _serve(self, conn: Connection) -> None:
        """Read and dispatch frames until the connection ends; a bad frame drops it."""
        self._conn = conn
        self.connections += 1
        self._poke()
        why = "closed by peer"
        try:
            if self.role == Role.SENDER:
                self._resume()
            else:
                self._schedule()
            while True:
                frame = await conn.channel.read(conn.reader)
                await self._dispatch(conn, frame)
        except ProtocolError as e:
            self.rejections.add(str(e))
            self.rejections.warn("refused frame", str(e))
            why = str(e)
        except (asyncio.IncompleteReadError, ConnectionError, OSError) as e:
            why = f"{type(e).__name__}: {e}"
        finally:
            self._drop(conn, why)

    async def _dispatch(self, conn: Connection, frame: Frame) -> None:  # noqa: C901
        ch, t, body = conn.channel, frame.type, frame.payload
        if self.role == Role.SENDER:
            if t == MessageType.SYNOPSIS_REQUEST:
                self._send_synopsis(conn, *decode_interval_count(ch, body))
                await conn.writer.drain()
            elif t == MessageType.TIMESTAMP_REQUEST:
                self._send_timestamps(conn, *decode_ids(ch, body))
            elif t == MessageType.RESULT:
                self._on_result(decode_result(ch, body))
            else:
                raise ch.error(f"a sender does not take {t.name}", frame.sequence)
            return
        if t == MessageType.SKETCH:
            self._on_sketch(decode_sketch(ch, body))
        elif t == MessageType.SYNOPSIS:
            syn = decode_synopsis(ch, body, self.params.rda.k)
            conn.deliver(MessageType.SYNOPSIS, syn.interval, syn)
        elif t == MessageType.TIMESTAMPS:
            i, found, ts = decode_timestamps(ch, body)
            conn.deliver(MessageType.TIMESTAMPS, i, (found, ts))
        elif t == MessageType.EXPIRED:
            conn.expired(decode_end(ch, body))
        elif t == MessageType.END:
            self._sender_end = decode_end(ch, body)
            self._poke()
        elif t == MessageType.BYE:
            self._bye = True
            self._poke()
        else:
            raise ch.error(f"a receiver does not take {t.name}", frame.sequence)

    # ---------------------------------------------------------------- sender

    async def _connect_loop(self) -> None:
        delay = self.params.retry_initial_ns / NS
        host, port = self.peer
        while True:
            try:
                reader, writer = await asyncio.open_connection(host, port)
            except OSError as e:
                log.info("connecting to %s:%s failed (%s); retrying in %.2fs", host, port, e, delay)
                await asyncio.sleep(delay)
                delay = min(2 * delay, self.params.retry_max_ns / NS)
                continue
            channel = Channel(self.key, connector=True, peer=f"{host}:{port}")
            try:
                await asyncio.wait_for(
                    handshake(channel, reader, writer, self.role, self._config),
                    self.params.handshake_timeout_ns / NS,
                )
            except ConfigMismatchError:
                writer.close()
                raise
            except (ProtocolError, asyncio.IncompleteReadError, OSError, TimeoutError) as e:
                self.rejections.add(f"handshake: {e}")
                log.warning("handshake with %s:%s failed: %s", host, port, e)
                writer.close()
                await asyncio.sleep(delay)
                delay = min(2 * delay, self.params.retry_max_ns / NS)
                continue
            delay = self.params.retry_initial_ns / NS
            await self._serve(Connection(channel, reader, writer))
            if self._source_done and not self._pending:
                return
            await asyncio.sleep(self.params.retry_initial_ns / NS)

    def _resume(self) -> None:
        """After (re)connecting: announce every unanswered interval, and the end if reached."""
        for i in sorted(self._pending):
            self._announce(i)
        if self._source_done:
            self._safe_send(MessageType.END, encode_end(self._last_interval))
            if not self._pending:
                self._safe_send(MessageType.BYE, b"")

    def _announce(self, i: int) -> None:
        p = self._pending.get(i)
        if p is None:
            return
        rda = self.params.rda
        sketch = bottom_k(p.cache.ids, rda.minhash_size, rda.seed)
        self._safe_send(MessageType.SKETCH, encode_sketch(i, sketch.size, sketch.values))

    def _send_synopsis(self, conn: Connection, i: int, per_bank: int) -> None:
        p = self._pending.get(i)
        if p is None:
            conn.send_now(MessageType.EXPIRED, encode_end(i))
            return
        if not 1 <= per_bank <= max_buckets_per_bank(self.params.rda.k):
            raise conn.channel.error(f"synopsis of {per_bank} buckets per bank refused")
        p.requested = True
        syn = Synopsis.build(self.params.rda.layout(per_bank), p.cache.ids, p.cache.ts)
        conn.send_now(
            MessageType.SYNOPSIS, encode_synopsis(i, per_bank, syn.idx, syn.ts, syn.count)
        )

    def _send_timestamps(self, conn: Connection, i: int, ids: np.ndarray) -> None:
        p = self._pending.get(i)
        if p is None:
            conn.send_now(MessageType.EXPIRED, encode_end(i))
            return
        found, ts = p.cache.lookup(ids)
        conn.send_now(MessageType.TIMESTAMPS, encode_timestamps(i, found, ts))

    def _on_result(self, record: dict[str, Any]) -> None:
        i = record["interval"]
        if self._pending.pop(i, None) is None:
            return  # already published (a result resent after a reconnection)
        self._emit({k: v for k, v in record.items() if k != "role"})
        if self._source_done and not self._pending:
            self._safe_send(MessageType.BYE, b"")
        self._poke()

    # ---------------------------------------------------------------- receiver

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """A new connection, held to the limits on unauthenticated peers (:class:`AgentParams`);
        the current sender's connection is replaced only by one that has authenticated."""
        addr = writer.get_extra_info("peername")
        peer = f"{addr[0]}:{addr[1]}"
        self._make_room(addr[0])
        mine = _Handshake(addr[0], writer)
        self._handshakes.append(mine)
        channel = Channel(self.key, connector=False, peer=peer)
        try:
            await asyncio.wait_for(
                handshake(channel, reader, writer, self.role, self._config),
                self.params.handshake_timeout_ns / NS,
            )
        except (ProtocolError, ConfigMismatchError) as e:
            self._refuse(writer, f"handshake: {e}")
            return
        except TimeoutError:
            timeout = self.params.handshake_timeout_ns / NS
            self._refuse(writer, f"{peer}: no handshake within {timeout} s")
            return
        except (asyncio.IncompleteReadError, OSError) as e:
            log.info("connection from %s ended in the handshake: %s", peer, e)
            writer.close()
            return
        finally:
            if mine in self._handshakes:  # not evicted
                self._handshakes.remove(mine)
        if self._conn is not None:  # the sender reconnected: the old connection is dead
            self._drop(self._conn, "replaced by a new connection")
        await self._serve(Connection(channel, reader, writer))

    @property
    def unauthenticated(self) -> int:
        """Connections in their handshake now."""
        return len(self._handshakes)

    def _make_room(self, address: str) -> None:
        """Before a new handshake from ``address``: close the oldest handshake of that address
        when it holds its share of places, else, when every place is taken, the oldest of the
        address holding the most."""
        held = Counter(h.address for h in self._handshakes)
        if held[address] < self.params.max_unauthenticated_per_address:
            if len(self._handshakes) < self.params.max_unauthenticated:
                return
            address = max(held, key=held.__getitem__)
        victim = next(h for h in self._handshakes if h.address == address)
        self._handshakes.remove(victim)
        self._refuse(victim.writer, f"{address}: handshake evicted for a newer connection")

    def _refuse(self, writer: asyncio.StreamWriter, reason: str) -> None:
        """Close a connection that has not authenticated (nothing more it sends is read)."""
        self.rejections.add(reason)
        self.rejections.warn("refused connection", reason)
        writer.close()

    def _on_sketch(self, sketch: Sketch) -> None:
        i = sketch.interval
        if i in self._results:
            record = {k: v for k, v in self._results[i].items() if k != "role"}
            self._safe_send(MessageType.RESULT, encode_json(record))
            return
        self._sketches[i] = sketch
        self._schedule()

    def _ready(self, i: int) -> bool:
        closed = self.book.closed_below
        return self._source_done or (closed is not None and closed > i + self.params.lookahead)

    def _schedule(self) -> None:
        if self._conn is None:
            return
        for i in sorted(self._sketches):
            if len(self._tasks) >= self.params.concurrency:
                break
            if i in self._results or i in self._tasks or not self._ready(i):
                continue
            if self._cut_short(i):
                self._resolve(i, self._record(i, INCOMPLETE, self._sketches[i].size))
                continue
            if i < self._forgotten_below:
                self._resolve(i, self._record(i, EXPIRED, self._sketches[i].size))
                continue
            self._tasks[i] = asyncio.create_task(self._exchange(self._conn, i))

    def _cut_short(self, i: int) -> bool:
        """Whether interval ``i`` is at or past where the capture failed (its packets are
        partial or missing, so a measurement would count the rest as lost)."""
        return self._cut_at is not None and i >= self._cut_at

    def _forget_old_caches(self) -> None:
        """Drop the caches no reconciliation can need: below every unresolved announced
        interval and the last result (the sender announces in order); from a live source,
        also beyond the ``max_pending + lookahead + 1`` newest (those intervals expire)."""
        unresolved = [i for i in self._sketches if i not in self._results]
        below = min(unresolved, default=max(self._results, default=-1) + 1)
        drop = {i for i in self._caches if i < below}
        if self.source.live:
            keep = self.params.max_pending + self.params.lookahead + 1
            drop |= set(sorted(self._caches)[: max(0, len(self._caches) - keep)])
        for i in drop:
            del self._caches[i]
            self._forgotten_below = max(self._forgotten_below, i + 1)
        self._schedule()

    def _cache(self, i: int) -> IntervalCache:
        return self._caches.get(i, IntervalCache.empty())

    def _synopsis_size(self, sender: Sketch, mine: IntervalCache) -> int:
        """Buckets per bank: fixed, or late binding from the two sketches."""
        rda = self.params.rda
        if rda.buckets_per_bank:
            return rda.buckets_per_bank
        theirs = BottomK(sender.values, rda.minhash_size, sender.size)
        return late_binding_size(theirs, bottom_k(mine.ids, rda.minhash_size, rda.seed), rda)

    async def _exchange(self, conn: Connection, i: int) -> None:
        try:
            record = await asyncio.wait_for(self._reconcile(conn, i), self.params.retention_ns / NS)
        except (ConnectionError, OSError, asyncio.CancelledError, ProtocolError) as e:
            if self._tasks.get(i) is asyncio.current_task():
                del self._tasks[i]
            if isinstance(e, ProtocolError):  # retried on the next connection
                self.rejections.add(str(e))
                self._drop(conn, str(e))
            return
        except IntervalExpired:
            record = self._record(i, EXPIRED, self._sketches[i].size)
        except TimeoutError:
            record = self._record(i, INCOMPLETE, self._sketches[i].size)
        self._tasks.pop(i, None)
        self._resolve(i, record)

    async def _reconcile(self, conn: Connection, i: int) -> dict[str, Any]:
        sketch, mine = self._sketches[i], self._cache(i)
        rda = self.params.rda
        m = self._synopsis_size(sketch, mine)
        layout = rda.layout(m)
        arrays = await conn.request_synopsis(i, m)
        sender = Synopsis(layout, arrays.idx, arrays.ts, arrays.count, np.empty(0, np.uint32))
        receiver = Synopsis.build(layout, mine.ids, mine.ts)
        later = [self._cache(i + j) for j in range(1, self.params.lookahead + 1)]
        iv = self.params.intervals
        work = IntervalWork(
            i, iv.start(i), iv.start(i + 1), RemoteCache(), mine, IntervalCache.merge(later)
        )
        result = await reconcile_remote(
            sender,
            receiver,
            work,
            rda.max_peel_rounds,
            lambda ids: conn.request_timestamps(i, ids),
        )
        est = result.estimate
        return {
            **self._record(i, COMPLETE if result.decoded else UNDECODABLE, sketch.size),
            "mean_ns": None if est is None else est.mean_ns,
            "std_ns": None if est is None or math.isnan(est.std_ns) else est.std_ns,
            "matched": None if est is None else est.useful_packets,
            "set_difference": result.lost + result.late + result.foreign,
            "lost": result.lost,
            "late": result.late,
            "foreign": result.foreign,
            "buckets_per_bank": m,
            "peel_rounds": result.peel_rounds,
        }

    def _resolve(self, i: int, record: dict[str, Any]) -> None:
        self._results[i] = record
        self._emit(record)
        self._safe_send(MessageType.RESULT, encode_json(record))
        self._forget_old_caches()
        self._poke()
