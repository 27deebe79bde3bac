"""Benchmark: commands killed while they write their output leave the previous file or the
complete new one, never a part.

Simulates the embedded shop app (about 50,000 spans) and runs each command below once to
completion, writing over a previous file of other content, for its complete output and its
time T. Then, per signal (SIGTERM, as a service manager stops a process, and SIGKILL), it runs
the command again over the previous file and sends the signal at :data:`FRACTIONS` of T. Each
interrupted run's output must be byte-identical to the previous file or to the complete
output (but for the trace and span ids, drawn afresh on every run). Prints one JSON object:
per command and signal, the runs, how many left the previous file, how many the complete new
one, how many anything else (the target is 0), how many left a temporary ``.partial`` file
beside the output (SIGKILL ends a process before it can remove one; the output itself is
untouched), and how many of those are still there after the next complete write of the same
output (which removes those of processes that no longer run; the target is 0).

    python bench/bench_interrupted_output.py
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import tacit
from tacit.formats import write_otlp
from tacit.formats.blind import write_blind
from tacit.model.roles import infer_roles
from tacit.reconstruct.callgraph import learn_callgraph
from tacit.simulate import load_app, simulate

RATE, DURATION_S = 100, 30.0
FRACTIONS = (0.2, 0.35, 0.5, 0.65, 0.8, 0.95)
"""When each interrupted run is signalled, as a fraction of the complete run's time: the early
ones fall in start-up, the later ones while the output is written."""
_IDS = re.compile(rb"\b[0-9a-f]{16}(?:[0-9a-f]{16})?\b")
"""A span (16 hex digits) or trace (32) id, wherever it is written (alternatives name spans)."""
PREVIOUS = b'{"previous": "a file the interrupted command was told to replace"}\n'


def commands(work: Path) -> dict[str, list[str]]:
    """The commands run, each writing ``work / <name>.out``."""
    cg, blind, ordered = work / "callgraph.yaml", work / "blind.jsonl", work / "ordered.jsonl"
    return {
        "reconstruct (traceweaver, jaeger)": ["reconstruct", str(blind), "--callgraph", str(cg)],
        "reconstruct (traceweaver-online, streamed)": [
            "reconstruct",
            str(ordered),
            "--callgraph",
            str(cg),
            "--algorithm",
            "traceweaver-online",
        ],
        "blind": ["blind", str(work / "traces.otlp.json")],
        "callgraph": ["callgraph", str(work / "traces.otlp.json")],
    }


def start(args: list[str], out: Path) -> subprocess.Popen:
    cli = "from tacit.cli.main import main; main()"
    src = str(Path(tacit.__file__).parents[1])
    env = os.environ | {"PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    argv = [sys.executable, "-c", cli, "--quiet", "--force", *args, "--out", str(out)]
    return subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def complete_run(args: list[str], out: Path) -> tuple[bytes, float]:
    out.write_bytes(PREVIOUS)
    t0 = time.perf_counter()
    proc = start(args, out)
    _, err = proc.communicate()
    if proc.returncode != 0:
        raise SystemExit(f"{args[0]} failed: {err.decode().strip()}")
    return out.read_bytes(), time.perf_counter() - t0


def interrupted(
    args: list[str], out: Path, sig: signal.Signals, after_s: float
) -> tuple[bytes, int]:
    """Run over the previous file, send ``sig`` after ``after_s``: what the output is then,
    and how many temporary files the process left."""
    out.write_bytes(PREVIOUS)
    proc = start(args, out)
    time.sleep(after_s)
    proc.send_signal(sig)
    proc.communicate()
    return out.read_bytes(), sum(f".{proc.pid}." in p.name for p in partials(out))


def partials(out: Path) -> list[Path]:
    """The temporary files of writes of ``out`` left beside it."""
    return list(out.parent.glob(f".{out.name}.*.partial"))


def same(got: bytes, new: bytes) -> bool:
    """Whether ``got`` is the complete output ``new``, but for the trace and span ids a
    reconstruction draws afresh on every run."""
    return len(got) == len(new) and _IDS.sub(b"#", got) == _IDS.sub(b"#", new)


def main() -> None:
    app = load_app(None)
    sim = simulate(app, RATE, duration_s=DURATION_S, seed=5, record_threads=False)
    report: dict = {"spans": len(sim), "fractions": list(FRACTIONS), "commands": {}}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        learn_callgraph(sim).save(work / "callgraph.yaml")
        blind = infer_roles(sim).without_truth()
        write_blind(work / "blind.jsonl", blind)
        write_blind(work / "ordered.jsonl", blind, in_end_order=True)
        write_otlp(work / "traces.otlp.json", sim)
        for name, args in commands(work).items():
            out = work / "out" / f"{len(report['commands'])}.out"
            out.parent.mkdir(exist_ok=True)
            new, seconds = complete_run(args, out)
            row: dict = {"complete_run_s": round(seconds, 2), "output_bytes": len(new)}
            for sig in (signal.SIGTERM, signal.SIGKILL):
                counts = {"runs": 0, "previous": 0, "complete": 0, "other": 0, "partial_left": 0}
                for f in FRACTIONS:
                    got, left = interrupted(args, out, sig, f * seconds)
                    counts["runs"] += 1
                    kind = (
                        "previous" if got == PREVIOUS else "complete" if same(got, new) else "other"
                    )
                    counts[kind] += 1
                    counts["partial_left"] += left
                row[sig.name] = counts
            complete_run(args, out)
            row["partial_after_next_write"] = len(partials(out))
            report["commands"][name] = row
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
