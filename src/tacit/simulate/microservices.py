"""A discrete-event simulator of a microservice application under load, with ground truth.

tacit reconstructs request traces from spans that carry no trace context; to measure how well
it does, it needs spans whose true parents are known, produced by an application whose
timing behaves like a real one: latencies vary, parallel calls overlap, busy services queue,
clocks disagree. This module produces such spans for an application described by
:mod:`tacit.simulate.app_spec` (its docstring describes the model).

What is recorded
----------------
Every handled request is a SERVER span at the callee instance, from the request's arrival to
the response (so it includes queueing, as a sidecar proxy records it), with ``peer`` the
caller's service. Every call is a CLIENT span at the caller instance, from sending the request
to receiving the response, with the callee's endpoint and ``peer`` the callee's service.
``parent`` is the ground truth (client span -> the server span that made the call; server span
-> the client span that called it; roots -> -1) and ``link`` pairs the two sides of each RPC.
Timestamps are recorded on the clock of the span's host, which is off by a uniform amount in
``[-clock_skew_us, clock_skew_us]``: client spans nest in their parent server span (but for
detached calls), server spans need not nest in their parent client span, as in real data. Each
worker of an instance has its own thread id; a server span carries the worker that handled it
and a client span the worker that made it. As workers block on their calls, a thread-based
reconstruction (vPath) that gives a client span to the open server span of its thread that ends
first is exact; without thread ids (``record_threads=False``) it has nothing to go on. All
randomness comes from one seeded numpy Generator, so a seed fixes the output.
:mod:`tacit.simulate.exports` turns the spans into the shapes real exports have.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from tacit.errors import ConfigError
from tacit.model.spans import CLIENT, NONE, SERVER, SpanTable, StringPool
from tacit.simulate.app_spec import AppSpec, CallSpec, EndpointSpec, StepSpec

EPOCH_NS = 1_700_000_000 * 10**9
"""Simulated time 0 (2023-11-14T22:13:20Z), so that timestamps look like a tracer's."""


def simulate(
    app: AppSpec,
    rate: float,
    *,
    n_requests: int | None = None,
    duration_s: float | None = None,
    seed: int = 0,
    record_threads: bool = True,
) -> SpanTable:
    """Simulate ``app`` under Poisson arrivals of ``rate`` root requests per second.

    The load stops after ``n_requests`` requests or ``duration_s`` seconds (whichever comes
    first if both are given); every admitted request runs to completion. Returns the spans of
    all requests (one trace each) sorted by recorded start time, with ground-truth ``parent``
    and ``link``, 32-hex trace ids and 16-hex span ids. ``record_threads=False`` leaves the
    thread column empty (-1).
    """
    if not (math.isfinite(rate) and rate > 0):
        raise ConfigError(f"simulate: rate must be a positive number of requests/s, got {rate}")
    if n_requests is None and duration_s is None:
        raise ConfigError("simulate: give n_requests or duration_s (or both)")
    if n_requests is not None and n_requests < 0:
        raise ConfigError(f"simulate: n_requests must be >= 0, got {n_requests}")
    if duration_s is not None and not (math.isfinite(duration_s) and duration_s > 0):
        raise ConfigError(f"simulate: duration_s must be a positive number, got {duration_s}")
    rng = np.random.default_rng(seed)
    if n_requests is None:
        assert duration_s is not None  # checked above
        count = rng.poisson(rate * duration_s)
        arrivals = np.sort(rng.uniform(0.0, duration_s, count))
    else:
        arrivals = np.cumsum(rng.exponential(1.0 / rate, n_requests))
        if duration_s is not None:
            arrivals = arrivals[arrivals < duration_s]
    run = _Simulation(app, rng)
    run.run(arrivals * 1e9)
    return run.table(f"simulate:{app.name}", record_threads)


def load_sweep(
    app: AppSpec, rates: list[float], n_requests: int, seed: int = 0
) -> dict[float, SpanTable]:
    """Simulate ``n_requests`` requests of ``app`` at each rate, with the same seed for all (so
    that the runs differ by the load, not by the luck of the draw)."""
    return {rate: simulate(app, rate, n_requests=n_requests, seed=seed) for rate in rates}


def _stream(draw: Callable[[int], np.ndarray], block: int = 4096) -> Iterator[float]:
    """Endless variates from ``draw``, fetched in blocks: a scalar numpy draw costs far more
    than its share of a block."""
    while True:
        yield from draw(block).tolist()


class _Service:
    __slots__ = ("arrived", "code", "instances", "join_size", "join_steps", "slowdown", "turn")

    def __init__(self, code: int, slowdown: tuple[float, float, float] | None) -> None:
        self.code = code
        self.slowdown = slowdown  # (factor, from, until): ns of simulated time
        self.instances: list[_Instance] = []
        self.turn = 0
        self.join_size = 0  # a join's size (0: not a join)
        self.join_steps: list[list[_Call]] = []
        self.arrived: dict[int, int] = {}  # per trace, its handlers of a join done so far


class _Instance:
    __slots__ = ("code", "free", "queue", "service")

    def __init__(self, code: int, service: _Service, threads: range) -> None:
        self.code = code
        self.service = service
        self.free = list(reversed(threads))  # idle worker threads; pop() takes the lowest id
        self.queue: deque[_Job] = deque()


class _Call:
    """A call of a plan, compiled: its target endpoint and how it is made."""

    __slots__ = ("detached", "probability", "repeat", "repeat_max", "target")

    def __init__(self, target: _Endpoint, spec: CallSpec) -> None:
        self.target = target
        self.probability = spec.probability
        self.repeat = spec.repeat
        self.repeat_max = spec.repeat_max
        self.detached = spec.detached


class _Endpoint:
    __slots__ = ("code", "median", "service", "sigma", "steps")

    def __init__(self, code: int, service: _Service, spec: EndpointSpec) -> None:
        self.code = code
        self.service = service
        self.median = spec.median_ms * 1e6
        self.sigma = spec.sigma
        self.steps: list[list[_Call]] = []  # filled once every endpoint exists


class _Job:
    """One request being handled: a server span in progress."""

    __slots__ = (
        "caller",
        "endpoint",
        "instance",
        "joined",
        "pending",
        "plan",
        "share",
        "span",
        "step",
        "thread",
        "trace",
    )

    def __init__(
        self,
        span: int,
        trace: int,
        instance: _Instance,
        endpoint: _Endpoint,
        caller: _Branch | None,
    ) -> None:
        self.span = span
        self.trace = trace
        self.instance = instance
        self.endpoint = endpoint
        self.caller = caller
        self.thread = NONE
        self.share = 0.0  # duration of each compute phase, without jitter (ns)
        self.plan = endpoint.steps
        self.step = 0  # next step of the plan
        self.pending = 0  # awaited branches of the current step still running
        self.joined = False  # counted at its service's join


class _Branch:
    """One call of a step (with its repetitions) in progress."""

    __slots__ = ("client", "detached", "job", "left", "target")

    def __init__(self, job: _Job, target: _Endpoint, left: int, detached: bool) -> None:
        self.job = job
        self.target = target
        self.left = left  # calls still to make, the current one included
        self.detached = detached  # not awaited by its job
        self.client = NONE  # row of the current call's client span


_FIXED = ("service", "instance", "endpoint", "kind", "peer", "trace", "parent")
"""The span columns known when a span is created, in the order :meth:`_Simulation._span`
takes them."""


class _Simulation:
    """The event loop and the span columns it fills (times in float ns, true time)."""

    def __init__(self, app: AppSpec, rng: np.random.Generator) -> None:
        self.rng = rng
        self.exp = _stream(rng.standard_exponential)
        self.normal = _stream(rng.standard_normal)
        self.uniform = _stream(rng.random)
        self.latency = app.latency_us * 1e3
        self.jitter = app.jitter_us * 1e3
        self.compute_jitter = app.compute_jitter_us * 1e3
        self.launch = app.launch_us * 1e3
        self.random_balance = app.balance == "random"
        self.strings = StringPool()
        self.events: list[tuple[float, int, Callable[[float, Any], None], Any]] = []
        self.seq = itertools.count()
        # Span columns: the fields fixed at creation as one tuple per span, the others apart.
        self.fixed: list[tuple[int, int, int, int, int, int, int]] = []
        self.start: list[float] = []
        self.end: list[float] = []
        self.thread: list[int] = []
        self.link: list[int] = []
        self.root_of: list[int] = []  # per root request, its index in ``roots``
        self.trace_codes: list[int] = []  # per root request, its trace id's string code
        self._compile(app)
        self.clock_offset = np.zeros(len(self.strings))
        codes = [inst.code for s in self.services.values() for inst in s.instances]
        skew = app.clock_skew_us * 1e3
        self.clock_offset[codes] = rng.uniform(-skew, skew, len(codes))

    def _compile(self, app: AppSpec) -> None:
        code = self.strings.code
        first_thread = 1
        self.services: dict[str, _Service] = {}
        endpoints: dict[tuple[str, str], _Endpoint] = {}
        for name, spec in app.services.items():
            slow = spec.slowdown
            service = self.services[name] = _Service(
                code(name),
                None if slow is None else (slow.factor, slow.from_s * 1e9, slow.until_s * 1e9),
            )
            for i in range(spec.instances):
                threads = range(first_thread, first_thread + spec.workers)
                first_thread += spec.workers
                service.instances.append(_Instance(code(f"{name}-{i}"), service, threads))
            for ep_spec in spec.endpoints.values():
                endpoints[name, ep_spec.name] = _Endpoint(code(ep_spec.name), service, ep_spec)

        def plan(steps: tuple[StepSpec, ...]) -> list[list[_Call]]:
            return [[_Call(endpoints[c.service, c.endpoint], c) for c in s.calls] for s in steps]

        for (name, ep_name), ep in endpoints.items():
            ep.steps = plan(app.services[name].endpoints[ep_name].steps)
        for name, spec in app.services.items():
            if spec.join:
                self.services[name].join_size = spec.join.size
                self.services[name].join_steps = plan(spec.join.steps)
        self.roots = [endpoints[r.service, r.endpoint] for r in app.roots]
        weights = np.array([r.weight for r in app.roots])
        self.root_p = weights / weights.sum()

    # -- helpers

    def _at(self, t: float, action: Callable[[float, Any], None], arg: Any) -> None:
        heapq.heappush(self.events, (t, next(self.seq), action, arg))

    def _net(self) -> float:
        return self.latency + self.jitter * next(self.exp)

    def _pick(self, service: _Service) -> _Instance:
        instances = service.instances
        if self.random_balance:
            return instances[int(next(self.uniform) * len(instances))]
        service.turn += 1
        return instances[service.turn % len(instances)]

    def _span(self, fixed: tuple[int, int, int, int, int, int, int], t: float, thread: int) -> int:
        """Add a span (``fixed`` in :data:`_FIXED` order) starting at ``t``; its row."""
        self.fixed.append(fixed)
        self.start.append(t)
        self.end.append(t)
        self.thread.append(thread)
        self.link.append(NONE)
        return len(self.start) - 1

    # -- events: each takes (time, argument)

    def run(self, arrivals: np.ndarray) -> None:
        """Admit one root request at each arrival time (ns) and run until all complete."""
        n = len(arrivals)
        self.root_of = self.rng.choice(len(self.roots), size=n, p=self.root_p).tolist()
        ids = self.rng.integers(0, 2**64, size=(n, 2), dtype=np.uint64).tolist()
        self.trace_codes = [self.strings.code(f"{a:016x}{b:016x}") for a, b in ids]
        # Arrivals are sorted, so the list is already a heap.
        self.events = [(t, k, self._enter, k) for k, t in enumerate(arrivals.tolist())]
        self.seq = itertools.count(n)
        events = self.events
        pop = heapq.heappop
        while events:
            t, _, action, arg = pop(events)
            action(t, arg)

    def _enter(self, t: float, k: int) -> None:
        """Root request ``k`` arrives from a user."""
        ep = self.roots[self.root_of[k]]
        inst = self._pick(ep.service)
        trace = self.trace_codes[k]
        span = self._span((ep.service.code, inst.code, ep.code, SERVER, NONE, trace, NONE), t, NONE)
        self._arrive(t, _Job(span, trace, inst, ep, None))

    def _arrive(self, t: float, job: _Job) -> None:
        """A request reaches its instance: a free worker takes it, or it waits in the queue."""
        self.start[job.span] = t
        inst = job.instance
        if inst.free:
            self._begin(t, job, inst.free.pop())
        else:
            inst.queue.append(job)

    def _begin(self, t: float, job: _Job, thread: int) -> None:
        job.thread = thread
        self.thread[job.span] = thread
        ep = job.endpoint
        service_time = ep.median * math.exp(ep.sigma * next(self.normal))
        slow = ep.service.slowdown
        if slow is not None and slow[1] <= t < slow[2]:
            service_time *= slow[0]
        job.share = service_time / (len(ep.steps) + 1)
        self._compute(t, job)

    def _compute(self, t: float, job: _Job) -> None:
        self._at(t + job.share + self.compute_jitter * next(self.exp), self._advance, job)

    def _advance(self, t: float, job: _Job) -> None:
        """A compute phase ended: issue the next step's calls, or respond when none is left
        (at a join, the last of a request's handlers first makes the join's calls)."""
        if job.step == len(job.plan) and not self._joins(job):
            self._finish(t, job)
            return
        calls = job.plan[job.step]
        job.step += 1
        pending = 0
        launch = t  # when the step's next call leaves
        for call in calls:
            made = call.repeat
            if call.repeat_max is not None:
                made += int(next(self.uniform) * (call.repeat_max - call.repeat + 1))
            if call.probability < 1.0:
                made = sum(next(self.uniform) < call.probability for _ in range(made))
            if made:
                pending += not call.detached
                branch = _Branch(job, call.target, made, call.detached)
                if launch > t:
                    self._at(launch, self._call, branch)
                else:
                    self._call(t, branch)
                if self.launch:
                    launch += self.launch * next(self.exp)
        job.pending = pending
        if not pending:
            self._compute(t, job)

    def _joins(self, job: _Job) -> bool:
        """Whether ``job``, done with its plan, is the last of its request's handlers at a
        join: then the join's calls become the rest of its plan."""
        service = job.endpoint.service
        if not service.join_size or job.joined:
            return False
        job.joined = True
        done = service.arrived.get(job.trace, 0) + 1
        if done < service.join_size:
            service.arrived[job.trace] = done
            return False
        service.arrived.pop(job.trace, None)
        job.plan = job.plan + service.join_steps
        return bool(service.join_steps)

    def _call(self, t: float, branch: _Branch) -> None:
        """Send one request of ``branch``: a client span here, a server span at the callee."""
        job, target = branch.job, branch.target
        caller = job.instance
        callee = self._pick(target.service)
        trace = job.trace
        client = self._span(
            (
                caller.service.code,
                caller.code,
                target.code,
                CLIENT,
                target.service.code,
                trace,
                job.span,
            ),
            t,
            job.thread,
        )
        server = self._span(
            (
                target.service.code,
                callee.code,
                target.code,
                SERVER,
                caller.service.code,
                trace,
                client,
            ),
            t,
            NONE,
        )
        self.link[client] = server
        self.link[server] = client
        branch.client = client
        self._at(t + self._net(), self._arrive, _Job(server, trace, callee, target, branch))

    def _finish(self, t: float, job: _Job) -> None:
        """The handler is done: free the worker (or hand it the next queued request) and
        send the response."""
        self.end[job.span] = t
        inst = job.instance
        if inst.queue:
            self._begin(t, inst.queue.popleft(), job.thread)
        else:
            inst.free.append(job.thread)
        if job.caller is not None:
            self._at(t + self._net(), self._respond, job.caller)

    def _respond(self, t: float, branch: _Branch) -> None:
        """A response reaches the caller: make the next repetition, or end the branch."""
        self.end[branch.client] = t
        branch.left -= 1
        if branch.left:
            self._at(t + self.compute_jitter * next(self.exp), self._call, branch)
            return
        if branch.detached:
            return
        job = branch.job
        job.pending -= 1
        if not job.pending:
            self._compute(t, job)

    # -- output

    def table(self, source: str, record_threads: bool) -> SpanTable:
        """The recorded spans: host clocks applied, sorted by start, ids assigned."""
        n = len(self.start)
        fixed = dict(zip(_FIXED, np.array(self.fixed, dtype=np.int64).reshape(n, 7).T, strict=True))
        offset = self.clock_offset[fixed["instance"]]

        def recorded(times: list[float]) -> np.ndarray:
            return np.rint(np.array(times) + offset).astype(np.int64) + EPOCH_NS

        start = recorded(self.start)
        order = np.argsort(start, kind="stable")
        row_of = np.empty(n + 1, dtype=np.int64)
        row_of[order] = np.arange(n)
        row_of[n] = NONE  # NONE (-1) indexes this slot and stays NONE
        ids = self.rng.integers(0, 2**64, size=n, dtype=np.uint64).tolist()
        thread = np.array(self.thread, dtype=np.int64) if record_threads else np.full(n, NONE)
        fixed["parent"] = row_of[fixed["parent"]]
        return SpanTable(
            self.strings,
            **{k: v[order] for k, v in fixed.items()},
            start=start[order],
            end=recorded(self.end)[order],
            thread=thread[order],
            link=row_of[np.array(self.link, dtype=np.int64)][order],
            span_id=np.array([self.strings.code(f"{x:016x}") for x in ids], dtype=np.int64),
            record=np.arange(1, n + 1),
            sources=[source],
        )
