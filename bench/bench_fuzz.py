"""Fuzz every command at length: many random malformed inputs and option values per command
(the generators of ``tests/fuzz``), run in process with a time bound.

Prints JSON: cases per command, outcomes (ok / error / usage / traceback / bad exit / timeout /
input modified), seconds, and the first few failing cases. Exits 1 when any case failed.

    python bench/bench_fuzz.py [--examples 100] [--commands 'diagnose tail,blind']
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the shared samples
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "fuzz"))

from generators import COMMANDS, GOOD, PROFILES, Command, build_seeds, cases, describe, run_case

SHOWN = 5
"""Failing cases reported per command."""


def fuzz(command: Command, seeds: dict[str, bytes], examples: int) -> dict:
    """Run ``examples`` random cases of ``command``; count outcomes, keep the first failures."""
    outcomes: Counter[str] = Counter()
    failures: list[dict] = []
    t0 = time.perf_counter()

    @settings(PROFILES["bench"], max_examples=examples)
    @given(data=st.data())
    def one(data: st.DataObject) -> None:
        with tempfile.TemporaryDirectory() as d:
            case = data.draw(cases(command, seeds, Path(d)))
            run = run_case(case)
            if case.note == "valid inputs" and run.outcome in GOOD and run.outcome != "ok":
                run.outcome = "valid input refused"
            outcomes[run.outcome] += 1
            if run.outcome not in GOOD and len(failures) < SHOWN:
                failures.append(describe(case, run))

    one()
    return {
        "cases": sum(outcomes.values()),
        "outcomes": dict(outcomes),
        "seconds": round(time.perf_counter() - t0, 1),
        "failures": failures,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--examples", type=int, default=100, help="Cases per command.")
    ap.add_argument("--commands", default="", help="Comma-separated command names (default all).")
    args = ap.parse_args()
    os.environ.setdefault("MPLBACKEND", "Agg")
    wanted = {c for c in args.commands.split(",") if c}
    with tempfile.TemporaryDirectory() as d:
        seeds = build_seeds(Path(d))
        report = {
            c.name: fuzz(c, seeds, args.examples)
            for c in COMMANDS
            if not wanted or c.name in wanted
        }
    failed = sum(n for r in report.values() for k, n in r["outcomes"].items() if k not in GOOD)
    print(
        json.dumps(
            {
                "cases": sum(r["cases"] for r in report.values()),
                "failed": failed,
                "commands": report,
            },
            indent=1,
        )
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
