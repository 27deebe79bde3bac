"""Reproduction: RDA §VII (Figs. 7–8), relative error of the mean and standard deviation of
one-way latency as the set difference grows, RDA beside LDA and FineComb at equal memory, with
the paper's k = 2 banks and with tacit's k = 3.

Runs :func:`tacit.oneway_latency.sweep.run_sweep` (a simulated Poisson sender at 10 Mpps,
Weibull delays of shape 0.65 as §VII, 100,000 bytes per synopsis: the 5,000 buckets of the
authors' configuration) once with the default :class:`RDAParams` (k = 2) and once, RDA only,
with :meth:`RDAParams.tacit` (k = 3). Prints one JSON object per sweep and, with
``--markdown PATH``, the report's RDA section. The §IX prototype run (two agents, live
captures) is ``tacit experiment netns``; its numbers are not gathered here.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

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
    paper = run_sweep(SweepParams())
    tacit = run_sweep(SweepParams(methods=("rda",), rda=RDAParams.tacit()))
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
        "paper reports k = 2 as the better choice at a fixed total of buckets; it is the default "
        "(§VIII-B), and k = 3 is `RDAParams.tacit()`. Exact means show as 0 here (the paper's "
        "1e-14 is floating-point noise). Where decoding fails, RDA still measures on its clean "
        "buckets and stays at or below FineComb's error.",
    ]
    if args.markdown:
        plot_sweep(paper, args.markdown.parent, prefix="rda-k2-")
        lines += [
            "",
            "The paper's Figs. 7–8 for k = 2 (all methods at equal memory):",
            "",
            "![Relative error of the mean](reproduction/rda-k2-mean-error.png)",
            "![Relative error of the standard deviation](reproduction/rda-k2-std-error.png)",
        ]
    report = "\n".join(lines) + "\n"
    print(report)
    if args.markdown:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(report)


if __name__ == "__main__":
    main()
