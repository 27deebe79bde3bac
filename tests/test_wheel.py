"""tacit as a user installs it: a wheel built from the source tree, installed on its own and
run from outside the tree (its package data, entry point and imports complete).

The compiled kernels the tree already has are copied beside the installed modules, as a second
run of an installation finds them: numba keys its cache by the source's content, so they are
used as they are, and the run takes seconds instead of compiling every kernel again for 40 s.
What the wheel holds is what this tests; compiling is tested everywhere else."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_built_wheel_runs_outside_the_source_tree(tmp_path: Path) -> None:
    wheels, target, work = tmp_path / "wheels", tmp_path / "installed", tmp_path / "work"
    work.mkdir()
    pip = [sys.executable, "-m", "pip", "-q"]
    subprocess.run([*pip, "wheel", "--no-deps", "-w", str(wheels), str(ROOT)], check=True)
    (wheel,) = wheels.glob("tacit_traces-*.whl")
    subprocess.run([*pip, "install", "--no-deps", "--target", str(target), str(wheel)], check=True)
    src = ROOT / "src"
    for kernel in (
        *src.glob("tacit/**/__pycache__/*.nbi"),
        *src.glob("tacit/**/__pycache__/*.nbc"),
    ):
        copy = target / kernel.relative_to(src)
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(kernel, copy)
    env = {**os.environ, "PYTHONPATH": str(target), "NO_COLOR": "1"}
    where = subprocess.run(
        [sys.executable, "-c", "import tacit; print(tacit.__file__)"],
        cwd=work, env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert where.stdout.startswith(str(target))  # the wheel's copy, not the source tree
    run = subprocess.run(
        [sys.executable, str(target / "bin" / "tacit"), "demo", "--out", "out", "--requests", "30",
         "--json"],
        cwd=work, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    doc = json.loads(run.stdout)
    assert doc["app"] and (work / "out" / "report.html").exists()
    assert (work / "out" / "capture" / "app.pcap").exists()
