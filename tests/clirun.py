"""Running the ``tacit`` console script as subprocesses, for the CLI tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TACIT = Path(sys.executable).parent / "tacit"
TIMEOUT = 240


def start(
    *args: str | Path, cwd: Path, columns: int = 200, env: dict[str, str] | None = None
) -> subprocess.Popen:
    """``tacit ARGS`` in ``cwd``, with ``env`` added to this process's environment."""
    env = {**os.environ, "COLUMNS": str(columns), "NO_COLOR": "1", **(env or {})}
    return subprocess.Popen(
        [str(TACIT), *map(str, args)],
        cwd=cwd,
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def finish(procs: dict[str, subprocess.Popen]) -> dict[str, subprocess.CompletedProcess]:
    out = {}
    for name, p in procs.items():
        stdout, stderr = p.communicate(timeout=TIMEOUT)
        out[name] = subprocess.CompletedProcess(p.args, p.returncode, stdout, stderr)
    return out


def ok(run: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert run.returncode == 0, (
        f"exit {run.returncode}\nstdout:\n{run.stdout}\nstderr:\n{run.stderr}"
    )
    assert "Traceback" not in run.stderr
    return run


def one_error_line(run: subprocess.CompletedProcess, names: str) -> str:
    """The one line of a command that failed with exit 2, which contains ``names``."""
    assert run.returncode == 2, run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1, run.stderr
    assert lines[0].startswith("tacit: error: "), lines[0]
    assert names in lines[0]
    assert "Traceback" not in run.stderr and "Traceback" not in run.stdout
    return lines[0]
