"""The main commands as a person sees them, through a pseudo-terminal: progress while they
work, tables when they are done, and neither on a pipe or with --quiet."""

from __future__ import annotations

import os
import pty
import re
import subprocess
from pathlib import Path

import pytest

from clirun import TACIT
from tacit.formats.blind import write_blind
from tacit.formats.jaeger import write_jaeger
from tacit.model.roles import infer_roles
from tacit.simulate import load_app, simulate

_ESCAPES = re.compile(rb"\x1b\[[0-9;?]*[A-Za-z]")


def on_terminal(*args: str, cwd: Path) -> str:
    """Everything the command wrote to a terminal 100 columns wide (escape codes removed)."""
    main, child = pty.openpty()
    env = {**os.environ, "COLUMNS": "100", "LINES": "40", "TERM": "xterm"}
    env.pop("NO_COLOR", None)
    proc = subprocess.Popen(
        [str(TACIT), *args], cwd=cwd, env=env, stdin=child, stdout=child, stderr=child
    )
    os.close(child)
    chunks = []
    while True:
        try:
            data = os.read(main, 65536)
        except OSError:  # the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    assert proc.wait(timeout=240) == 0, b"".join(chunks).decode(errors="replace")
    os.close(main)
    return _ESCAPES.sub(b"", b"".join(chunks)).decode(errors="replace")


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("terminal")
    spans = simulate(load_app(None), 100, n_requests=300, seed=2)
    write_jaeger(d / "traces.json", spans)
    write_blind(d / "blind.jsonl", infer_roles(spans).without_truth())
    assert subprocess.run([str(TACIT), "callgraph", "traces.json", "--out", "cg.yaml"], cwd=d,
                          capture_output=True).returncode == 0  # fmt: skip
    return d


def test_reconstruct_shows_progress_then_its_summary(work: Path) -> None:
    text = on_terminal("reconstruct", "blind.jsonl", "--callgraph", "cg.yaml", "--out", "t.json",
                       cwd=work)  # fmt: skip
    assert "reconstructing" in text  # the progress bar, drawn while it ran
    assert re.search(r"\d+ spans -> 300 traces in t\.json", text)
    quiet = on_terminal("reconstruct", "blind.jsonl", "--callgraph", "cg.yaml", "--out", "q.json",
                        "--quiet", cwd=work)  # fmt: skip
    assert "reconstructing" not in quiet and "300 traces" in quiet


def test_evaluate_draws_a_table(work: Path) -> None:
    text = on_terminal("evaluate", "traces.json", "--algorithm", "traceweaver,fcfs", cwd=work)
    assert "spans reconstructed" in text  # progress
    rows = [line for line in text.splitlines() if line.startswith(("│ traceweaver", "│ fcfs"))]
    assert len(rows) == 2 and all("%" in row for row in rows)  # a drawn table, one row each


def test_a_pipe_gets_no_progress(work: Path) -> None:
    r = subprocess.run(
        [str(TACIT), "reconstruct", "blind.jsonl", "--callgraph", "cg.yaml", "--out", "p.json"],
        cwd=work,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0 and "reconstructing" not in r.stdout + r.stderr
