"""The thread that reconstructs acknowledged spans online and hands the finished traces to be
stored.

Spans are fed in the order they were acknowledged (:mod:`.online_feed`); whatever a push or a
quiet spell makes final (TraceWeaver §5.3: a trace is final when no later span can change it)
goes to the writer (:mod:`.trace_writer`), which stores it in one transaction together with the
low-water mark, the sequence number below which every span is in a finished trace, from which a
restart resumes, while this thread goes on with the next requests. When
nothing arrives for ``idle_s``, the stream's clock moves on by the wall time that passed since
the last request (:meth:`tacit.reconstruct.online.OnlineTraceWeaver.advance`), so the last traces
before a pause finish too. While the receivers hold senders back (too many spans pending), the
oldest windows are made final without waiting out their lateness, one at a time until a request
of the size refused fits (:meth:`~tacit.reconstruct.online.OnlineTraceWeaver.close_oldest`):
the held spans come after those pending, and the time the senders wait is not the stream's, so
that moving the clock by it instead made the held spans late. Only where no window can close
before its lookahead has come (a bound below a window's spans) does the clock move on by that
time still, so that the senders get in.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable

from tacit.formats.capture_spans import ServiceMap
from tacit.formats.common import Traces
from tacit.formats.otlp_request import RequestSpans
from tacit.reconstruct.callgraph import CallGraph
from tacit.reconstruct.online import OnlineParams, RoundSolver
from tacit.serve.callgraph_learner import LEARN_EVERY_S, CallGraphLearner
from tacit.serve.ingest import Batch, Ingest
from tacit.serve.metrics import ServeMetrics
from tacit.serve.online_feed import Fed, OnlineFeed
from tacit.serve.store import Store
from tacit.serve.store_blocks import BlockWriter
from tacit.serve.trace_writer import Group, TraceWriter, WriterEnded

log = logging.getLogger("tacit.serve")

POLL_S = 0.25
"""How long the thread waits for a request before it looks at the quiet time."""
GROUP_SPANS = 10_000
"""Spans the thread goes on pushing, of requests already queued, before it hands what they
made final on to be stored in one write (a group commit): a write costs much the same whatever
it holds (a DuckDB transaction, a block's files), so behind a backlog one write per request
would cost more than reconstructing it. A request that finds the queue empty is handed on at
once. A count, not a time, so that the cost of a span does not grow where the process gets less
CPU."""
STOP_S = 60.0
"""How long a stop waits for the queue to be reconstructed and stored (the default bound of
pending spans is 20 s of a stream at the target rate, 20,000 spans/s); systemd waits 90 s before
it kills."""
STALL_S = 120.0
"""How long one turn of the thread may take before the service says it is not ready: a round
of the online algorithm over a window of the target rate takes seconds, and one that takes
minutes has stopped keeping up."""


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
        self.idle_s = idle_s
        self.max_future_ns = max_future_s * 1e9
        self.learner = learner
        self._replacement: CallGraph | None = None  # a call graph to map with from now on
        self._replacement_lock = threading.Lock()
        self.learn_every_s = LEARN_EVERY_S
        self._learning = (
            threading.Thread(target=self._learn_loop, name="tacit-learn", daemon=True)
            if learner is not None
            else None
        )
        self.feed = OnlineFeed(callgraph, online, store.state("next_position", 0), services, solve)
        self.feed.context.remember(store.latest_ids(self.feed.context.horizon_ns))
        self._stop_event = threading.Event()
        self.writer = TraceWriter(
            store, ingest, metrics, self._stop_event, forward, retention_s, learner, blocks
        )
        self._callgraph_changed = False  # since the last group handed to the writer
        self._failure: BaseException | None = None
        self.turned = time.monotonic()  # when the thread last began a turn of its loop
        self.stall_s = STALL_S
        self.stop_s = STOP_S
        self._arrived_end = 0.0  # the latest span end when the last request came
        self.lag_s = 0.0
        self.duplicates = 0  # spans received again, counted and not stored
        self._ahead: deque[tuple[Batch, RequestSpans]] = deque()  # requests read ahead (read_ahead)
        self._ahead_spans = 0

    @property
    def failure(self) -> BaseException | None:
        """Why reconstructing, or storing what it finished, stopped (None: it did not)."""
        return self._failure or self.writer.failure

    @property
    def store_problem(self) -> str | None:
        """Why the store cannot write now (None: it can)."""
        return self.writer.store_problem

    @property
    def confidence(self) -> dict[str, list[float]]:
        """Per calling service, [links, the sum of their probabilities] over what is stored."""
        return self.writer.confidence

    @property
    def not_in_callgraph(self) -> int:
        """Calls stored since the call graph in use took effect that it lacks."""
        return self.writer.not_in_callgraph

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
        self.writer.start()
        if self._learning is not None:
            self._learning.start()
        try:
            self._loop()
        except WriterEnded:  # the writer said why
            pass
        except BaseException as e:  # reported by readiness and the log, not lost in a thread
            self._failure = e
            log.exception("reconstruction stopped")
        finally:
            self.writer.end()

    def _loop(self) -> None:
        while True:
            self.turned = time.monotonic()
            with self._replacement_lock:
                graph, self._replacement = self._replacement, None
            if graph is not None:
                self._use(graph)
            taken = self._next(POLL_S)
            if taken is not None:
                self._store(self._push_queued(taken))
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

    def _push_queued(self, taken: tuple[Batch, RequestSpans]) -> Fed:
        """Push the request ``taken`` (with its spans read), and those queued behind it up to
        :data:`GROUP_SPANS` spans: what they made final, to be stored in one write."""
        fed = Fed()
        pushed = 0
        while True:
            batch, read = taken
            ends_by = batch.received_ns + self.max_future_ns
            fed.add(self.feed.push(*read, batch.seq, ends_by))
            self._arrived_end = self.feed.tw.latest_end
            pushed += batch.count
            if pushed >= GROUP_SPANS:
                return fed
            next_one = self._next(0.0)
            if next_one is None:
                return fed
            taken = next_one

    def read_ahead(self) -> bool:
        """Take the next queued request and read its spans now; whether there was one to take
        (at most :data:`GROUP_SPANS` spans are read ahead). For the time a round is solved
        elsewhere (:class:`~tacit.reconstruct.scaleout.DaskRounds` calls it meanwhile, on this
        thread): reading does not touch the algorithm's state, which the round's result
        changes, and the requests read ahead are pushed first, in their order."""
        if self._ahead_spans >= GROUP_SPANS:
            return False
        try:
            batch = self.ingest.queue.get_nowait()
        except queue.Empty:
            return False
        self._ahead.append((batch, batch.read()))
        self._ahead_spans += batch.count
        return True

    def _next(self, timeout_s: float) -> tuple[Batch, RequestSpans] | None:
        """The next request with its spans read: one read ahead, else the next queued
        (waiting up to ``timeout_s``); None when none came."""
        if self._ahead:
            batch, read = self._ahead.popleft()
            self._ahead_spans -= batch.count
            return batch, read
        try:
            batch = (
                self.ingest.queue.get(timeout=timeout_s)
                if timeout_s
                else self.ingest.queue.get_nowait()
            )
        except queue.Empty:
            return None
        return batch, batch.read()

    def _store(self, fed: Fed) -> None:
        """Hand what ``fed`` made final to the writer (:mod:`.trace_writer`), with the state
        that commits it; waits while the writer has a group waiting already."""
        if fed.duplicates:
            self.duplicates += fed.duplicates
            self.ingest.finished(fed.duplicates)
            self.metrics.duplicates.inc(fed.duplicates)
        if not fed.finished and not fed.alone:
            return
        finished = [(f, *self.feed.release(f)) for f in fed.finished]
        state = {
            "low_water": self.feed.low_water(self.ingest.next_seq),
            "next_position": self.feed.tw.pushed,
        }
        group = Group(finished, fed.alone, state, self._callgraph_changed)
        self._callgraph_changed = False
        while not self.writer.offer(group, POLL_S):
            self.turned = time.monotonic()  # waiting for the writer is no stall of this thread

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
        self._callgraph_changed = True
        self.metrics.callgraph_endpoints.set(len(graph.endpoints))
        if self.learner is None:
            self.store.add_callgraph(time.time_ns(), graph.to_yaml())

    def stalled_s(self) -> float | None:
        """How long the thread has been in its current turn, or the writer on its current
        group, when longer than :attr:`stall_s` (a turn that never ends: a hang); else None."""
        busy = max(time.monotonic() - self.turned, self.writer.stalled_s())
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
