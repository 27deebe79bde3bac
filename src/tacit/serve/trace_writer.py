"""The thread that stores finished traces, behind the reconstruction.

The reconstruction (:mod:`.reconstructor`) hands each group of finished traces, with the state
that commits them (the low-water mark, the next position), to this thread and goes on with the
next requests while the group is written: its rows (:mod:`.finished_rows`, built in a process
of their own where the service has a second core: :mod:`.group_rows`), one transaction of
the store, the block moved into place, the counts. Writing is a large part of what a span
costs; behind the reconstruction, it no longer holds the stream back, and where the rounds are
solved on a Dask cluster it is done while the reconstruction waits for a round. At most one
group waits to be written (beyond, the reconstruction waits for this thread), and groups are
written in the order they were handed, so the low-water mark the store commits only rises, and
a span counts as pending (:class:`.ingest.Ingest`) until it is written.

A write the store cannot make (a full disk: :func:`~.store.cannot_write`) is tried again,
readiness saying why meanwhile, until it can. Retention and the copies of the latency series
for query replicas are done here too, between writes, so that the tables the retention deletes
from are written by one thread.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from tacit.formats.common import Traces
from tacit.reconstruct.online import Finished
from tacit.reconstruct.traceweaver import NOT_IN_CALLGRAPH
from tacit.serve.callgraph_learner import CallGraphLearner
from tacit.serve.finished_rows import Rows, TakenIds, kept_ids
from tacit.serve.group_rows import (
    Built,
    FinishedBatch,
    Request,
    RowBuilder,
    RowProcess,
    RowProcessEnded,
    row_process,
)
from tacit.serve.ingest import Ingest
from tacit.serve.metrics import ServeMetrics, reason_label
from tacit.serve.online_feed import Alone, Given
from tacit.serve.store import Store, cannot_write
from tacit.serve.store_blocks import LATENCY_EXPORT_S, BlockWriter
from tacit.serve.store_latency import LATENCY_TABLES
from tacit.serve.trace_metrics import TraceMetrics

log = logging.getLogger("tacit.serve")

POLL_S = 0.25
"""How long the thread waits for a group before it looks at what is due between writes."""
RETRY_S = 0.5
"""The first wait before a write the store could not make is tried again; it doubles up to
:data:`MAX_RETRY_S`."""
MAX_RETRY_S = 8.0
BEHIND_S = 1.0
"""How long the oldest request waiting to be reconstructed has waited when the rows of finished
traces are built in the child process (:mod:`.group_rows`) rather than by the writer."""
MAX_EXPIRY_PERIOD_S = 60.0
"""Retention is applied every tenth of the retention time, and at least this often."""
EXPIRY_SPANS = 50_000
"""Spans one retention transaction deletes at most: a pass over more goes on between the
writes of finished traces instead of holding them up, since a delete, and the checkpoint of the
file its commit may set off, holds the writes back for a time that grows with its size."""


@dataclass
class Group:
    """Finished traces to store in one write, and the state that commits them."""

    finished: list[tuple[Finished, np.ndarray, Given]]
    """Each batch of traces with its spans' sequence numbers and the ids their senders gave."""
    alone: list[Alone]
    state: dict[str, int]
    callgraph_changed: bool = False
    """Whether these are the first traces mapped with a call graph that replaced another."""


class WriterEnded(Exception):
    """The writer ended (failed, or stopped while the store could not write): what it had not
    stored is read again from the journal at the next start."""


class TraceWriter(threading.Thread):
    """Writes the groups :meth:`offer` hands it, in order, until :meth:`end`."""

    def __init__(
        self,
        store: Store,
        ingest: Ingest,
        metrics: ServeMetrics,
        stopping: threading.Event,
        forward: Callable[[list[Traces]], None] | None = None,
        retention_s: float = 0.0,
        learner: CallGraphLearner | None = None,
        blocks: BlockWriter | None = None,
    ) -> None:
        super().__init__(name="tacit-store", daemon=True)
        self.store = store
        self.ingest = ingest
        self.metrics = metrics
        self.trace_metrics = TraceMetrics(metrics.registry)
        self.forward = forward
        self.retention_s = retention_s
        self.learner = learner
        self.blocks = blocks
        self._stopping = stopping
        self._groups: queue.Queue[Group | None] = queue.Queue(maxsize=1)
        self._next_expiry = time.monotonic()
        self._next_export = time.monotonic()
        self.seed = store.state("seed", 0) or _new_seed(store)
        self.low_water = store.state("low_water", 0)
        """The low-water mark the store holds (what retention may delete below)."""
        self.failure: BaseException | None = None
        self.store_problem: str | None = None  # why the store cannot write now
        self.busy_since: float | None = None  # when the group being written was taken
        self.not_in_callgraph = 0  # calls since the call graph in use took effect that it lacks
        # per calling service, [links, the sum of their probabilities] over everything stored,
        # kept up to date here rather than summed again from the store after every write
        self.confidence: dict[str, list[float]] = {}
        self._load_confidence()
        self._trace_ids = TakenIds()
        self._here = RowBuilder(self.seed, forward is not None)
        self.child: RowProcess | None = None
        """The process that builds the rows of groups while the service is behind
        (:func:`.group_rows.row_process`), once running where there is one."""

    def offer(self, group: Group | None, timeout_s: float) -> bool:
        """Queue ``group`` to be written after those before it (None: end once they are);
        whether it was taken within ``timeout_s`` (a group waits to be written already).
        Raises :class:`WriterEnded` once the thread has ended."""
        if not self.is_alive():
            raise WriterEnded
        try:
            self._groups.put(group, timeout=timeout_s)
        except queue.Full:
            return False
        return True

    def end(self) -> None:
        """Write what was handed, then end (at once if the thread has ended already)."""
        try:
            while not self.offer(None, POLL_S):
                pass
        except WriterEnded:
            return
        self.join()

    def run(self) -> None:
        # started beside the writing, which builds the rows itself until the child is ready
        starting = threading.Thread(target=self._start_child, name="tacit-rows-start")
        starting.start()
        try:
            while True:
                self._between_writes()
                try:
                    group = self._groups.get(timeout=POLL_S)
                except queue.Empty:
                    continue
                if group is None:
                    return
                self.busy_since = time.monotonic()
                self._store(group)
                self.busy_since = None
        except WriterEnded:
            log.error(
                "stopped while the store cannot write; what it had not stored is read again "
                "from the journal at the next start"
            )
        except BaseException as e:  # reported by readiness and the log, not lost in a thread
            self.failure = e
            log.exception("storing finished traces stopped")
        finally:
            starting.join()
            if self.child is not None:
                self.child.close()

    def _start_child(self) -> None:
        """Start the process that builds rows while the service is behind, where there is a
        second core (:func:`.group_rows.row_process`)."""
        self.child = row_process(self.seed, self.forward is not None)

    def _between_writes(self) -> None:
        if self.retention_s and time.monotonic() >= self._next_expiry:
            self._expire()
        if self.blocks is not None and time.monotonic() >= self._next_export:
            self._export_latency()

    def _store(self, group: Group) -> None:
        finished = []
        for f, seq, given in group.finished:
            if self.learner is not None:
                self.learner.explain(f.unmapped)
            finished.append((f, seq, given, kept_ids(f, given, self._trace_ids)))
        built = self._built(finished, group.alone, time.time_ns())
        for requests in built.requests:
            self._red(requests)
        for traces in built.traces:
            self.trace_metrics.add(traces)
        self._write(built.tables, group.state)
        self.low_water = group.state["low_water"]
        rows = built.rows
        self.ingest.finished(built.span_count - rows.drawn)
        self._count(rows, built.trace_count, group.callgraph_changed)
        if self.forward is not None and rows.forward:
            self.forward(rows.forward)

    def _built(self, finished: list[FinishedBatch], alone: list[Alone], now_ns: int) -> Built:
        """The rows of a group: built in the child process while the service is behind
        (:meth:`_behind`), else here (:mod:`.group_rows`). A child that has ended is logged,
        and the rows built here from then on."""
        if self.child is not None and self._behind():
            try:
                return self.child.build(finished, alone, now_ns)
            except RowProcessEnded as e:
                log.error("%s: rows are built on the writer's thread from now on", e)
                self.child.close()
                self.child = None
        return self._here.build(finished, alone, now_ns)

    def _behind(self) -> bool:
        """Whether the oldest request waiting to be reconstructed came more than
        :data:`BEHIND_S` ago: the service has fallen behind, not only taken a burst, which
        it clears sooner than the child's cost in CPU would pay back."""
        try:
            oldest = self.ingest.queue.queue[0]  # a look, without taking it
        except IndexError:
            return False
        return time.time_ns() - oldest.received_ns > BEHIND_S * 1e9

    def _count(self, rows: Rows, traces: int, callgraph_changed: bool) -> None:
        m = self.metrics
        m.traces.inc(traces)
        m.mapped.inc(rows.mapped)
        m.given.inc(rows.given)
        m.drawn.inc(rows.drawn)
        for why, n in rows.unmapped.items():
            m.unmapped.labels(reason_label(why)).inc(n)
        if callgraph_changed:
            self.not_in_callgraph = 0
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
                if self._stopping.is_set():
                    raise WriterEnded from e
                if self.store_problem is None:
                    log.error("the store cannot write; trying again until it can: %s", e)
                self.store_problem = f"the store cannot write: {e}"
                self.busy_since = time.monotonic()  # waiting for room is no stall
                self._stopping.wait(wait_s)
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

    def _expire(self) -> None:
        """Delete what was taken in more than the retention time ago (between writes of
        finished traces, at most :data:`EXPIRY_SPANS` spans at a time, the next part after the
        next write), and count it. A pass that fails (a write of the Pirate or RDA threads
        conflicting with its deletions) is logged and tried again next time."""
        import duckdb

        before_ns = time.time_ns() - round(self.retention_s * 1e9)
        done = True
        try:
            expired = self.store.expire(before_ns, self.low_water, EXPIRY_SPANS)
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

    def _red(self, requests: list[Request]) -> None:
        """Rate, errors and duration of the finished incoming requests, per service (one
        look-up of each labelled child per service, not per span)."""
        m = self.metrics
        for svc, seconds, errors in requests:
            m.requests.labels(svc).inc(len(seconds))
            if errors:
                m.errors.labels(svc).inc(errors)
            m.duration.observe((svc,), seconds)

    def stalled_s(self) -> float:
        """How long the group being written has taken so far (0 when none is)."""
        since = self.busy_since
        return 0.0 if since is None else time.monotonic() - since


def _new_seed(store: Store) -> int:
    """The seed of this database's trace ids, drawn once and kept (ids never repeat across
    restarts: positions continue, and the seed stays)."""
    from tacit.reconstruct.assemble import new_seed

    seed = new_seed() >> 1 or 1  # a positive BIGINT
    store.set_state("seed", seed)
    return seed
