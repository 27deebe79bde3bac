"""Benchmark: YTrace's network diagnosis from device syslogs (arXiv 1602.03273, §4).

Prints one JSON object with the issue's target tables:

* ``templates``: Drain3 grouping accuracy (loghub's metric) on each loghub 2k sample in
  ../shared/data/logs/loghub (one generic configuration for all), with messages per second;
  and rule mining on the same sample over a topology linking its two busiest devices: its
  seconds and its peak traced memory (the rule mining's series are sparse: dense, they
  needed 72 GiB on HPC and 214 GiB on BGL). Skipped with a reason when the data is absent.
* ``rules``: precision and recall of the mined causal rules on simulated cascades
  (link down → STP change → peer line-protocol down) for seeds 0–4 in :data:`SCENARIOS`
  (noise levels and incident rates over 12 hours), with the seconds mining takes.
  With few incidents (the last scenario: about 12 in 12 hours) the exact test lacks power:
  with n matched pairs its p-value cannot go below 2^-n, before the multiple-test correction.
* ``queueing``: precision and recall of the RPCs flagged for queueing against the RPCs the
  simulation delayed, and the share of those whose incident's problem graph is attached.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import time
import tracemalloc
from collections import Counter
from pathlib import Path

import numpy as np

from tacit.diagnosis.problem_graphs import graphs_for_rpcs, problem_graphs
from tacit.diagnosis.queueing import queueing_delay
from tacit.diagnosis.syslog_causality import mine_syslog_rules
from tacit.diagnosis.syslog_templates import grouping_accuracy, mine_templates
from tacit.formats.syslog import parse_syslog_text, read_loghub_truth, read_syslog
from tacit.simulate.syslog_cascades import CascadeParams, rule_precision_recall, simulate_cascades

LOGHUB = Path(__file__).resolve().parents[2] / "shared" / "data" / "logs" / "loghub"
DATASETS = ("BGL", "HPC", "Linux", "OpenSSH", "Thunderbird")
SEEDS = range(5)
SCENARIOS = ((2.0, 6.0), (10.0, 6.0), (30.0, 6.0), (10.0, 1.0))
"""(noise lines per device, template and hour; incidents per hour)."""


def template_table() -> list[dict] | str:
    if not LOGHUB.is_dir():
        return f"skipped: {LOGHUB} not found"
    rows = []
    for name in DATASETS:
        read = read_syslog(LOGHUB / name / f"{name}_2k.log")
        truth = read_loghub_truth(
            LOGHUB / name / f"{name}_2k.log_structured.csv", read.records.line
        )
        t0 = time.perf_counter()
        tpl = mine_templates(read.records.content)
        seconds = time.perf_counter() - t0
        busiest = np.argsort(-np.bincount(read.records.device))[:2]
        names = [read.records.devices[int(d)] for d in busiest]
        link = [(names[0], names[1])] if len(names) == 2 else []
        tracemalloc.start()
        t0 = time.perf_counter()
        mine_syslog_rules(read.records, link)
        rule_seconds = time.perf_counter() - t0
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        rows.append(
            {
                "dataset": name,
                "messages": len(read.records),
                "true_templates": len(set(truth)),
                "mined_templates": len(tpl.texts),
                "grouping_accuracy": round(grouping_accuracy(tpl.template, truth), 3),
                "messages_per_s": round(len(read.records) / seconds),
                "rules_seconds": round(rule_seconds, 2),
                "rules_peak_mb": round(peak / 2**20, 1),
            }
        )
    return rows


def true_names(sim, templates) -> list[str]:
    names = np.asarray(sim.line_template)
    return [
        Counter(names[templates.template == k]).most_common(1)[0][0]
        for k in range(len(templates.texts))
    ]


def rules_and_queueing() -> tuple[list[dict], list[dict]]:
    rule_rows, queue_rows = [], []
    for noise, incidents in SCENARIOS:
        prec, rec, secs, lines = [], [], [], []
        for seed in SEEDS:
            p = dataclasses.replace(
                CascadeParams(),
                seed=seed,
                noise_per_device_hour=noise,
                incidents_per_hour=incidents,
            )
            sim = simulate_cascades(p)
            read = parse_syslog_text(sim.text())
            t0 = time.perf_counter()
            mined = mine_syslog_rules(read.records, sim.topology.links())
            secs.append(time.perf_counter() - t0)
            names = true_names(sim, mined.templates)
            pr, rc = rule_precision_recall(
                [(names[r.cause], names[r.effect], r.scope) for r in mined.rules]
            )
            prec.append(pr)
            rec.append(rc)
            lines.append(len(sim.lines))
            if (noise, incidents) == SCENARIOS[0]:
                queue_rows.append(queueing_row(seed, sim, read, mined))
        rule_rows.append(
            {
                "noise_per_device_template_hour": noise,
                "incidents_per_hour": incidents,
                "lines_mean": round(statistics.mean(lines)),
                "precision": [round(x, 3) if x == x else None for x in prec],
                "recall": [round(x, 3) for x in rec],
                # Precision is undefined (NaN) for a seed that yields no rule at all.
                "precision_mean": round(float(np.nanmean(prec)), 3)
                if any(x == x for x in prec)
                else None,
                "seeds_without_rules": sum(x != x for x in prec),
                "recall_mean": round(statistics.mean(rec), 3),
                "mine_seconds_mean": round(statistics.mean(secs), 3),
            }
        )
    return rule_rows, queue_rows


def queueing_row(seed: int, sim, read, mined) -> dict:
    rec = read.records
    graphs = problem_graphs(
        rec.time, rec.device, mined.templates.template, rec.devices, mined.rules, sim.topology
    )
    q = queueing_delay(
        sim.rpc_time, sim.rpc_src, sim.rpc_dst, sim.rpc_one_way_ns, sim.rpc_end_to_end_ns
    )
    truth = sim.rpc_incident >= 0
    tp = np.flatnonzero(q.flagged & truth)
    attached = graphs_for_rpcs(
        sim.rpc_time[tp], sim.rpc_src[tp], sim.rpc_dst[tp], graphs, sim.topology
    )
    right = 0
    for i, ids in zip(tp, attached, strict=True):
        t0, dev, _ = sim.incidents[sim.rpc_incident[i]]
        right += any(graphs[j].has_event(dev, t0) for j in ids)
    return {
        "seed": seed,
        "rpcs": len(truth),
        "delayed": int(truth.sum()),
        "flagged": int(q.flagged.sum()),
        "precision": round(len(tp) / max(1, int(q.flagged.sum())), 3),
        "recall": round(len(tp) / max(1, int(truth.sum())), 3),
        "incident_graph_attached": round(right / max(1, len(tp)), 3),
        "incidents": len(sim.incidents),
        "problem_graphs": len(graphs),
    }


def main() -> None:
    rules, queueing = rules_and_queueing()
    print(json.dumps({"templates": template_table(), "rules": rules, "queueing": queueing}))


if __name__ == "__main__":
    main()
