"""Benchmark: ``tacit serve`` as roles, each a process (``tacit experiment scale-out``): what
each role costs per span, what the shared log carries, and the processes a given rate needs.

Runs the shop app's simulated stream through a NATS JetStream server, a Dask scheduler and two
workers, two ingest replicas and the reconstruct role, without faults; then once with an ingest
replica, a worker and the reconstruct role each killed mid-stream. Each run also gives the same
requests to one process (``role: all``) and compares the stores. Every run reconstructs with
the service's own windows, lookahead and lateness, as operators run it.

CPU is each process's user and system time from when all were ready to when the stream was
reconstructed. A role's cost per span is marginal: the CPU of a stream of ``2 × --seconds``
less that of one of ``--seconds``, over the spans between, so that what does not grow with
the stream (start-up, loading and compiling on first use, the last windows' wait) is left
out; the median over ``--runs`` pairs. The log carries each request's body: its bytes per
span. The projection is cores per role for 100,000 and 1,000,000 spans/s at that cost. The
reconstruct role's cost falls under load, as it stores what several queued requests finished
in one write: the stream, at the offered rate, has nothing queued, so its cost is also given
as the one-core ceiling run's below. The role is one process per application today, so the
rate about one core of it takes is its ceiling (docs/scale-out.md).

Last, the check of the model (``run_ceiling``): the stream put in the log first, then one
reconstruct process (its rounds in its own process, writing blocks as the streaming runs'
does) started to take it all, on one core
(``taskset -c 0``), on half and a quarter of it (a cgroup CPU quota, as ``--cpus`` or a
Kubernetes CPU limit sets) and on both cores; the marginal rate it reaches between two
backlogs (:data:`CEILING_LONGER` times the streams' lengths), against the rate its own cost
per span, and the one-core run's, predict for the CPU given; and the cores it used (the rate
times the cost), which more than the CPU given would show a run timed wrong. Once more on
both cores with its rounds on two Dask workers: what sending the rounds costs the process,
against solving them itself. The streams keep the senders' context, so that most traces are
whole on arrival; the last three ceiling runs take the same stream with every call's context
lost (the stream tacit is for, each round with every call to infer): on one core, on both, and
on both with the rounds on the Dask workers.

Prints one JSON object; ``--markdown FILE`` also writes the tables with the date and command.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from tacit.experiment.cpu_quota import cpu_quota_unavailable
from tacit.experiment.nats_server import nats_unavailable
from tacit.experiment.otlp_load import encoded_requests
from tacit.experiment.scale_out import (
    KILLS,
    CeilingRun,
    ScaleOutParams,
    ScaleOutRun,
    run_ceiling,
    run_scale_out,
)
from tacit.simulate import load_app, simulate

ROLES = {
    "ingest replicas": ("replica0", "replica1"),
    "reconstruct role": ("reconstruct",),
    "Dask workers": ("worker0", "worker1"),
    "Dask scheduler": ("scheduler",),
    "NATS server": ("nats",),
    "one process (role all)": ("one-process",),
}
RATES = (100_000, 1_000_000)
LOADED = "reconstruct role, under load (the one-core ceiling run)"
LOADED_LOST = "reconstruct role, under load, every call's context lost"
CEILING_LONGER = 3
"""How many times longer the ceiling runs' backlogs are than the streaming runs' streams: the
difference between the two backlogs must outweigh the second or so by which a run's start-up
varies, and with every call's context lost the last windows close only after a quiet time,
which a backlog of the streaming runs' lengths does not outlast."""


CEILINGS = (
    ("0", None, False, False), ("0", 0.5, False, False), ("0", 0.25, False, False),
    (None, None, False, False), (None, None, True, False),
    ("0", None, False, True), (None, None, False, True), (None, None, True, True),
)  # fmt: skip
"""The CPU the ceiling runs get: ``taskset`` CPUs (None: any) and a quota in cores; whether
the rounds' offline step goes to two Dask workers; and whether every call's context was lost
(the stream tacit is for: each round has every call to infer)."""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=40.0, help="the shorter stream's length")
    ap.add_argument("--rate", type=float, default=100.0, help="requests/s of the shop app")
    ap.add_argument("--runs", type=int, default=2, help="pairs of streams")
    ap.add_argument("--markdown", type=Path)
    args = ap.parse_args()
    reason = nats_unavailable()
    if reason:
        print(json.dumps({"skipped": reason}))
        return
    lengths = (args.seconds, 2 * args.seconds)
    with tempfile.TemporaryDirectory() as tmp:
        pairs = [
            [run_scale_out(Path(tmp) / f"run{i}-{s:g}", _params(args, s, ()), tell=_err)
             for s in lengths]
            for i in range(args.runs)
        ]  # fmt: skip
        fault = run_scale_out(Path(tmp) / "faults", _params(args, args.seconds, KILLS), tell=_err)
        ceilings, quota_skipped = [], cpu_quota_unavailable()
        for cores, quota, dask, lost in CEILINGS:
            if quota and quota_skipped:
                continue
            sizes = [CEILING_LONGER * s for s in lengths]
            short, long = (
                run_ceiling(Path(tmp) / f"ceiling-{cores}-{quota}-{dask}-{lost}-{s:g}",
                            replace(_params(args, s, ()), lost=lost), cores, quota, tell=_err,
                            dask=dask)
                for s in sizes
            )  # fmt: skip
            ceilings.append({**_ceiling(short, long), "lost": lost})
    one_core = {
        c["lost"]: c["cpu_us_per_span"] for c in ceilings if c["cores"] == "0" and not c["quota"]
    }
    for c in ceilings:
        given = min(c["quota"] or 1.0, 1.0)  # the Python of a process holds one lock
        c["predicted_spans_per_s"] = round(given * 1e6 / one_core[c["lost"]])
        # with its rows built in a second process, the busier of the two at one core each
        busier = max(c["cpu_us_per_span"] - c["started_us_per_span"], c["started_us_per_span"])
        c["own_cost_spans_per_s"] = round(given * 1e6 / busier)
        c["cores_used"] = round(c["spans_per_s"] * c["cpu_us_per_span"] / 1e6, 2)
        if c["cores_used"] > 1.1 * _cores_given(c):  # a timing that left work out
            _err(f"ceiling run {_given(c)}: {c['cores_used']} cores used, more than given")
    spans = simulate(load_app(None), args.rate, duration_s=args.seconds, seed=2,
                     record_threads=False)  # fmt: skip
    log_bytes = sum(len(body) for _, body in encoded_requests(spans)) / len(spans)
    marginal = [
        (role, statistics.median(_marginal_us(short, long, names) for short, long in pairs))
        for role, names in ROLES.items()
    ]
    at = [role for role, _ in marginal].index("reconstruct role") + 1
    cost = dict([*marginal[:at], (LOADED, one_core[False]), (LOADED_LOST, one_core[True]),
                 *marginal[at:]])  # fmt: skip
    result = {
        "spans": [r.sent for r in pairs[0]],
        "runs": [r.summary() for pair in pairs for r in pair],
        "with_faults": fault.summary(),
        "cpu_us_per_span": {k: round(v, 1) for k, v in cost.items()},
        "log_bytes_per_span": round(log_bytes, 1),
        "cores_needed": {
            role: {str(rate): round(us * rate / 1e6, 1) for rate in RATES}
            for role, us in cost.items()
        },
        "reconstruct_role_ceiling_spans_per_s": ceilings[0]["spans_per_s"],
        "log_mb_per_s": {str(rate): round(log_bytes * rate / 1e6, 1) for rate in RATES},
        "reconstruct_ceiling": ceilings,
        "quota_skipped": quota_skipped,
    }
    print(json.dumps(result, indent=2))
    if args.markdown:
        args.markdown.write_text(_markdown(result, " ".join(sys.argv)))


def _params(args: argparse.Namespace, seconds: float, kill: tuple[str, ...]) -> ScaleOutParams:
    return ScaleOutParams(seconds=seconds, rate=args.rate, kill=kill, service_windows=True)


def _marginal_us(short: ScaleOutRun, long: ScaleOutRun, names: tuple[str, ...]) -> float:
    """CPU µs of the processes ``names`` per span the longer stream acknowledged beyond the
    shorter one's."""
    cpu = sum(long.cpu_s[n] - short.cpu_s[n] for n in names)
    return cpu / (long.acknowledged - short.acknowledged) * 1e6


def _ceiling(short: CeilingRun, long: CeilingRun) -> dict:
    """The rate and CPU per span of the spans the longer backlog held beyond the shorter's."""
    spans = long.spans - short.spans
    return {
        "cores": long.cores,
        "quota": long.quota,
        "dask": long.dask,
        "spans": [short.spans, long.spans],
        "wall_s": [round(short.wall_s, 2), round(long.wall_s, 2)],
        "spans_per_s": round(spans / (long.wall_s - short.wall_s)),
        "cpu_us_per_span": round((long.cpu_s - short.cpu_s) / spans * 1e6, 1),
        "started_us_per_span": round((long.started_cpu_s - short.started_cpu_s) / spans * 1e6, 1),
    }


def _err(line: str) -> None:
    print(line, file=sys.stderr)


def _markdown(result: dict, command: str) -> str:
    today = datetime.date.today().isoformat()
    short, long = result["spans"]
    lost = next(c for c in result["reconstruct_ceiling"] if c["lost"])
    lines = [
        "# tacit serve as roles: cost per role and capacity",
        "",
        f"Written by `python {command}` on {today}: streams of {short:,} and {long:,} spans "
        "of the shop app, each role a process on this 2-core machine, with the service's "
        "own windows; a cost per span is the longer stream's CPU less the shorter's, over "
        "the spans between (bench docstring: what is measured).",
        "",
        "| role | CPU µs per span | cores for 100,000 spans/s | cores for 1,000,000 spans/s |",
        "|---|---|---|---|",
    ]
    for role, us in result["cpu_us_per_span"].items():
        need = result["cores_needed"][role]
        lines.append(f"| {role} | {us} | {need['100000']} | {need['1000000']} |")
    lines += [
        "",
        f"The shared log carries {result['log_bytes_per_span']} bytes a span (OTLP protobuf "
        f"bodies): {result['log_mb_per_s']['100000']} MB/s at 100,000 spans/s, "
        f"{result['log_mb_per_s']['1000000']} MB/s at 1,000,000. One reconstruct role took "
        f"{result['reconstruct_role_ceiling_spans_per_s']:,} spans/s on one core, given a "
        "backlog (below).",
        "",
        "The check of the model: the stream put in the log first, then one reconstruct "
        "process started to take it all, its rounds in its own process and writing blocks, "
        "on one core "
        "(`taskset -c 0`), on a fraction of it (a cgroup CPU quota) and on both; and on both "
        "with its rounds on two Dask workers (their CPU not counted); the rate "
        "and cost are those of the spans the longer backlog held beyond the shorter's. "
        "Predicted: the CPU given, at most one core (a process's Python holds one lock), over "
        "the run's own cost per span, and over the one-core run's of the same stream; where "
        "the process has both cores, it builds the rows of finished traces in a second "
        "process (the part of its cost in parentheses), and its own cost predicts the rate "
        "of the busier of the two at one core each. "
        "The streams keep their senders' context, so that most traces are whole on arrival; "
        "the last runs take the same app's stream with every call's context lost (each round "
        "with every call to infer). The backlogs are "
        f"{' and '.join(f'{n:,}' for n in lost['spans'])} spans, longer than the streams "
        "above (bench docstring). The cores a run used, its rate times its CPU per span, "
        "cannot exceed the CPU given: a run that did was timed wrong.",
        "",
        "| stream | CPU given | seconds (two backlogs) | spans/s reached | CPU µs per span | "
        "cores used | spans/s predicted by its own cost | by the one-core run's |",
        "|---|---|---|---|---|---|---|---|",
        *(
            f"| {'context lost' if c['lost'] else 'context kept'} | {_given(c)} | "
            f"{c['wall_s'][0]} / {c['wall_s'][1]} | {c['spans_per_s']:,} | "
            f"{_cost(c)} | {c['cores_used']} | {c['own_cost_spans_per_s']:,} | "
            f"{c['predicted_spans_per_s']:,} |"
            for c in result["reconstruct_ceiling"]
        ),
    ]
    if result["quota_skipped"]:
        lines += ["", f"Fractions of a core not measured: {result['quota_skipped']}."]
    lines += [
        "",
        "| run | sent | acknowledged | stored | identical to one process | stored twice |",
        "|---|---|---|---|---|---|",
    ]
    fault = result["with_faults"]
    for name, r in [*((f"{i + 1}", r) for i, r in enumerate(result["runs"])),
                    (f"killed: {', '.join(fault['killed'])}", fault)]:  # fmt: skip
        lines.append(
            f"| {name} | {r['sent']} | {r['acknowledged']} | {r['stored']} | "
            f"{r['identical_to_single_process']} | {r['windows_stored_twice']} |"
        )
    return "\n".join(lines) + "\n"


def _cost(ceiling: dict) -> str:
    """A run's CPU per span, and the part of it its row process took where it had one."""
    started = ceiling["started_us_per_span"]
    return (
        f"{ceiling['cpu_us_per_span']} ({started} rows)"
        if started
        else f"{ceiling['cpu_us_per_span']}"
    )


def _cores_given(ceiling: dict) -> float:
    """The CPU a ceiling run's process and the one it starts may use, in cores."""
    if ceiling["quota"]:
        return ceiling["quota"]
    return 1.0 if ceiling["cores"] == "0" else float(len(os.sched_getaffinity(0)))


def _given(ceiling: dict) -> str:
    if ceiling["quota"]:
        given = f"{ceiling['quota']:g} of core 0 (quota)"
    else:
        given = "core 0" if ceiling["cores"] == "0" else "both cores"
    return f"{given}, rounds on two Dask workers" if ceiling["dask"] else given


if __name__ == "__main__":
    main()
