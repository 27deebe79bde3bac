"""Running the ``tacit`` console script as subprocesses, for the CLI tests."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout
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


def run_here(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """``tacit ARGS`` in this process, as the console script runs it (from ``cwd``), without a
    new process's start-up (about 1.3 s: imports, numba's first cached kernel). For commands a
    process of their own changes nothing for: not those that read the standard input, write
    bytes to the standard output, need an environment variable or a terminal width of their
    own, or end on a signal. Exceptions other than the exit propagate (``--debug``'s too)."""
    from tacit.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    argv, here, sigterm = sys.argv, os.getcwd(), signal.getsignal(signal.SIGTERM)
    sys.argv = ["tacit", *map(str, args)]
    code = 0
    try:
        if cwd is not None:
            os.chdir(cwd)
        with redirect_stdout(out), redirect_stderr(err):
            main()
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        sys.argv = argv
        os.chdir(here)
        signal.signal(signal.SIGTERM, sigterm)
    return subprocess.CompletedProcess(
        ["tacit", *map(str, args)], code, out.getvalue(), err.getvalue()
    )


def finish(
    procs: dict[str, subprocess.Popen | subprocess.CompletedProcess],
) -> dict[str, subprocess.CompletedProcess]:
    """What each command printed and its exit code, once it has ended; commands that already
    ran (:func:`run_here`) as they are."""
    out = {}
    for name, p in procs.items():
        if isinstance(p, subprocess.CompletedProcess):
            out[name] = p
            continue
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
