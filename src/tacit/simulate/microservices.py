"""A discrete-event simulator of a microservice application under load, with ground truth.

tacit reconstructs request traces from spans that carry no trace context; to measure how well
it does, it needs spans whose true parents are known, produced by an application whose
timing behaves like a real one: latencies vary, parallel calls overlap, busy services queue,
clocks disagree. This module produces such spans.

The model
---------
An application (:class:`AppSpec`, loaded from YAML by :func:`load_app`) is a set of services.
A service runs ``instances`` replicas; each instance is its own host, with ``workers`` worker
threads fed by one FIFO queue, so the queueing delay of an instance grows with its load. A
worker handles one request from start to end, including the time it waits for its backends
(thread-per-request, blocking calls).

An endpoint's handler draws a service time from a lognormal distribution (``median_ms``,
``sigma``) and spends it in equal compute phases around the steps of its call plan, each phase
lengthened by an exponential jitter of mean ``compute_jitter_us``. A step is one call or a
``parallel`` group of calls issued together and awaited together. A call names a ``service``
and an ``endpoint``; ``repeat: N`` makes it N calls in sequence (separated by a compute jitter)
and ``probability: p`` makes each of them happen with probability p only (skipped otherwise, as
on a cache hit). A step whose calls are all skipped costs nothing but its compute phase. Each
message (request or response) crosses the network in ``latency_us`` plus an exponential jitter
of mean ``jitter_us``. A caller picks the callee's instance round-robin or at random
(``balance``). Call cycles are rejected: they could deadlock the worker pools.

Root requests arrive as a Poisson process at the ``roots`` endpoints (chosen in proportion to
their weights) and each becomes one trace.

What is recorded
----------------
Every handled request is a SERVER span at the callee instance, from the request's arrival to
the response (so it includes queueing, as a sidecar proxy records it), with ``peer`` the
caller's service. Every call is a CLIENT span at the caller instance, from sending the request
to receiving the response, with the callee's endpoint and ``peer`` the callee's service.
``parent`` is the ground truth (client span -> the server span that made the call; server span
-> the client span that called it; roots -> -1) and ``link`` pairs the two sides of each RPC.
Timestamps are recorded on the clock of the span's host, which is off by a uniform amount in
``[-clock_skew_us, clock_skew_us]``: client spans nest in their parent server span, server spans
need not nest in their parent client span, as in real data. Each worker of an instance has its
own thread id; a server span carries the worker that handled it and a client span the worker
that made it. As workers block on their calls, a thread-based reconstruction (vPath) that gives
a client span to the open server span of its thread that ends first is exact; without thread
ids (``record_threads=False``) it has nothing to go on. All randomness comes from one seeded
numpy Generator, so a seed fixes the output.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from tacit.errors import ConfigError
from tacit.model.spans import CLIENT, NONE, SERVER, SpanTable, StringPool

BALANCE_POLICIES = ("round_robin", "random")
"""How a caller picks an instance of the callee's service."""

EPOCH_NS = 1_700_000_000 * 10**9
"""Simulated time 0 (2023-11-14T22:13:20Z), so that timestamps look like a tracer's."""


# --------------------------------------------------------------------------------------------
# Specification


@dataclass(frozen=True)
class CallSpec:
    """One backend call of a call plan: ``repeat`` calls in sequence, each made with
    ``probability`` (and skipped otherwise)."""

    service: str
    endpoint: str
    probability: float = 1.0
    repeat: int = 1


@dataclass(frozen=True)
class StepSpec:
    """One step of a call plan: a single call, or a group of calls issued in parallel and
    awaited together."""

    calls: tuple[CallSpec, ...]
    parallel: bool = False


@dataclass(frozen=True)
class EndpointSpec:
    """An endpoint: its lognormal service time (split into compute phases around the steps)
    and its call plan."""

    name: str
    median_ms: float
    sigma: float
    steps: tuple[StepSpec, ...] = ()


@dataclass(frozen=True)
class ServiceSpec:
    """A service: ``instances`` replicas (one host each) of ``workers`` threads each."""

    name: str
    endpoints: dict[str, EndpointSpec]
    instances: int = 1
    workers: int = 1


@dataclass(frozen=True)
class RootSpec:
    """An entry point of user requests, chosen with probability proportional to ``weight``."""

    service: str
    endpoint: str
    weight: float = 1.0


@dataclass(frozen=True)
class AppSpec:
    """A simulated application; see the module docstring for the meaning of each field."""

    name: str
    services: dict[str, ServiceSpec]
    roots: tuple[RootSpec, ...]
    latency_us: float = 100.0
    jitter_us: float = 50.0
    clock_skew_us: float = 300.0
    compute_jitter_us: float = 10.0
    balance: str = "round_robin"


def load_app(path: str | Path | None = None) -> AppSpec:
    """Load an application from a YAML file; ``None`` loads the packaged default ("shop",
    ``default_app.yaml``)."""
    if path is None:
        source = "tacit.simulate/default_app.yaml"
        text = resources.files("tacit.simulate").joinpath("default_app.yaml").read_text()
    else:
        source = str(path)
        try:
            text = Path(path).read_text()
        except OSError as e:
            raise ConfigError(f"{source}: cannot read: {e.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"{source}: invalid YAML: {e}") from None
    return parse_app(data, source)


def parse_app(data: Any, source: str = "<app>") -> AppSpec:
    """Build and validate an :class:`AppSpec` from parsed YAML (nested dicts and lists).

    Raises :class:`ConfigError` naming ``source`` and the offending field for a missing or
    unknown field, a value of the wrong type or out of range, a call to an unknown service or
    endpoint, or a call cycle.
    """
    try:
        app = _parse_app(data)
        _check_references(app)
        _check_acyclic(app)
    except ConfigError as e:
        raise ConfigError(f"{source}: {e}") from None
    return app


_REQUIRED: Any = object()
_APP_FIELDS = (
    "name",
    "services",
    "roots",
    "network",
    "clock_skew_us",
    "compute_jitter_us",
    "balance",
)


def _fields(value: Any, where: str, allowed: tuple[str, ...]) -> Mapping[Any, Any]:
    """``value`` as a mapping with no field outside ``allowed`` (typos must not pass silently)."""
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}: expected a mapping, got {type(value).__name__}")
    unknown = [str(k) for k in value if k not in allowed]
    if unknown:
        raise ConfigError(
            f"{where}: unknown field(s) {', '.join(unknown)} (allowed: {', '.join(allowed)})"
        )
    return value


def _get(data: Mapping[Any, Any], key: str, where: str, default: Any = _REQUIRED) -> Any:
    if key in data:
        return data[key]
    if default is _REQUIRED:
        raise ConfigError(f"{where}: missing field '{key}'")
    return default


def _text(data: Mapping[Any, Any], key: str, where: str) -> str:
    value = _get(data, key, where)
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{where}: field '{key}' must be a non-empty string, got {value!r}")
    return value


def _number(
    data: Mapping[Any, Any],
    key: str,
    where: str,
    default: Any = _REQUIRED,
    *,
    positive: bool = False,
    maximum: float = math.inf,
    integer: bool = False,
) -> Any:
    """A finite number >= 0 (> 0 if ``positive``, <= ``maximum``), an int if ``integer``."""
    value = _get(data, key, where, default)
    kinds = int if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or not math.isfinite(value):
        kind = "an integer" if integer else "a number"
        raise ConfigError(f"{where}: field '{key}' must be {kind}, got {value!r}")
    if value < 0 or (positive and value == 0) or value > maximum:
        bound = "> 0" if positive else ">= 0"
        if maximum < math.inf:
            bound += f" and <= {maximum:g}"
        raise ConfigError(f"{where}: field '{key}' must be {bound}, got {value!r}")
    return value


def _list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list) or not value:
        raise ConfigError(f"{where}: expected a non-empty list, got {value!r}")
    return value


def _parse_app(data: Any) -> AppSpec:
    top = _fields(data, "top level", _APP_FIELDS)
    raw_services = _get(top, "services", "top level")
    if not isinstance(raw_services, Mapping) or not raw_services:
        raise ConfigError("services: expected a non-empty mapping of service names")
    services = {
        str(name): _parse_service(str(name), raw, f"services.{name}")
        for name, raw in raw_services.items()
    }
    roots = tuple(
        _parse_root(raw, f"roots[{i}]")
        for i, raw in enumerate(_list(_get(top, "roots", "top level"), "roots"))
    )
    network = _fields(_get(top, "network", "top level", {}), "network", ("latency_us", "jitter_us"))
    balance = _get(top, "balance", "top level", "round_robin")
    if balance not in BALANCE_POLICIES:
        raise ConfigError(
            f"top level: balance must be one of {', '.join(BALANCE_POLICIES)}, got {balance!r}"
        )
    return AppSpec(
        name=_text(top, "name", "top level"),
        services=services,
        roots=roots,
        latency_us=_number(network, "latency_us", "network", AppSpec.latency_us),
        jitter_us=_number(network, "jitter_us", "network", AppSpec.jitter_us),
        clock_skew_us=_number(top, "clock_skew_us", "top level", AppSpec.clock_skew_us),
        compute_jitter_us=_number(top, "compute_jitter_us", "top level", AppSpec.compute_jitter_us),
        balance=balance,
    )


def _parse_root(raw: Any, where: str) -> RootSpec:
    data = _fields(raw, where, ("service", "endpoint", "weight"))
    return RootSpec(
        service=_text(data, "service", where),
        endpoint=_text(data, "endpoint", where),
        weight=_number(data, "weight", where, 1.0, positive=True),
    )


def _parse_service(name: str, raw: Any, where: str) -> ServiceSpec:
    data = _fields(raw, where, ("instances", "workers", "endpoints"))
    raw_endpoints = _get(data, "endpoints", where)
    if not isinstance(raw_endpoints, Mapping) or not raw_endpoints:
        raise ConfigError(f"{where}: field 'endpoints' must be a non-empty mapping")
    return ServiceSpec(
        name=name,
        endpoints={
            str(ep): _parse_endpoint(str(ep), spec, f"{where}.endpoints[{str(ep)!r}]")
            for ep, spec in raw_endpoints.items()
        },
        instances=_number(data, "instances", where, 1, positive=True, integer=True),
        workers=_number(data, "workers", where, 1, positive=True, integer=True),
    )


def _parse_endpoint(name: str, raw: Any, where: str) -> EndpointSpec:
    data = _fields(raw, where, ("median_ms", "sigma", "calls"))
    raw_steps = _get(data, "calls", where, None)
    steps = (
        ()
        if raw_steps is None
        else tuple(
            _parse_step(step, f"{where}.calls[{i}]")
            for i, step in enumerate(_list(raw_steps, f"{where}.calls"))
        )
    )
    return EndpointSpec(
        name=name,
        median_ms=_number(data, "median_ms", where, positive=True),
        sigma=_number(data, "sigma", where),
        steps=steps,
    )


def _parse_step(raw: Any, where: str) -> StepSpec:
    if isinstance(raw, Mapping) and "parallel" in raw:
        group = _fields(raw, where, ("parallel",))["parallel"]
        calls = _list(group, f"{where}.parallel")
        return StepSpec(
            tuple(_parse_call(c, f"{where}.parallel[{j}]") for j, c in enumerate(calls)),
            parallel=True,
        )
    return StepSpec((_parse_call(raw, where),))


def _parse_call(raw: Any, where: str) -> CallSpec:
    data = _fields(raw, where, ("service", "endpoint", "probability", "repeat"))
    return CallSpec(
        service=_text(data, "service", where),
        endpoint=_text(data, "endpoint", where),
        probability=_number(data, "probability", where, 1.0, maximum=1.0),
        repeat=_number(data, "repeat", where, 1, positive=True, integer=True),
    )


def _calls(app: AppSpec) -> Iterator[tuple[str, tuple[str, str], CallSpec]]:
    """Every call of every plan, as (where, (caller service, caller endpoint), call)."""
    for service in app.services.values():
        for ep in service.endpoints.values():
            for i, step in enumerate(ep.steps):
                for j, call in enumerate(step.calls):
                    where = f"services.{service.name}.endpoints[{ep.name!r}].calls[{i}]"
                    if step.parallel:
                        where += f".parallel[{j}]"
                    yield where, (service.name, ep.name), call


def _check_target(app: AppSpec, service: str, endpoint: str, where: str) -> None:
    spec = app.services.get(service)
    if spec is None:
        raise ConfigError(
            f"{where}: unknown service '{service}' (known: {', '.join(app.services)})"
        )
    if endpoint not in spec.endpoints:
        raise ConfigError(
            f"{where}: service '{service}' has no endpoint '{endpoint}' "
            f"(known: {', '.join(spec.endpoints)})"
        )


def _check_references(app: AppSpec) -> None:
    for i, root in enumerate(app.roots):
        _check_target(app, root.service, root.endpoint, f"roots[{i}]")
    for where, _, call in _calls(app):
        _check_target(app, call.service, call.endpoint, where)


def _check_acyclic(app: AppSpec) -> None:
    edges: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for _, caller, call in _calls(app):
        edges.setdefault(caller, []).append((call.service, call.endpoint))
    done: set[tuple[str, str]] = set()

    def visit(node: tuple[str, str], path: list[tuple[str, str]]) -> None:
        if node in path:
            cycle = [*path[path.index(node) :], node]
            raise ConfigError("call cycle: " + " -> ".join(f"{s}.{e}" for s, e in cycle))
        if node not in done:
            for callee in edges.get(node, ()):
                visit(callee, [*path, node])
            done.add(node)

    for node in edges:
        visit(node, [])


# --------------------------------------------------------------------------------------------
# Simulation


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
    """Endless variates from ``draw``, fetched in blocks: a scalar numpy draw costs ~1 µs."""
    while True:
        yield from draw(block).tolist()


class _Service:
    __slots__ = ("code", "instances", "turn")

    def __init__(self, code: int) -> None:
        self.code = code
        self.instances: list[_Instance] = []
        self.turn = 0


class _Instance:
    __slots__ = ("code", "free", "queue", "service")

    def __init__(self, code: int, service: _Service, threads: range) -> None:
        self.code = code
        self.service = service
        self.free = list(reversed(threads))  # idle worker threads; pop() takes the lowest id
        self.queue: deque[_Job] = deque()


class _Endpoint:
    __slots__ = ("code", "median", "service", "sigma", "steps")

    def __init__(self, code: int, service: _Service, spec: EndpointSpec) -> None:
        self.code = code
        self.service = service
        self.median = spec.median_ms * 1e6
        self.sigma = spec.sigma
        # Per step, its calls as (target, probability, repeat); filled once all exist.
        self.steps: list[list[tuple[_Endpoint, float, int]]] = []


class _Job:
    """One request being handled: a server span in progress."""

    __slots__ = (
        "caller",
        "endpoint",
        "instance",
        "pending",
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
        self.step = 0  # next step of the plan
        self.pending = 0  # branches of the current step still running


class _Branch:
    """One call of a step (with its repetitions) in progress."""

    __slots__ = ("client", "job", "left", "target")

    def __init__(self, job: _Job, target: _Endpoint, left: int) -> None:
        self.job = job
        self.target = target
        self.left = left  # calls still to make, the current one included
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
            service = self.services[name] = _Service(code(name))
            for i in range(spec.instances):
                threads = range(first_thread, first_thread + spec.workers)
                first_thread += spec.workers
                service.instances.append(_Instance(code(f"{name}-{i}"), service, threads))
            for ep in spec.endpoints.values():
                endpoints[name, ep.name] = _Endpoint(code(ep.name), service, ep)
        for (name, ep_name), ep in endpoints.items():
            ep.steps = [
                [(endpoints[c.service, c.endpoint], c.probability, c.repeat) for c in step.calls]
                for step in app.services[name].endpoints[ep_name].steps
            ]
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
        job.share = service_time / (len(ep.steps) + 1)
        self._compute(t, job)

    def _compute(self, t: float, job: _Job) -> None:
        self._at(t + job.share + self.compute_jitter * next(self.exp), self._advance, job)

    def _advance(self, t: float, job: _Job) -> None:
        """A compute phase ended: issue the next step's calls, or respond when none is left."""
        steps = job.endpoint.steps
        if job.step == len(steps):
            self._finish(t, job)
            return
        calls = steps[job.step]
        job.step += 1
        pending = 0
        for target, probability, repeat in calls:
            made = repeat
            if probability < 1.0:
                made = sum(next(self.uniform) < probability for _ in range(repeat))
            if made:
                pending += 1
                self._call(t, _Branch(job, target, made))
        job.pending = pending
        if not pending:
            self._compute(t, job)

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
            span_id=[self.strings.code(f"{x:016x}") for x in ids],
            record=np.arange(1, n + 1),
            sources=[source],
        )
