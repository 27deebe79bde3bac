"""Benchmark: how well TraceWeaver's link and trace probabilities are calibrated.

Each link's probability is the share of perturbed joint assignments that make it
(:attr:`tacit.reconstruct.TraceWeaverParams.marginal_samples`, 20), a trace's the share that
make all its links (:func:`tacit.reconstruct.link_probability.trace_probability`); the
baseline, in the same run, is each link's share of its call's alternatives
(:mod:`tacit.reconstruct.link_probability`, ``marginal_samples`` 0). The call graph
is learned from a calm file of the same application and the others are scored with it, as the
issue (calibrated confidence) sets, on every shared file: HotelReservation and the Node.js app
load25 → load50 … load150; Media Microservices load25 → load100; Nezha OnlineBoutique 07_26 →
03_53, 03_54, 03_55 (a fault minute: CPU contention at the front end), 07_27, 07_28;
TrainTicket 08_43 → 08_44, 08_45. Per file:
end-to-end and link accuracy, the link and trace ECE (ten equal-width bins,
:mod:`tacit.evaluation.calibration`) and, of the traces given 0.9 or more, how many and the
share right. Targets: ECE ≤ 0.05 each; on 03_55, accuracy ≥ 50% and ≥ 90% of the traces given
0.9 or more right.

A simulated incident beside them: the shop (``tacit.simulate``'s default application) at 600
requests/s with its front end slowed fivefold for the middle third of the load (a
``slowdown``, as under CPU contention), three seeds; per third, the traces' accuracy and mean
probability and, of the traces given 0.9 or more, the share right.

``python bench/bench_calibration.py [NAME_PART ...] [--markdown PATH]`` prints one JSON object;
the real files are skipped (with the reason) when ../shared/data is absent.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from bench_traceweaver import DATA
from report_part import publish
from tacit.evaluation.calibration import trace_outcomes
from tacit.evaluation.reconstruction import evaluate
from tacit.formats.span_files import observe
from tacit.model.roles import infer_roles
from tacit.reconstruct.callgraph import learn_callgraph
from tacit.reconstruct.traceweaver import TraceWeaverParams, reconstruct_traceweaver
from tacit.simulate import SlowdownSpec, load_app, simulate, slow_down
from tacit.simulate.microservices import EPOCH_NS

TARGET_ECE = 0.05
NEZHA = DATA / "nezha"
SETUPS = (
    (
        DATA / "traceweaver/hotel_reservation/load25.jaeger.json.gz",
        [
            DATA / f"traceweaver/hotel_reservation/load{n}.jaeger.json.gz"
            for n in (50, 75, 100, 125, 150)
        ],
    ),
    (
        DATA / "traceweaver/nodejs_microservices/load25.jaeger.json.gz",
        [
            DATA / f"traceweaver/nodejs_microservices/load{n}.jaeger.json.gz"
            for n in (50, 75, 100, 125, 150)
        ],
    ),
    (
        DATA / "traceweaver/media_microservices/load25.jaeger.json.gz",
        [DATA / "traceweaver/media_microservices/load100.jaeger.json.gz"],
    ),
    (
        NEZHA / "online_boutique/2022-08-22/07_26_trace.csv.gz",
        [
            NEZHA / f"online_boutique/2022-08-22/{m}_trace.csv.gz"
            for m in ("03_53", "03_54", "03_55", "07_27", "07_28")
        ],
    ),
    (
        NEZHA / "train_ticket/2023-01-29/08_43_trace.csv.gz",
        [NEZHA / f"train_ticket/2023-01-29/{m}_trace.csv.gz" for m in ("08_44", "08_45")],
    ),
)


def name(path: Path) -> str:
    """A file's short name: its application and load or minute (a Nezha minute's directory is
    its day, under its application's)."""
    app = path.parent.parent.name if path.parent.name[:1].isdigit() else path.parent.name
    return f"{app} {path.name.split('.')[0].removesuffix('_trace')}"


def score(calm: Path, path: Path) -> dict:
    """TraceWeaver on ``path`` with the call graph learned from ``calm``, and the calibration
    of its sampled probabilities and of the alternatives' shares."""
    graph = learn_callgraph(observe([calm])[0].spans)
    out: dict = {"input": name(path), "callgraph_from": name(calm)}
    for label, samples in (("sampled", TraceWeaverParams().marginal_samples), ("shares", 0)):
        began = time.perf_counter()
        result = evaluate(
            [path], ["traceweaver"], callgraph=graph,
            params=TraceWeaverParams(marginal_samples=samples),
        ).results[0]  # fmt: skip
        links, traces = result["calibration"]["links"], result["calibration"]["traces"]
        sure = traces["bins"][-1]
        out["accuracy"] = round(result["accuracy"], 4)
        out["link_accuracy"] = round(result["link_accuracy"], 4)
        out[label] = {
            "seconds": round(time.perf_counter() - began, 2),
            "link_ece": round(links["ece"], 4),
            "trace_ece": round(traces["ece"], 4),
            "traces_at_0.9": sure["n"],
            "right_at_0.9": None if sure["accuracy"] is None else round(sure["accuracy"], 4),
            "calibration": result["calibration"],
        }
    return out


INCIDENT_RATE = 600.0
INCIDENT_REQUESTS = 1500
INCIDENT_FACTOR = 5.0


def incident(seed: int) -> list[dict]:
    """The simulated incident of one seed: per third of the load (calm, slowed, calm), its
    traces' accuracy and mean probability, and how many were given ≥ 0.9 and the share right."""
    app = load_app(None)
    graph = learn_callgraph(infer_roles(simulate(app, 20, n_requests=400, seed=7)).spans)
    third = INCIDENT_REQUESTS / INCIDENT_RATE / 3
    slow = slow_down(app, "frontend", SlowdownSpec(INCIDENT_FACTOR, third, 2 * third))
    obs = infer_roles(
        simulate(slow, INCIDENT_RATE, n_requests=INCIDENT_REQUESTS, seed=seed, record_threads=False)
    )
    blind = obs.without_truth()
    traces = trace_outcomes(obs.spans, blind, reconstruct_traceweaver(blind, graph))
    began = (traces.start - EPOCH_NS) / 1e9
    out = []
    for part, (lo, hi) in zip(
        ("calm before", "slowed", "calm after"),
        ((0, third), (third, 2 * third), (2 * third, np.inf)),
        strict=True,
    ):
        these = (began >= lo) & (began < hi)
        sure = these & (traces.probability >= 0.9)
        out.append(
            {
                "seed": seed,
                "part": part,
                "traces": int(these.sum()),
                "accuracy": round(float(traces.right[these].mean()), 4),
                "mean_probability": round(float(traces.probability[these].mean()), 4),
                "traces_at_0.9": int(sure.sum()),
                "right_at_0.9": round(float(traces.right[sure].mean()), 4) if sure.any() else None,
            }
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("only", nargs="*")
    parser.add_argument("--markdown", type=Path)
    args = parser.parse_args()
    simulated = [row for seed in (1, 2, 3) for row in incident(seed)]
    if not DATA.exists():
        print(
            json.dumps({"skipped": f"{DATA} is absent: real files not run", "incident": simulated})
        )
        return
    # untimed: the first run compiles the kernels, which would count against the first file
    evaluate([SETUPS[0][0]], ["traceweaver"])
    results = [
        score(calm, path)
        for calm, paths in SETUPS
        for path in paths
        if not args.only or any(o in name(path) for o in args.only)
    ]
    print(json.dumps({"target_ece": TARGET_ECE, "results": results, "incident": simulated}))
    if args.markdown is not None:
        publish(_report(results, simulated), args.markdown, echo=False)


def _report(results: list[dict], simulated: list[dict]) -> str:
    rows = [
        "| input | call graph from | accuracy | link accuracy | link ECE | trace ECE "
        "| traces given ≥ 0.9 | of them right | link ECE, shares | trace ECE, shares "
        "| time / shares' |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        s, b = r["sampled"], r["shares"]
        right = "—" if s["right_at_0.9"] is None else f"{s['right_at_0.9']:.1%}"
        rows.append(
            f"| {r['input']} | {r['callgraph_from']} | {r['accuracy']:.1%} | "
            f"{r['link_accuracy']:.1%} | {s['link_ece']:.3f} | {s['trace_ece']:.3f} | "
            f"{s['traces_at_0.9']} | {right} | {b['link_ece']:.3f} | {b['trace_ece']:.3f} | "
            f"{s['seconds'] / b['seconds']:.1f}× |"
        )
    return (
        "## Calibration of TraceWeaver's link and trace probabilities\n\n"
        "Written by `python bench/bench_calibration.py --markdown "
        "docs/reproduction/calibration.md` on "
        f"{time.strftime('%Y-%m-%d')}. A link's probability is the share of 20 perturbed "
        "joint assignments (each mapping's log-likelihood plus Gumbel noise) that make it "
        "(`TraceWeaverParams.marginal_samples`); a trace's is the share of those assignments that "
        "make all its links (across services, sampled apart, the product of their shares). "
        "Baseline, same run: each link's share of its call's alternatives (the softmax of their "
        "mappings' log-likelihoods, `marginal_samples` 0). The call graph is learned from a calm "
        "file of the same application. ECE: ten equal-width bins of predicted probability, "
        "Σ (n_bin / N) · |accuracy_bin − mean probability_bin| "
        f"(target ≤ {TARGET_ECE}). Time: the whole evaluation, sampled against shares."
        "\n\n" + "\n".join(rows) + "\n\n"
        "### A simulated incident\n\n"
        f"The shop at {INCIDENT_RATE:.0f} requests/s, {INCIDENT_REQUESTS} requests, its front "
        f"end's service times {INCIDENT_FACTOR:.0f} times as long in the middle third (the call "
        "graph learned from calm requests; default parameters).\n\n"
        "| seed | part | traces | accuracy | mean trace probability | traces given ≥ 0.9 "
        "| of them right |\n|---|---|---|---|---|---|---|\n"
        + "\n".join(
            f"| {r['seed']} | {r['part']} | {r['traces']} | {r['accuracy']:.1%} | "
            f"{r['mean_probability']:.1%} | {r['traces_at_0.9']} | "
            + ("—" if r["right_at_0.9"] is None else f"{r['right_at_0.9']:.1%}")
            + " |"
            for r in simulated
        )
        + "\n"
    )


if __name__ == "__main__":
    main()
