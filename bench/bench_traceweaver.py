"""Benchmark: trace reconstruction accuracy and speed on the real data (issue: TraceWeaver).

Prints one JSON object: per file, every algorithm's end-to-end accuracy, link and top-5
accuracy, seconds and spans per second (reading + reconstruction + scoring, one core), and the
peak resident memory of the process. Skips (with a reason in the JSON) when ../shared/data is
absent.
"""

from __future__ import annotations

import json
import resource
import sys
from pathlib import Path

from tacit.reconstruct.pipeline import evaluate

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
LOADS = (25, 50, 75, 100, 125, 150)


def files() -> list[tuple[str, list[Path]]]:
    out = []
    for app in ("hotel_reservation", "nodejs_microservices"):
        for load in LOADS:
            out.append(
                (f"{app} load{load}", [DATA / f"traceweaver/{app}/load{load}.jaeger.json.gz"])
            )
    for app, day, minutes in (
        ("online_boutique", "2022-08-22", ("03_53", "07_26")),
        ("train_ticket", "2023-01-29", ("08_43",)),
    ):
        for m in minutes:
            out.append((f"nezha {app} {m}", [DATA / f"nezha/{app}/{day}/{m}_trace.csv.gz"]))
    return out


def main() -> None:
    if not DATA.is_dir():
        print(json.dumps({"benchmark": "traceweaver", "skipped": f"{DATA} absent"}))
        return
    only = sys.argv[1:]
    rows = []
    for name, paths in files():
        if only and not any(o in name for o in only):
            continue
        ev = evaluate(paths)
        rows.append(
            {
                "file": name,
                "traces": ev.traces,
                "spans": ev.spans,
                "callgraph": ev.callgraph,
                "results": {
                    r["algorithm"]: {
                        k: (round(v, 4) if isinstance(v, float) else v)
                        for k, v in r.items()
                        if k
                        in (
                            "accuracy",
                            "link_accuracy",
                            "top5_accuracy",
                            "seconds",
                            "spans_per_second",
                            "unmapped",
                        )
                    }
                    for r in ev.results
                },
            }
        )
        print(
            f"# {name}: "
            + ", ".join(f"{a} {100 * r['accuracy']:.1f}%" for a, r in rows[-1]["results"].items()),
            file=sys.stderr,
        )
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"benchmark": "traceweaver", "files": rows, "peak_rss_mb": round(peak_mb, 1)}))


if __name__ == "__main__":
    main()
