"""The thread that reconstructs acknowledged spans online and stores the finished traces.

Spans are fed in the order they were acknowledged (:mod:`.online_feed`); whatever a push or a
quiet spell makes final (TraceWeaver §5.3: a trace is final when no later span can change it)
is written to the store in one transaction together with the low-water mark, the sequence
number below which every span is in a finished trace, from which a restart resumes. When
nothing arrives for ``idle_s``, the stream's clock moves on by the wall time that passed since
the last request (:meth:`tacit.reconstruct.online.OnlineTraceWeaver.advance`), so the last traces
before a pause finish too. While the receivers hold senders back (too many spans pending), the
oldest windows are made final without waiting out their lateness, one at a time until a request
of the size refused fits (:meth:`~tacit.reconstruct.online.OnlineTraceWeaver.close_oldest`):
the held spans come after those pending, and the time the senders wait is not the stream's, so
that moving the clock by it instead made the held spans late. Only where no window can close
before its lookahead has come (a bound below a window's spans) does the clock move on by that
time still, so that the senders get in. With a retention time, the thread
also deletes what is older than that (:meth:`tacit.serve.store.Store.expire`), a bounded part
at a time.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from tacit.formats.capture_spans import ServiceMap
from tacit.formats.common import Traces
from tacit.model.span_details import STATUS_ERROR
from tacit.model.spans import SERVER
from tacit.reconstruct.callgraph import CallGraph
from tacit.reconstruct.online import Finished, OnlineParams, RoundSolver
from tacit.reconstruct.traceweaver import NOT_IN_CALLGRAPH
from tacit.serve.callgraph_learner import LEARN_EVERY_S, CallGraphLearner
from tacit.serve.finished_rows import Rows, TakenIds
from tacit.serve.ingest import Batch, Ingest
from tacit.serve.metrics import ServeMetrics, reason_label
from tacit.serve.online_feed import Fed, OnlineFeed
from tacit.serve.store import Store, cannot_write
from tacit.serve.store_blocks import LATENCY_EXPORT_S, BlockWriter
from tacit.serve.store_latency import LATENCY_TABLES
from tacit.serve.trace_metrics import TraceMetrics

log = logging.getLogger("tacit.serve")

POLL_S = 0.25
"""How long the thread waits for a request before it looks at the quiet time."""
RETRY_S = 0.5
"""The first wait before a write the store could not make is tried again; it doubles up to
:data:`MAX_RETRY_S`."""
MAX_RETRY_S = 8.0
GROUP_SPANS = 10_000
"""Spans the thread goes on pushing, of requests already queued, before it stores what they
made final in one write (a group commit): a write costs much the same whatever it holds (a
DuckDB transaction, a block's files), so behind a backlog one write per request would cost more
than reconstructing it. A request that finds the queue empty is stored at once. A count, not a
time, so that the cost of a span does not grow where the process gets less CPU."""
STOP_S = 60.0
"""How long a stop waits for the queue to be reconstructed and stored (the default bound of
pending spans is 20 s of a stream at the target rate, 20,000 spans/s); systemd waits 90 s before
it kills."""
STALL_S = 120.0
"""How long one turn of the thread may take before the service says it is not ready: a round
of the online algorithm over a window of the target rate takes seconds, and one that takes
minutes has stopped keeping up."""
MAX_EXPIRY_PERIOD_S = 60.0
"""Retention is applied every tenth of the retention time, and at least this often."""
EXPIRY_SPANS = 50_000
"""Spans one retention transaction deletes at most: a pass over more goes on between the
writes of finished traces instead of holding them up, since a delete, and the checkpoint of the
file its commit may set off, holds the writes back for a time that grows with its size."""


class Reconstructor(threading.Thread):
    """Feeds :attr:`ingest`'s queue to online TraceWeaver until :meth:`stop`."""

    def __init__(
        self,
        store: Store,
        ingest: Ingest,
        metrics: ServeMetrics,
        callgraph: CallGraph,
        online: OnlineParams,
        idle_s: float,
        max_future_s: float,
        forward: Callable[[list[Traces]], None] | None = None,
        retention_s: float = 0.0,
        services: ServiceMap | None = None,
        learner: CallGraphLearner | None = None,
        solve: RoundSolver | None = None,
        blocks: BlockWriter | None = None,
    ) -> None:
        super().__init__(name="tacit-reconstruct", daemon=True)
        self.store = store
        self.ingest = ingest
        self.metrics = metrics
        self.trace_metrics = TraceMetrics(metrics.registry)
        self.forward = forward
        self.idle_s = idle_s
        self.max_future_ns = max_future_s * 1e9
        self.retention_s = retention_s
        self._next_expiry = time.monotonic()
        self.learner = learner
        self.blocks = blocks
        self._next_export = time.monotonic()
        self._replacement: CallGraph | None = None  # a call graph to map with from now on
        self._replacement_lock = threading.Lock()
        self.learn_every_s = LEARN_EVERY_S
        self._learning = (
            threading.Thread(target=self._learn_loop, name="tacit-learn", daemon=True)
            if learner is not None
            else None
        )
        self.seed = store.state("seed", 0) or _new_seed(store)
        self.feed = OnlineFeed(callgraph, online, store.state("next_position", 0), services, solve)
        self.feed.context.remember(store.latest_ids(self.feed.context.horizon_ns))
        self._stop_event = threading.Event()
        self.failure: BaseException | None = None
        self.store_problem: str | None = None  # why the store cannot write now
        self.turned = time.monotonic()  # when the thread last began a turn of its loop
        self.stall_s = STALL_S
        self.stop_s = STOP_S
        self._arrived_end = 0.0  # the latest span end when the last request came
        self.lag_s = 0.0
        self.duplicates = 0  # spans received again, counted and not stored
        self.not_in_callgraph = 0  # calls since the call graph in use took effect that it lacks
        self._trace_ids = TakenIds()
        # per calling service, [links, the sum of their probabilities] over everything stored,
        # kept up to date here rather than summed again from the store after every write
        self.confidence: dict[str, list[float]] = {}
        self._load_confidence()

    def stop(self) -> bool:
        """Finish what is queued, store it, and end; pending spans stay for the restart.
        Whether it ended within :data:`STOP_S`: a thread caught in a turn that does not end
        is left to end with the process, and what it had not stored is in the journal, read
        again at the next start."""
        self._stop_event.set()
        self.join(self.stop_s)
        if self._learning is not None and self._learning.is_alive():
            self._learning.join(self.stop_s)
        return not self.is_alive()

    def run(self) -> None:
        if self._learning is not None:
            self._learning.start()
        try:
            self._loop()
        except _Unstored:
            log.error(
                "stopped while the store cannot write; what it had not stored is read again "
                "from the journal at the next start"
            )
        except BaseException as e:  # reported by readiness and the log, not lost in a thread
            self.failure = e
            log.exception("reconstruction stopped")

    def _loop(self) -> None:  # noqa: C901
        q = self.ingest.queue
        while True:
            self.turned = time.monotonic()
            if self.retention_s and time.monotonic() >= self._next_expiry:
                self._expire()
            if self.blocks is not None and time.monotonic() >= self._next_export:
                self._export_latency()
            with self._replacement_lock:
                graph, self._replacement = self._replacement, None
            if graph is not None:
                self._use(graph)
            try:
                batch: Batch | None = q.get(timeout=POLL_S)
            except queue.Empty:
                batch = None
            if batch is not None:
                self._store(self._push_queued(batch))
                continue
            if self._stop_event.is_set():
                return
            since = self.ingest.last_request
            if self.ingest.holding_back:
                rounds = self.feed.tw.rounds
                fed = Fed(self.feed.close_oldest())
                if self.feed.tw.rounds > rounds:
                    self._store(fed)
                    continue
                # No window can close before its lookahead has come (the bound is below a
                # window's spans): the clock moves on from the last admitted request, as in
                # a quiet stream, rather than the senders being refused for ever.
                since = self.ingest.last_arrival
            quiet_s = time.monotonic() - since
            if quiet_s >= self.idle_s:
                self._store(Fed(self.feed.advance(self._arrived_end + quiet_s * 1e9)))
            self._lag()

    def _push_queued(self, batch: Batch) -> Fed:
        """Push ``batch``, and those queued behind it up to :data:`GROUP_SPANS` spans: what
        they made final, to be stored in one write."""
        fed = Fed()
        pushed = 0
        while True:
            ends_by = batch.received_ns + self.max_future_ns
            fed.add(self.feed.push(*batch.read(), batch.seq, ends_by))
            self._arrived_end = self.feed.tw.latest_end
            pushed += batch.count
            if pushed >= GROUP_SPANS:
                return fed
            try:
                batch = self.ingest.queue.get_nowait()
            except queue.Empty:
                return fed

    def _write(self, tables: Any, state: dict[str, int]) -> None:
        """Store ``tables`` and ``state``, trying again while the store cannot write (a full
        disk: :func:`~.store.cannot_write`), which readiness reports meanwhile. Spans keep
        coming until the journal cannot take them either (503) or too many wait (429), and
        nothing acknowledged is lost; once there is room, the service goes on where it was."""
        wait_s = RETRY_S
        staged = False
        while True:
            try:
                if self.blocks is not None and not staged:
                    state = {**state, **self.blocks.stage(tables)}
                    staged = True
                self.store.write_finished(tables, state)
            except Exception as e:
                if not cannot_write(e):
                    raise
                if self._stop_event.is_set():
                    raise _Unstored from e
                if self.store_problem is None:
                    log.error("the store cannot write; trying again until it can: %s", e)
                self.store_problem = f"the store cannot write: {e}"
                self.turned = time.monotonic()  # waiting for room is no stall
                self._stop_event.wait(wait_s)
                wait_s = min(2 * wait_s, MAX_RETRY_S)
                continue
            if self.store_problem is not None:
                log.warning("the store writes again")
                self.store_problem = None
            self._publish()
            return

    def _publish(self) -> None:
        """Move the block of the round just stored into place; one that cannot be is moved in
        at the next start (:class:`.store_blocks.BlockWriter`)."""
        if self.blocks is None:
            return
        try:
            merge = self.blocks.publish()
        except OSError as e:
            log.error("a block of stored traces could not be moved into place: %s", e)
            return
        self.metrics.blocks_written.inc()
        if merge is not None:
            self.metrics.block_merges.labels(merge).inc()

    def _export_latency(self) -> None:
        """Copy the latency series to the blocks if they changed since the last copy
        (:meth:`.store_blocks.BlockWriter.export_latency`); one that fails is logged and
        tried again."""
        assert self.blocks is not None
        self._next_export = time.monotonic() + LATENCY_EXPORT_S
        changed = self.store.latency_changed
        if not changed.is_set():
            return
        changed.clear()
        try:
            self.blocks.export_latency(self.store)
        except OSError as e:
            changed.set()
            log.error("the latency series could not be copied to the blocks: %s", e)

    def _store(self, fed: Fed) -> None:  # noqa: C901
        if fed.duplicates:
            self.duplicates += fed.duplicates
            self.ingest.finished(fed.duplicates)
            self.metrics.duplicates.inc(fed.duplicates)
        if not fed.finished and not fed.alone:
            return
        now = time.time_ns()
        rows = Rows()
        for f in fed.finished:
            if self.learner is not None:
                self.learner.explain(f.unmapped)
            seq, given = self.feed.release(f)
            stored = rows.add_finished(f, seq, given, self.seed, now, self._trace_ids)
            self._red(f)
            self.trace_metrics.observe(stored)
        for a in fed.alone:
            rows.add_alone(a)
        state = {
            "low_water": self.feed.low_water(self.ingest.next_seq),
            "next_position": self.feed.tw.pushed,
        }
        self._write(rows.tables(now), state)
        self.ingest.finished(rows.span_count - rows.drawn)
        m = self.metrics
        m.traces.inc(rows.trace_count)
        m.mapped.inc(rows.mapped)
        m.given.inc(rows.given)
        m.drawn.inc(rows.drawn)
        for why, n in rows.unmapped.items():
            m.unmapped.labels(reason_label(why)).inc(n)
        self.not_in_callgraph += rows.unmapped.get(NOT_IN_CALLGRAPH, 0)
        for fate, n in rows.fates.items():
            m.fates.labels(fate).inc(n)
        m.checked.labels("agree").inc(rows.agree)
        m.checked.labels("disagree").inc(rows.disagree)
        for svc, (links, p) in rows.confidence.items():
            total = self.confidence.setdefault(svc, [0, 0.0])
            total[0] += links
            total[1] += p
            self._confidence_gauge(svc)
        for svc, ps in rows.link_probability.items():
            m.link_probability.observe((svc,), ps)
        for svc, ps in rows.trace_probability.items():
            m.trace_probability.observe((svc,), ps)
        if self.forward is not None and rows.forward:
            self.forward(rows.forward)

    def _learn_loop(self) -> None:
        """Learn the call graph from what is stored at once, then every
        :attr:`learn_every_s`, and map with it from the next round where it changed
        (:mod:`.callgraph_learner`), until :meth:`stop`. On a thread of its own: a pass reads
        back and reconstructs up to :data:`~.callgraph_learner.MAX_SPANS` spans, seconds of
        work that in a turn of the reconstruction would hold every request back. A pass that
        fails is logged and made again at the next time."""
        assert self.learner is not None
        due = 0.0
        while not self._stop_event.is_set():
            if time.monotonic() >= due:
                due = time.monotonic() + self.learn_every_s
                try:
                    graph = self.learner.learn()
                except Exception:
                    log.exception("the call graph could not be learned; trying again later")
                else:
                    if graph is not None:
                        log.info("call graph learned: %d endpoints", len(graph.endpoints))
                        self.replace_callgraph(graph)
            self._stop_event.wait(POLL_S)

    def replace_callgraph(self, graph: CallGraph) -> None:
        """Map with ``graph`` from the next round on (from any thread), and keep it in the
        store with the time it took effect."""
        with self._replacement_lock:
            self._replacement = graph

    def _use(self, graph: CallGraph) -> None:
        self.feed.tw.set_callgraph(graph)
        self.not_in_callgraph = 0
        self.metrics.callgraph_endpoints.set(len(graph.endpoints))
        if self.learner is None:
            self.store.add_callgraph(time.time_ns(), graph.to_yaml())

    def _expire(self) -> None:
        """Delete what was taken in more than the retention time ago (between this thread's
        writes of finished traces, at most :data:`EXPIRY_SPANS` spans at a time, the next part
        after the next request), and count it. A pass that fails (a write of the Pirate or
        RDA threads conflicting with its deletions) is logged and tried again next time."""
        import duckdb

        before_ns = time.time_ns() - round(self.retention_s * 1e9)
        low_water = self.feed.low_water(self.ingest.next_seq)
        done = True
        try:
            expired = self.store.expire(before_ns, low_water, EXPIRY_SPANS)
        except duckdb.Error as e:
            log.warning("retention pass failed, to be tried again: %s", e)
        else:
            done = expired.done
            for table, n in expired.rows.items():
                self.metrics.expired.labels(table).inc(n)
            if any(expired.rows.get(table) for table in LATENCY_TABLES):
                self.store.latency_changed.set()
        if self.blocks is not None:
            try:
                self.metrics.expired.labels("blocks").inc(self.blocks.expire(before_ns))
            except OSError as e:
                log.warning("blocks could not be expired, to be tried again: %s", e)
        self._load_confidence()
        wait = 0.0 if not done else min(self.retention_s / 10, MAX_EXPIRY_PERIOD_S)
        self._next_expiry = time.monotonic() + wait

    def _load_confidence(self) -> None:
        """Per-service confidence over what the store holds, and its gauges (a service with
        nothing stored any more loses its gauge)."""
        before = set(self.confidence)
        self.confidence = {svc: list(v) for svc, v in self.store.confidence(0).items()}
        for svc in self.confidence:
            self._confidence_gauge(svc)
        for svc in before - set(self.confidence):
            self.metrics.confidence.remove(svc)

    def _confidence_gauge(self, svc: str) -> None:
        n, p = self.confidence[svc]
        self.metrics.confidence.labels(svc).set(p / n)

    def _red(self, f: Finished) -> None:
        """Rate, errors and duration of the finished incoming requests, per service."""
        spans = f.spans
        s = spans.strings
        server = spans.kind == SERVER
        seconds = ((spans.end[server] - spans.start[server]) / 1e9).tolist()
        by_service: dict[int, list[tuple[int, float]]] = {}
        for r, code, sec in zip(
            server.nonzero()[0].tolist(), spans.service[server].tolist(), seconds, strict=True
        ):
            by_service.setdefault(code, []).append((r, sec))
        m = self.metrics  # one look-up of each labelled child per service, not per span
        for code, mine in by_service.items():
            svc = s.values[code]  # every span has a service
            m.requests.labels(svc).inc(len(mine))
            errors = sum(
                (d := spans.detail(r)) is not None and d.status == STATUS_ERROR for r, _ in mine
            )
            if errors:
                m.errors.labels(svc).inc(errors)
            m.duration.observe((svc,), [sec for _, sec in mine])

    def stalled_s(self) -> float | None:
        """How long the thread has been in its current turn, when longer than
        :attr:`stall_s` (a turn that never ends: a hang); else None."""
        busy = time.monotonic() - self.turned
        return busy if busy > self.stall_s else None

    def _lag(self) -> None:
        """How far the stream's clock is behind the wall clock while spans wait for it; 0 when
        none waits (an idle stream is not behind)."""
        latest = self.feed.tw.latest_end
        if not self.feed.pending:
            self.lag_s = 0.0
        elif latest > 0:
            self.lag_s = max(0.0, (time.time_ns() - latest) / 1e9)
        self.metrics.lag.set(self.lag_s)


def _new_seed(store: Store) -> int:
    """The seed of this database's trace ids, drawn once and kept (ids never repeat across
    restarts: positions continue, and the seed stays)."""
    from tacit.reconstruct.assemble import new_seed

    seed = new_seed() >> 1 or 1  # a positive BIGINT
    store.set_state("seed", seed)
    return seed


class _Unstored(Exception):
    """Asked to stop while the store cannot write: what was not stored stays in the journal."""
