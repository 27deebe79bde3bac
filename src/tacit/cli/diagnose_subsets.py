"""``tacit diagnose`` commands: tail and abtest."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from tacit.cli.common import (
    SEED,
    JsonOpt,
    bounded,
    console,
    flag,
    out,
    parse_duration,
    print_json,
    working,
)
from tacit.errors import ConfigError

TracesArg = Annotated[list[Path], typer.Argument(help="Trace files or directories.")]
BlindOpt = Annotated[
    bool, flag("--blind", help="Blind the traces and reconstruct them with traceweaver.")
]
SeedOpt = Annotated[int, typer.Option(callback=SEED, help="Seed of the random choice of requests.")]


MAX_INJECTED_NS = 86_400 * 10**9
"""The longest delay --inject adds: a day (longer ones would only push times past int64)."""


def _parse_injection(spec: str) -> tuple[str, int]:
    service, colon, ms = spec.partition(":")
    if not service or not colon:
        raise ConfigError(f"--inject takes SERVICE:MS (e.g. reservation:40), not {spec!r}")
    try:
        ns = parse_duration(f"{ms}ms")
    except ConfigError as e:
        raise ConfigError(f"--inject {spec!r}: {e}") from None
    if ns > MAX_INJECTED_NS:
        raise ConfigError(f"--inject {spec!r}: at most a day (86400000 ms)")
    return service, ns


def _profile_table(title: str, prof) -> Table:
    t = Table(title=title)
    for col in ("service", "median all", "median slow", "ratio", "mean all", "mean slow", "share"):
        t.add_column(col, justify="left" if col == "service" else "right")
    for name, v in prof.profile.items():
        t.add_row(
            name + (" *" if name in prof.culprits else ""),
            f"{v['median_all']:.2f}",
            f"{v['median_slow']:.2f}",
            f"{v['median_ratio']:.1f}×",
            f"{v['mean_all']:.2f}",
            f"{v['mean_slow']:.2f}",
            f"{100 * v['share']:.0f}%",
        )
    return t


def register(app: typer.Typer) -> None:
    """Add this module's commands to the ``diagnose`` group."""
    app.command()(tail)
    app.command()(abtest)


def tail(
    traces: TracesArg,
    percent: Annotated[
        float,
        typer.Option(
            callback=bounded(0, 100, lo_open=True), help="The slowest share of requests, in %."
        ),
    ] = 2.0,
    blind: BlindOpt = False,
    inject: Annotated[
        list[str] | None,
        typer.Option(help="SERVICE:MS — delay that service's server spans (repeatable)."),
    ] = None,
    inject_share: Annotated[
        float,
        typer.Option(
            callback=bounded(0, 1, lo_open=True, hi_open=True),
            help="Share of requests each --inject delays.",
        ),
    ] = 0.1,
    seed: SeedOpt = 0,
    json_out: JsonOpt = False,
) -> None:
    """The slowest requests' per-service latency against all traffic, and the culprits
    (TraceWeaver §6.4.1); beside it the per-span view (each service's slowest spans)."""
    from tacit.diagnosis.inject import delay_spans, pick_requests
    from tacit.diagnosis.tail import (
        TailParams,
        blind_and_reconstruct,
        span_tail_profile,
        tail_profile,
    )
    from tacit.formats import observe

    params = TailParams(percent=percent)
    with working("profiling the tail", not json_out):
        observed, _ = observe(list(traces))
        spans = observed.spans
        for i, spec in enumerate(inject or []):
            service, ns = _parse_injection(spec)
            picked = pick_requests(spans, service, inject_share, seed + i)
            spans = delay_spans(spans, picked, ns)
        per_span = span_tail_profile(spans, params)
        if blind:
            rebuilt, rec = blind_and_reconstruct(spans)
            prof = tail_profile(rebuilt, params, rec)
        else:
            prof = tail_profile(spans, params)
    doc = {**prof.as_dict(), "blind": blind, "per_span": per_span.as_dict()}
    doc["accounting"] = {**observed.accounting, **prof.accounting}
    if json_out:
        print_json(doc)
        return
    source = "reconstructed" if blind else "ground-truth"
    out.print(
        _profile_table(
            f"slowest {percent:g}% of {prof.requests} requests ({source} traces), self "
            f"latency ms; e2e {prof.e2e['mean_slow_ms']:.1f} vs {prof.e2e['mean_all_ms']:.1f}",
            prof,
        )
    )
    out.print(f"culprits: {', '.join(prof.culprits) or 'none'}")
    out.print(_profile_table(f"per-span view: each service's slowest {percent:g}%", per_span))
    out.print(f"per-span view blames: {', '.join(per_span.culprits) or 'none'}")


def abtest(
    traces: TracesArg,
    service: Annotated[str, typer.Option(help="The service with versions A and B.")],
    share: Annotated[
        float,
        typer.Option(
            callback=bounded(0, 1, lo_open=True, hi_open=True),
            help="Share of its calls routed to B.",
        ),
    ] = 0.02,
    effect: Annotated[
        float,
        typer.Option(
            callback=bounded(-1, lo_open=True), help="B's latency change (-0.05: 5% faster)."
        ),
    ] = -0.05,
    basis: Annotated[
        str,
        typer.Option(
            help="What --effect is a share of: 'self' (B's own self time), 'e2e' (the "
            "end-to-end latency of each request B serves; B's self time is cut by it) or "
            "'e2e-mean' (the expected end-to-end latency of B's requests; B's self time is "
            "scaled by one calibrated factor)."
        ),
    ] = "self",
    blind: BlindOpt = False,
    seed: SeedOpt = 0,
    json_out: JsonOpt = False,
) -> None:
    """Route a share of a service's calls to a simulated version B and test the end-to-end
    latency of B's requests against A's (Welch t-test; TraceWeaver §6.4.2)."""
    from tacit.diagnosis.abtest import ab_periods, ab_spans, ab_traces, route_to_b
    from tacit.diagnosis.tail import blind_and_reconstruct
    from tacit.formats import observe

    observed, _ = observe(list(traces))
    routed, rows = route_to_b(observed.spans, service, share, effect, seed, basis)
    with_traces = routed
    if blind:
        with_traces, _ = blind_and_reconstruct(routed)
    results = [
        ab_traces(with_traces, service),
        ab_spans(routed, service),
        ab_periods(observed.spans, service, share, effect, seed, basis),
    ]
    doc = {
        "service": service,
        "share": share,
        "effect": effect,
        "basis": basis,
        "blind": blind,
        "routed_to_b": len(rows),
        "tests": [r.as_dict() for r in results],
        "accounting": observed.accounting,
    }
    if json_out:
        print_json(doc)
        return
    t = Table(
        title=f"A/B on {service}: {len(rows)} calls to B ({share:.0%}), effect {effect:+.0%}"
        f" of {'self time' if basis == 'self' else 'end-to-end latency'}"
        f"{' (expected)' if basis == 'e2e-mean' else ''}"
    )
    columns = ("comparison", "n A", "n B", "geo. mean A ms", "geo. mean B ms", "effect", "p")
    for col in columns:
        t.add_column(col, justify="left" if col == "comparison" else "right")
    for r in results:
        t.add_row(
            r.method,
            str(r.n_a),
            str(r.n_b),
            f"{r.geomean_a_ms:.2f}",
            f"{r.geomean_b_ms:.2f}",
            f"{100 * r.effect:+.1f}%",
            f"{r.p:.3g}",
        )
    out.print(t)
    console.print(
        "effect: B's geometric mean over A's (Welch's t-test on log latency); "
        "arithmetic means are in --json"
    )
