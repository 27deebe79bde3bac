"""Reproduction: RDA §VII (Figs. 7–8), relative error of the mean and standard deviation of
one-way latency as the set difference grows, RDA beside LDA and FineComb at equal memory, with
the paper's k = 2 banks and with tacit's k = 3.

Runs :func:`tacit.oneway_latency.sweep.run_sweep` (a simulated Poisson sender at 10 Mpps,
Weibull delays of shape 0.65 as §VII, 100,000 bytes per synopsis: the 5,000 buckets of the
authors' configuration) once with the paper's :meth:`RDAParams.published` (k = 2) and once,
RDA only, with tacit's default :class:`RDAParams` (k = 3). Prints one JSON object per sweep
and, with ``--markdown PATH``, the report's RDA section. Then §IX's prototype: the two agents of
:mod:`tacit.oneway_latency.agent` capture live on either side of an impaired path between
network namespaces (:func:`tacit.experiment.netns.run_netns_experiment`) in one-second
intervals, scored against both sides' tcpdump captures; skipped, with the reason, where
namespaces or tcpdump are unavailable.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from collections import Counter
from pathlib import Path

from report_part import publish
from tacit.errors import ConfigError
from tacit.experiment.netns import NetnsParams, namespaces_unavailable, run_netns_experiment
from tacit.oneway_latency.rda import RDAParams
from tacit.oneway_latency.sweep import SweepParams, plot_sweep, run_sweep

COLUMNS = (
    ("rda", "RDA k = 2"),
    ("rda_k3", "RDA k = 3 (tacit's)"),
    ("lda", "LDA"),
    ("finecomb", "FineComb"),
    ("finecomb_ideal", "FineComb, ideal repair"),
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--markdown", type=Path)
    args = parser.parse_args()
    paper = run_sweep(SweepParams(rda=RDAParams.published()))
    tacit = run_sweep(SweepParams(methods=("rda",), rda=RDAParams()))
    print(json.dumps({"benchmark": "rda_reproduction", "k2": paper.as_dict()}))
    print(json.dumps({"benchmark": "rda_reproduction", "k3": tacit.as_dict()}))
    lines = [
        "# RDA",
        "",
        "## §VII: relative error of the mean latency against the set difference",
        "",
        "Paper (Figs. 7–8; k = 2, 5,000 buckets): below a set difference of about 2,000 RDA "
        "decodes nearly every problematic packet and its mean is exact (relative error ~1e-14), "
        "then rises sharply to ~1e-4; RDA is more accurate than FineComb and LDA throughout. "
        "Here: a simulated 10 Mpps sender, Weibull (0.65) delays, 100,000 bytes per synopsis, "
        f"{len(SweepParams().seeds)} seeds × 5 intervals of 10 ms; "
        "`python bench/bench_rda_reproduction.py`. Cells: mean relative error of the mean "
        "(RDA: and the share of problematic packets decoded).",
        "",
        "| set difference | " + " | ".join(label for _, label in COLUMNS) + " |",
        "|---" * (len(COLUMNS) + 1) + "|",
    ]
    for p, q in zip(paper.points, tacit.points, strict=True):
        methods = dict(p.methods) | {"rda_k3": q.methods["rda"]}
        cells = []
        for key, _ in COLUMNS:
            m = methods.get(key)
            if m is None:
                cells.append("—")
                continue
            cell = f"{m.mean_relative_error:.1e}"
            if m.decoded_fraction is not None:
                cell += f" ({m.decoded_fraction:.0%})"
            cells.append(cell)
        lines.append(f"| {p.set_difference:,.0f} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "What differs: at equal memory (5,000 buckets, 2,500 per bank with k = 2) tacit's RDA with "
        "the paper's k = 2 starts failing to decode well below the paper's ~2,000 (peeling a "
        "2-bank structure stops at a cycle among the differences, which has constant "
        "probability), while k = 3 decodes everything up to ~1,900 and fails at ~4,700. The "
        "paper reports k = 2 as the better choice at a fixed total of buckets (§VIII-B), "
        "`RDAParams.published()`; k = 3 is tacit's default. Exact means show as 0 here (the "
        "paper's 1e-14 is floating-point noise). Where decoding fails, RDA still measures on "
        "its clean buckets and stays at or below FineComb's error.",
    ]
    if args.markdown:
        plot_sweep(paper, args.markdown.parent, prefix="rda-k2-")
        lines += [
            "",
            "The paper's Figs. 7–8 for k = 2 (all methods at equal memory):",
            "",
            "![Relative error of the mean](rda-k2-mean-error.png)",
            "![Relative error of the standard deviation](rda-k2-std-error.png)",
        ]
    lines += prototype()
    report = "\n".join(lines) + "\n"
    publish(report, args.markdown)


def prototype(seconds: float = 8.0) -> list[str]:
    """§IX: both agents live across an impaired namespace path, one-second intervals."""
    head = ["", "## §IX: the two-agent prototype, live", ""]
    reason = namespaces_unavailable()
    if reason:
        return [*head, f"Not run: {reason}."]
    params = NetnsParams(interval_ns=1_000_000_000, duration_s=seconds)
    try:
        with tempfile.TemporaryDirectory() as work:
            r = run_netns_experiment(params, work)
    except ConfigError as e:
        return [*head, f"The run failed: {e}"]
    print(json.dumps({"benchmark": "rda_reproduction", "prototype": r.as_dict()}, default=str))
    counts = Counter(row["status"] for row in r.rows)
    statuses = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
    return [
        *head,
        "Paper: two servers under a ToR switch, iperf traffic, one-second intervals; relative "
        "error of the mean 1e-7–1e-8 and of the standard deviation 0.01–0.1 per interval "
        "(Fig. 11). Here: `tacit experiment netns` with one-second intervals, "
        f"{params.rate_pps:.0f} datagrams/s for {seconds:g} s across a path of "
        f"{params.delay_ms:g} ± {params.jitter_ms:g} ms with {params.loss_percent:g} % loss and "
        f"{params.reorder_percent:g} % reordering ({r.impairment}), both agents capturing live "
        "(libpcap, microsecond timestamps) against tcpdump's nanosecond truth.",
        "",
        f"- intervals completed: {r.complete} of {len(r.rows)} ({statuses}); datagrams sent "
        f"{r.truth_sent}, lost {r.truth_lost}, out of order {r.truth_reordered};",
        f"- relative error of the mean: {r.mean_error:.1e} on average, {r.mean_error_max:.1e} "
        "at most;",
        f"- relative error of the standard deviation: {r.std_error:.1e} on average, "
        f"{r.std_error_max:.1e} at most.",
        "",
        "What differs: datagrams at a low rate on an emulated path rather than iperf on a rack; "
        "the agents' libpcap timestamps are microseconds, so the mean cannot be closer than the "
        "rounding (< 1 µs on milliseconds). An undecodable interval is one whose set difference "
        "RDA's two banks could not peel (§VII above); the agent publishes it as such rather than "
        "a wrong value.",
    ]


if __name__ == "__main__":
    main()
