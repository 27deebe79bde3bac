"""Benchmark: trace reconstruction accuracy, speed and memory on every shared real file.

For each file (HotelReservation and Node.js at six loads, Media Microservices at two, Nezha
OnlineBoutique and TrainTicket minutes) a fresh process evaluates TraceWeaver and the three
baselines as ``tacit evaluate FILE --algorithm traceweaver,fcfs,wap5,vpath`` does (call graph
learned from the file's own ground truth). Per algorithm it reports end-to-end accuracy, link
accuracy, the accuracy over the links the TraceWeaver artifact scores, and spans per second
(reading + reconstruction + scoring, one core); per file, the peak resident memory of the
process. Before timing, each process runs the compiled kernels once on a small simulated app
(numba loads them from its cache): that one-off cost is reported apart, as ``warmup_s``. Each
file is evaluated three times and the median speed reported (the machines are shared).

Prints one JSON object on stdout and a table on stderr; skips (with a reason in the JSON) when
../shared/data is absent. ``python bench/bench_traceweaver.py media`` runs only the files whose
name contains "media". With ``--markdown PATH`` it also writes the reproduction report's part
for TraceWeaver §6.2.1 (accuracy against load, beside the baselines: Fig. 4a) and §6.5 (time to
map 1,000 spans).
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from report_part import not_run, publish

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
LOADS = (25, 50, 75, 100, 125, 150)
ALGORITHMS = ("traceweaver", "fcfs", "wap5", "vpath")
REPEATS = 3


def files() -> list[tuple[str, Path]]:
    out = []
    for app, loads in (
        ("hotel_reservation", LOADS),
        ("nodejs_microservices", LOADS),
        ("media_microservices", (25, 100)),
    ):
        out += [
            (f"{app} load{n}", DATA / f"traceweaver/{app}/load{n}.jaeger.json.gz") for n in loads
        ]
    for app, day in (("online_boutique", "2022-08-22"), ("train_ticket", "2023-01-29")):
        for f in sorted((DATA / "nezha" / app / day).glob("*_trace.csv.gz")):
            out.append((f"nezha {app} {f.name[:5]}", f))
    return out


def one(path: Path) -> dict:
    """Evaluate one file in this process (after a warm-up) and report."""
    from tacit.evaluation.reconstruction import evaluate
    from tacit.model.roles import infer_roles
    from tacit.simulate import load_app, simulate

    t0 = time.perf_counter()
    evaluate(infer_roles(simulate(load_app(None), 50, n_requests=30, seed=1)).spans, ALGORITHMS)
    warmup = time.perf_counter() - t0
    runs = [evaluate([path], ALGORITHMS) for _ in range(REPEATS)]
    ev = runs[0]
    for r in ev.results:  # the reconstruction is deterministic: only the speed differs
        r["spans_per_second"] = statistics.median(
            next(x for x in run.results if x["algorithm"] == r["algorithm"])["spans_per_second"]
            for run in runs
        )
    keys = (
        "accuracy",
        "link_accuracy",
        "artifact_scope_accuracy",
        "top5_accuracy",
        "spans_per_second",
    )
    for r in ev.results:  # §6.2.2: the slowest tenth of requests (end-to-end latency decile)
        slowest = r["per_latency_bin"][-1] if r["per_latency_bin"] else {}
        r["slowest_decile_accuracy"] = slowest.get("accuracy")
    keys += ("slowest_decile_accuracy",)
    return {
        "traces": ev.traces,
        "spans": ev.spans,
        "warmup_s": round(warmup, 2),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "results": {
            r["algorithm"]: {k: round(r[k], 4) if isinstance(r[k], float) else r[k] for k in keys}
            | {"info": r["info"]}
            for r in ev.results
        },
    }


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--one":
        print(json.dumps(one(Path(sys.argv[2]))))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("only", nargs="*", help="run only the files whose name contains one")
    parser.add_argument("--markdown", type=Path)
    args = parser.parse_args()
    if not DATA.is_dir():
        not_run("traceweaver", "## TraceWeaver §6.2.1", f"{DATA} absent", args.markdown)
        return
    rows = []
    head = f"{'file':34s} {'spans':>6s} " + " ".join(f"{a:>18s}" for a in ALGORITHMS)
    print(head + f" {'TW spans/s':>10s} {'peak MB':>8s}", file=sys.stderr)
    for name, path in files():
        if args.only and not any(o in name for o in args.only):
            continue
        run = subprocess.run(
            [sys.executable, __file__, "--one", str(path)], capture_output=True, text=True
        )
        if run.returncode != 0:
            raise SystemExit(f"{name}: {run.stderr.strip().splitlines()[-1]}")
        row = {"file": name} | json.loads(run.stdout)
        rows.append(row)
        res = row["results"]
        cells = " ".join(
            f"{100 * res[a]['accuracy']:6.1f}% ({100 * res[a]['artifact_scope_accuracy']:5.1f}%)"
            for a in ALGORITHMS
        )
        tw = res["traceweaver"]["spans_per_second"]
        print(
            f"{name:34s} {row['spans']:6d} {cells} {tw:10.0f} {row['peak_rss_mb']:8.1f}",
            file=sys.stderr,
        )
    print("accuracy (artifact scope) per algorithm", file=sys.stderr)
    print(json.dumps({"benchmark": "traceweaver", "files": rows}))
    if args.markdown is not None:
        publish(report(rows), args.markdown, echo=False)


def pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.1f}%"


def report(rows: list[dict]) -> str:
    """The reproduction report's part: §6.2.1's accuracy against load and the baselines, and
    §6.5's time to map 1,000 spans."""
    lines = [
        "## TraceWeaver §6.2.1: accuracy against load, beside the baselines",
        "",
        "Paper (Fig. 4a, and §1): on DeathStarBench apps the best baseline reconstructs 70% of "
        'traces and TraceWeaver 93% ("~90%" in the abstract); FCFS, WAP5 and the thread-based '
        "vPath (DeepFlow) fall as load rises, vPath from 80% at low load. Here: the shared "
        "Jaeger exports of HotelReservation and the Node.js app at six loads and Media "
        "Microservices at two (the paper's benchmark apps, loads in requests/s), and Nezha's "
        "OnlineBoutique and TrainTicket minutes (real, not in the paper); call graph learned "
        "from each file's own ground truth; end-to-end accuracy (a trace is right when every "
        "parent link in it is). `python bench/bench_traceweaver.py --markdown PATH`.",
        "",
        "The paper also reports TraceWeaver's top-5 accuracy (one of its five best mappings "
        'right at every service) as "highly boosted"; it is the column TW top 5.',
        "",
        "| file | spans | TraceWeaver | TW top 5 | FCFS | WAP5 | vPath | best baseline |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        acc = {a: row["results"][a]["accuracy"] for a in ALGORITHMS}
        best = max(ALGORITHMS[1:], key=acc.__getitem__)
        top5 = row["results"]["traceweaver"]["top5_accuracy"]
        lines.append(
            f"| {row['file']} | {row['spans']:,} | {pct(acc['traceweaver'])} | {pct(top5)} | "
            + " | ".join(pct(acc[a]) for a in ALGORITHMS[1:])
            + f" | {best} {pct(acc[best])} |"
        )
    paper_apps = [r for r in rows if not r["file"].startswith("nezha")]
    if paper_apps:
        tw = statistics.mean(r["results"]["traceweaver"]["accuracy"] for r in paper_apps)
        base = statistics.mean(
            max(r["results"][a]["accuracy"] for a in ALGORITHMS[1:]) for r in paper_apps
        )
        lines += [
            "",
            f"Over the {len(paper_apps)} benchmark-app files: TraceWeaver {pct(tw)} on "
            f"average, the best baseline of each file {pct(base)} (paper: 93% and 70%).",
            "",
            "Where they differ:",
            "- The baselines here are stronger: FCFS is exact on the Node.js app, whose event "
            "loop keeps calls in the order of their requests.",
            "- Media Microservices at load 100 is below the paper's figure. With its three "
            "least confident services instrumented (nginx, movie-id-service and "
            "compose-review-service, as `tacit evaluate` names them), the accuracy is 95% "
            "(§6.3.2, below). Knowing the delay distributions would not close the gap: mapped "
            "with the delay models of the file's true mapping, the accuracy is no higher (the "
            "last column of §6.2.5's table): the requests it gets wrong are told apart by "
            "nothing in their timing (the slowest tenth, §6.2.2).",
            "- Nezha OnlineBoutique 03_54 and 03_55 are the two minutes after CPU contention was "
            "injected into the front end's pod at 03:53:54 (the day's `fault_list.json`). The "
            "product catalogue slowed too: its requests went from 2.7 to 6.3 ms at the median, "
            "its requests in flight (95th percentile) from 2 to 6, and the interquartile range "
            "of its `sql.conn.query` span from 0.12 to 1.0 ms. Its "
            "`sql.rows` opens 2-20 µs before the query's span closes, so no order is learned "
            "between them. Timed from the query's start, 71% of the catalogue's requests in "
            "03_55 got exactly their own calls; timed from the query's end (the call graph's "
            "`from_end_of`, learned where that gap varies least), 89%. What is left is "
            "the front end: chains of 11 to 20 sequential calls per page, which in 03_55 last "
            "1.3-2.3 s where they took tens of ms. Its calls there last about 100, 200 or 300 "
            "ms (multiples of Linux's 100 ms CFS period: likely the pod's CPU limit throttling "
            "it), and in the cases inspected the calls "
            "of two requests in flight together started and ended within 0.2 ms of each other: "
            "timing cannot tell them apart. A wider search (beam 64, top 10) gains 2-5 points.",
        ]
    tail_rows = [
        r for r in paper_apps if r["file"].endswith(("load125", "media_microservices load100"))
    ]
    if tail_rows:
        lines += [
            "",
            "## TraceWeaver §6.2.2: accuracy of the slowest requests",
            "",
            "Paper (Fig. 4b): at 125 requests/s, requests binned by response-time percentile; "
            "for the slowest 10% the baselines' accuracy suffers and TraceWeaver still recovers "
            "the traces with good accuracy. Here: the files at load 125 (Media Microservices: "
            "at 100, its highest), accuracy over all traces and over the slowest tenth by the "
            "root span's duration.",
            "",
            "| file | TraceWeaver, all | TraceWeaver | FCFS | WAP5 | vPath |",
            "|---|---|---|---|---|---|",
        ]
        for row in tail_rows:
            res = row["results"]
            lines.append(
                f"| {row['file']} (slowest 10%) | {pct(res['traceweaver']['accuracy'])} | "
                + " | ".join(pct(res[a]["slowest_decile_accuracy"]) for a in ALGORITHMS)
                + " |"
            )
        lines += [
            "",
            "As in the paper, the baselines lose most on the slowest requests. On Media "
            "Microservices at load 100 TraceWeaver loses there too: in 61 of the 73 slowest "
            "traces it gets wrong, the wrong links are compose-review-service's three onward "
            "calls, given to another request's join although all five calls into the join were "
            "grouped right. The join's trigger span lasts 7.5 ms at the median and 10-25 ms in "
            "the slowest quarter; in the cases inspected, two requests' triggers overlapped and "
            "closed within a millisecond of each other, both sets of onward calls fitting "
            "either.",
        ]
    speeds = sorted(r["results"]["traceweaver"]["spans_per_second"] for r in rows)
    if speeds:
        median = statistics.median(speeds)
        lines += [
            "",
            "## TraceWeaver §6.5: time to map spans",
            "",
            "Paper: one instance takes under 5 s on average to map 1,000 spans (about 200 "
            "requests/s per container). Here, from the same runs (reading, reconstruction and "
            f"scoring on one core, median of {REPEATS} runs per file): "
            f"{median:,.0f} spans/s, {1000 / median:.3f} s per 1,000 spans, at the median "
            f"file; {speeds[0]:,.0f} to {speeds[-1]:,.0f} spans/s over the {len(speeds)} files.",
            "",
        ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
