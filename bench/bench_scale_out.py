"""Benchmark: ``tacit serve`` as roles, each a process (``tacit experiment scale-out``): what
each role costs per span, what the shared log carries, and the processes a given rate needs.

Runs the shop app's simulated stream through a NATS JetStream server, a Dask scheduler and two
workers, two ingest replicas and the reconstruct role, without faults, ``--runs`` times; then
once with an ingest replica, a worker and the reconstruct role each killed mid-stream. Each run
also gives the same requests to one process (``role: all``) and compares the stores. Last, the
check of the model: the stream put in the log first, then one reconstruct process started,
pinned to one core and not, to take it all (``run_ceiling``): the rate it reaches, against
the rate its own cost per span predicts on one core.

CPU is each process's user and system time from when all were ready to when the stream was
reconstructed (start-up not counted), per span acknowledged: the median over the runs. The log
carries each request's body: its bytes per span. The projection is cores per role for 100,000
and 1,000,000 spans/s at the measured cost; the reconstruct role is one process today, so the
rate one core of it takes is its ceiling (docs/scale-out.md).

Prints one JSON object; ``--markdown FILE`` also writes the tables with the date and command.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
import tempfile
from pathlib import Path

from tacit.experiment.nats_server import nats_unavailable
from tacit.experiment.otlp_load import encoded_requests
from tacit.experiment.scale_out import KILLS, ScaleOutParams, run_ceiling, run_scale_out
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=20.0, help="length of the stream")
    ap.add_argument("--rate", type=float, default=100.0, help="requests/s of the shop app")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--markdown", type=Path)
    args = ap.parse_args()
    reason = nats_unavailable()
    if reason:
        print(json.dumps({"skipped": reason}))
        return
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.runs):
            params = ScaleOutParams(seconds=args.seconds, rate=args.rate, kill=())
            runs.append(run_scale_out(Path(tmp) / f"run{i}", params, tell=_err))
        params = ScaleOutParams(seconds=args.seconds, rate=args.rate, kill=KILLS)
        fault = run_scale_out(Path(tmp) / "faults", params, tell=_err)
        params = ScaleOutParams(seconds=args.seconds, rate=args.rate)
        ceiling = [
            run_ceiling(Path(tmp) / f"ceiling-{cores}", params, cores, tell=_err).summary()
            for cores in ("0", None)
        ]
    for c in ceiling:
        c["predicted_spans_per_s_on_one_core"] = round(1e6 / c["cpu_us_per_span"])
    spans = simulate(load_app(None), args.rate, duration_s=args.seconds, seed=2,
                     record_threads=False)  # fmt: skip
    log_bytes = sum(len(body) for _, body in encoded_requests(spans)) / len(spans)
    cost = {
        role: statistics.median(sum(r.cpu_s[n] for n in names) / r.acknowledged * 1e6
                                for r in runs)
        for role, names in ROLES.items()
    }  # fmt: skip
    result = {
        "spans": runs[0].sent,
        "runs": [r.summary() for r in runs],
        "with_faults": fault.summary(),
        "cpu_us_per_span": {k: round(v, 1) for k, v in cost.items()},
        "log_bytes_per_span": round(log_bytes, 1),
        "cores_needed": {
            role: {str(rate): round(us * rate / 1e6, 1) for rate in RATES}
            for role, us in cost.items()
        },
        "reconstruct_role_ceiling_spans_per_s": round(1e6 / cost["reconstruct role"]),
        "log_mb_per_s": {str(rate): round(log_bytes * rate / 1e6, 1) for rate in RATES},
        "reconstruct_ceiling": ceiling,
    }
    print(json.dumps(result, indent=2))
    if args.markdown:
        args.markdown.write_text(_markdown(result, " ".join(sys.argv)))


def _err(line: str) -> None:
    print(line, file=sys.stderr)


def _markdown(result: dict, command: str) -> str:
    today = datetime.date.today().isoformat()
    lines = [
        "# tacit serve as roles: cost per role and capacity",
        "",
        f"Written by `python {command}` on {today}: {result['spans']:,} spans of the shop "
        "app, each role a process on this 2-core machine (bench docstring: what is measured).",
        "",
        "| role | CPU µs per span | cores for 100,000 spans/s | cores for 1,000,000 spans/s |",
        "|---|---|---|---|",
    ]
    for role, us in result["cpu_us_per_span"].items():
        need = result["cores_needed"][role]
        lines.append(f"| {role} | {us} | {need['100000']} | {need['1000000']} |")
    fault = result["with_faults"]
    lines += [
        "",
        f"The shared log carries {result['log_bytes_per_span']} bytes a span (OTLP protobuf "
        f"bodies): {result['log_mb_per_s']['100000']} MB/s at 100,000 spans/s, "
        f"{result['log_mb_per_s']['1000000']} MB/s at 1,000,000. One reconstruct role takes "
        f"at most about {result['reconstruct_role_ceiling_spans_per_s']:,} spans/s on one core.",
        "",
        "The check of that ceiling: the stream put in the log first, then one reconstruct "
        "process (its rounds in its own process) started to take it all, pinned to one core "
        "(`taskset -c 0`) and not:",
        "",
        "| cores | spans | seconds | spans/s reached | CPU µs per span | spans/s that cost "
        "predicts on one core |",
        "|---|---|---|---|---|---|",
        *(
            f"| {c['cores']} | {c['spans']} | {c['wall_s']} | {c['spans_per_s']:,} | "
            f"{c['cpu_us_per_span']} | {c['predicted_spans_per_s_on_one_core']:,} |"
            for c in result["reconstruct_ceiling"]
        ),
        "",
        "| run | sent | acknowledged | stored | identical to one process | stored twice |",
        "|---|---|---|---|---|---|",
    ]
    for name, r in [*((f"{i + 1}", r) for i, r in enumerate(result["runs"])),
                    (f"killed: {', '.join(fault['killed'])}", fault)]:  # fmt: skip
        lines.append(
            f"| {name} | {r['sent']} | {r['acknowledged']} | {r['stored']} | "
            f"{r['identical_to_single_process']} | {r['windows_stored_twice']} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
