"""Applications for the simulator (:mod:`tacit.simulate.microservices`): specification, YAML.

An application (:class:`AppSpec`, loaded from YAML by :func:`load_app`) is a set of services.
A service runs ``instances`` replicas; each instance is its own host, with ``workers`` worker
threads fed by one FIFO queue, so the queueing delay of an instance grows with its load. A
worker handles one request from start to end, including the time it waits for its backends
(thread-per-request, blocking calls).

An endpoint's handler draws a service time from a lognormal distribution (``median_ms``,
``sigma``) and spends it in equal compute phases around the steps of its call plan, each phase
lengthened by an exponential jitter of mean ``compute_jitter_us``. A step is one call or a
``parallel`` group of calls issued one after the other, ``launch_us`` apart on average
(exponential; 0, the default: at once), as an asynchronous client sends them in turn, and
awaited together. A call names a ``service``
and an ``endpoint``; ``repeat: N`` makes it N calls in sequence (separated by a compute jitter),
``repeat: [lo, hi]`` a number drawn uniformly from lo to hi for each request (one call per item
of a cart), and ``probability: p`` makes each of them happen with probability p only (skipped
otherwise, as on a cache hit). A ``detached: true`` call is not awaited: the handler goes on at
once and may respond before the call ends, as an asynchronous client library does. A step whose
calls are all skipped or detached costs nothing but its compute phase. Each message (request or
response) crosses the network in ``latency_us`` plus an exponential jitter of mean
``jitter_us``. A caller picks the callee's instance round-robin or at random (``balance``). Call
cycles are rejected: they could deadlock the worker pools.

A service with ``slowdown: {factor: F, from_s: A, until_s: B}`` draws service times F times
as long for the requests it begins from A to B seconds into the load, as under the CPU
contention of a fault injection (Nezha's fault minutes).

A service with ``join: {size: N, calls: [...]}`` is a join: when a request has reached it N
times (from different callers) and the last of those N handlers has finished its own plan, that
handler goes on to make the join's calls before it responds, on behalf of all N (Media
Microservices' compose-review-service).

Root requests arrive as a Poisson process at the ``roots`` endpoints (chosen in proportion to
their weights) and each becomes one trace.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path
from typing import Any

from tacit.config_fields import (
    fields,
    flag,
    get,
    nonempty_list,
    number,
    parse_yaml,
    read_yaml,
    text,
)
from tacit.errors import ConfigError

BALANCE_POLICIES = ("round_robin", "random")
"""How a caller picks an instance of the callee's service."""


@dataclass(frozen=True)
class CallSpec:
    """One backend call of a call plan: ``repeat`` calls in sequence (from ``repeat`` to
    ``repeat_max`` when that is set), each made with ``probability`` (and skipped otherwise),
    awaited unless ``detached``."""

    service: str
    endpoint: str
    probability: float = 1.0
    repeat: int = 1
    repeat_max: int | None = None
    detached: bool = False


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
class JoinSpec:
    """A join: after ``size`` calls of one request have been handled, the last handler makes
    ``steps`` on behalf of all of them."""

    size: int
    steps: tuple[StepSpec, ...]


@dataclass(frozen=True)
class SlowdownSpec:
    """Service times ``factor`` times as long for requests begun from ``from_s`` to
    ``until_s`` seconds into the run."""

    factor: float
    from_s: float
    until_s: float


@dataclass(frozen=True)
class ServiceSpec:
    """A service: ``instances`` replicas (one host each) of ``workers`` threads each, perhaps
    a join, perhaps slowed down for a while."""

    name: str
    endpoints: dict[str, EndpointSpec]
    instances: int = 1
    workers: int = 1
    join: JoinSpec | None = None
    slowdown: SlowdownSpec | None = None


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
    launch_us: float = 0.0
    balance: str = "round_robin"


def load_app(path: str | Path | None = None) -> AppSpec:
    """Load an application from a YAML file; ``None`` loads the packaged default ("shop",
    ``default_app.yaml``)."""
    if path is None:
        source = "tacit.simulate/default_app.yaml"
        text = resources.files("tacit.simulate").joinpath("default_app.yaml").read_text()
        return parse_app(parse_yaml(text, source), source)
    return parse_app(read_yaml(path), str(path))


def scale_out(app: AppSpec, factor: int) -> AppSpec:
    """``app`` with ``factor`` times the instances of every service: it takes ``factor`` times
    the load at the same utilisation, so that a stream of its spans can have the rate of a
    larger deployment without queueing."""
    if factor < 1:
        raise ConfigError(f"scale_out: factor must be a positive integer, got {factor}")
    services = {
        name: replace(s, instances=s.instances * factor) for name, s in app.services.items()
    }
    return replace(app, services=services)


def slow_down(app: AppSpec, service: str, slowdown: SlowdownSpec) -> AppSpec:
    """``app`` with ``service`` slowed down as ``slowdown`` says (an incident to measure
    through)."""
    if service not in app.services:
        raise ConfigError(f"slow_down: no service {service!r} in {app.name}")
    slowed = replace(app.services[service], slowdown=slowdown)
    return replace(app, services={**app.services, service: slowed})


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


_APP_FIELDS = (
    "name",
    "services",
    "roots",
    "network",
    "clock_skew_us",
    "compute_jitter_us",
    "launch_us",
    "balance",
)


def _parse_app(data: Any) -> AppSpec:
    top = fields(data, "top level", _APP_FIELDS)
    raw_services = get(top, "services", "top level")
    if not isinstance(raw_services, Mapping) or not raw_services:
        raise ConfigError("services: expected a non-empty mapping of service names")
    services = {
        str(name): _parse_service(str(name), raw, f"services.{name}")
        for name, raw in raw_services.items()
    }
    roots = tuple(
        _parse_root(raw, f"roots[{i}]")
        for i, raw in enumerate(nonempty_list(get(top, "roots", "top level"), "roots"))
    )
    network = fields(get(top, "network", "top level", {}), "network", ("latency_us", "jitter_us"))
    balance = get(top, "balance", "top level", "round_robin")
    if balance not in BALANCE_POLICIES:
        raise ConfigError(
            f"top level: balance must be one of {', '.join(BALANCE_POLICIES)}, got {balance!r}"
        )
    return AppSpec(
        name=text(top, "name", "top level"),
        services=services,
        roots=roots,
        latency_us=number(network, "latency_us", "network", AppSpec.latency_us),
        jitter_us=number(network, "jitter_us", "network", AppSpec.jitter_us),
        clock_skew_us=number(top, "clock_skew_us", "top level", AppSpec.clock_skew_us),
        compute_jitter_us=number(top, "compute_jitter_us", "top level", AppSpec.compute_jitter_us),
        launch_us=number(top, "launch_us", "top level", AppSpec.launch_us),
        balance=balance,
    )


def _parse_root(raw: Any, where: str) -> RootSpec:
    data = fields(raw, where, ("service", "endpoint", "weight"))
    return RootSpec(
        service=text(data, "service", where),
        endpoint=text(data, "endpoint", where),
        weight=number(data, "weight", where, 1.0, positive=True),
    )


def _parse_service(name: str, raw: Any, where: str) -> ServiceSpec:
    data = fields(raw, where, ("instances", "workers", "endpoints", "join", "slowdown"))
    raw_endpoints = get(data, "endpoints", where)
    if not isinstance(raw_endpoints, Mapping) or not raw_endpoints:
        raise ConfigError(f"{where}: field 'endpoints' must be a non-empty mapping")
    return ServiceSpec(
        name=name,
        endpoints={
            str(ep): _parse_endpoint(str(ep), spec, f"{where}.endpoints[{str(ep)!r}]")
            for ep, spec in raw_endpoints.items()
        },
        instances=number(data, "instances", where, 1, positive=True, integer=True),
        workers=number(data, "workers", where, 1, positive=True, integer=True),
        join=_parse_join(data["join"], f"{where}.join") if "join" in data else None,
        slowdown=(
            _parse_slowdown(data["slowdown"], f"{where}.slowdown") if "slowdown" in data else None
        ),
    )


def _parse_slowdown(raw: Any, where: str) -> SlowdownSpec:
    data = fields(raw, where, ("factor", "from_s", "until_s"))
    spec = SlowdownSpec(
        factor=number(data, "factor", where, positive=True),
        from_s=number(data, "from_s", where),
        until_s=number(data, "until_s", where),
    )
    if not spec.from_s < spec.until_s:
        raise ConfigError(f"{where}: 'from_s' must be before 'until_s'")
    return spec


def _parse_join(raw: Any, where: str) -> JoinSpec:
    data = fields(raw, where, ("size", "calls"))
    size = number(data, "size", where, integer=True)
    if size < 2:
        raise ConfigError(f"{where}: field 'size' must be >= 2, got {size}")
    return JoinSpec(size, _parse_steps(get(data, "calls", where), f"{where}.calls"))


def _parse_endpoint(name: str, raw: Any, where: str) -> EndpointSpec:
    data = fields(raw, where, ("median_ms", "sigma", "calls"))
    raw_steps = get(data, "calls", where, None)
    steps = () if raw_steps is None else _parse_steps(raw_steps, f"{where}.calls")
    return EndpointSpec(
        name=name,
        median_ms=number(data, "median_ms", where, positive=True),
        sigma=number(data, "sigma", where),
        steps=steps,
    )


def _parse_steps(raw: Any, where: str) -> tuple[StepSpec, ...]:
    return tuple(
        _parse_step(step, f"{where}[{i}]") for i, step in enumerate(nonempty_list(raw, where))
    )


def _parse_step(raw: Any, where: str) -> StepSpec:
    if isinstance(raw, Mapping) and "parallel" in raw:
        group = fields(raw, where, ("parallel",))["parallel"]
        calls = nonempty_list(group, f"{where}.parallel")
        return StepSpec(
            tuple(_parse_call(c, f"{where}.parallel[{j}]") for j, c in enumerate(calls)),
            parallel=True,
        )
    return StepSpec((_parse_call(raw, where),))


def _parse_call(raw: Any, where: str) -> CallSpec:
    data = fields(raw, where, ("service", "endpoint", "probability", "repeat", "detached"))
    repeat, repeat_max = data.get("repeat", 1), None
    if isinstance(repeat, list):
        if len(repeat) != 2:
            raise ConfigError(f"{where}: field 'repeat' must be N or [lo, hi], got {repeat!r}")
        span = {"lo": repeat[0], "hi": repeat[1]}
        repeat = number(span, "lo", f"{where}.repeat", integer=True)
        repeat_max = number(span, "hi", f"{where}.repeat", integer=True)
        if repeat_max < repeat:
            raise ConfigError(f"{where}: field 'repeat' needs lo <= hi, got {data['repeat']!r}")
    else:
        repeat = number(data, "repeat", where, 1, positive=True, integer=True)
    return CallSpec(
        service=text(data, "service", where),
        endpoint=text(data, "endpoint", where),
        probability=number(data, "probability", where, 1.0, maximum=1.0),
        repeat=repeat,
        repeat_max=repeat_max,
        detached=flag(data, "detached", where),
    )


def _calls(app: AppSpec) -> Iterator[tuple[str, tuple[str, str], CallSpec]]:
    """Every call of every plan, as (where, (caller service, caller endpoint), call); a join's
    calls count as calls of every endpoint of its service."""
    for service in app.services.values():
        for ep in service.endpoints.values():
            plans = [(f"services.{service.name}.endpoints[{ep.name!r}].calls", ep.steps)]
            if service.join:
                plans.append((f"services.{service.name}.join.calls", service.join.steps))
            for base, steps in plans:
                for i, step in enumerate(steps):
                    for j, call in enumerate(step.calls):
                        where = f"{base}[{i}]" + (f".parallel[{j}]" if step.parallel else "")
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
