"""Running the ``tacit`` console script as subprocesses, for the CLI tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TACIT = Path(sys.executable).parent / "tacit"
TIMEOUT = 240


def start(*args: str | Path, cwd: Path, columns: int = 200) -> subprocess.Popen:
    env = {**os.environ, "COLUMNS": str(columns), "NO_COLOR": "1"}
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
