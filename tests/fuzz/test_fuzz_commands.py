"""Every command on malformed inputs and option values, in process: each run ends in success or
in one ``tacit: error:`` line with exit code 2 (or typer's usage error for a refused option)
within :data:`~generators.TIMEOUT_S`, never in a traceback or a hang, and leaves its input files
byte-identical. Valid inputs must succeed: a refusal of them would be silent data loss."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from generators import (
    COMMANDS,
    GOOD,
    PROFILES,
    TRACE_KINDS,
    Command,
    build_seeds,
    cases,
    describe,
    input_kinds,
    materialize,
    run_case,
    run_cli,
)
from hypothesis import given
from hypothesis import strategies as st

PROFILE = PROFILES[os.environ.get("TACIT_FUZZ_PROFILE", "ci")]


@pytest.fixture(scope="module")
def seeds(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    return build_seeds(tmp_path_factory.mktemp("seeds"))


VALID = [(c, t) for c in COMMANDS for t in (TRACE_KINDS if "{traces}" in c.args else ("jaeger",))]


@pytest.mark.parametrize(("command", "traces"), VALID, ids=[f"{c.name}-{t}" for c, t in VALID])
def test_valid_inputs_succeed(
    command: Command, traces: str, seeds: dict[str, bytes], tmp_path: Path
) -> None:
    kinds = input_kinds(command, traces)
    case = materialize(command, kinds, {n: seeds[k] for n, k in kinds.items()}, tmp_path)
    run = run_case(case, timeout_s=None)  # the first run of a command may compile its kernels
    assert run.outcome == "ok", describe(case, run)


@pytest.mark.parametrize("command", COMMANDS, ids=[c.name for c in COMMANDS])
def test_malformed_inputs_fail_cleanly(command: Command, seeds: dict[str, bytes]) -> None:
    @PROFILE
    @given(data=st.data())
    def check(data: st.DataObject) -> None:
        with tempfile.TemporaryDirectory() as d:
            case = data.draw(cases(command, seeds, Path(d)))
            run = run_case(case)
            assert run.outcome in GOOD, describe(case, run)
            if case.note == "valid inputs":
                assert run.outcome == "ok", describe(case, run)

    check()


def test_the_harness_tells_every_outcome_apart(
    seeds: dict[str, bytes], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the properties rest on: each outcome is recognized, so the suite can fail."""
    traces = tmp_path / "t.json"
    traces.write_bytes(seeds["jaeger"])
    assert run_cli(["callgraph", str(traces)]).outcome == "ok"
    assert run_cli(["callgraph", str(tmp_path / "absent.json")]).outcome == "error"
    assert run_cli(["diagnose", "tail", str(traces), "--percent", "x"]).outcome == "usage"
    assert run_cli(["evaluate", str(traces)], timeout_s=1e-3).outcome == "timeout"

    def crash() -> None:
        raise RuntimeError("a defect")

    monkeypatch.setattr("tacit.cli.main.app", crash)
    run = run_cli(["callgraph", str(traces)])
    assert run.outcome == "traceback" and "RuntimeError: a defect" in run.stderr


HANG = """
import sys
sys.path[:0] = {paths!r}
import generators
from numba import njit

@njit
def spin(n):
    i = 0
    while n > 0:  # never ends, and never gives the interpreter a chance to handle a signal
        i += 1
    return i

spin.compile("(int64,)")  # compiled before the timer starts
generators.WATCHDOG_S = 1.0
with generators._alarm(0.5):
    spin(1)
"""


def test_a_hang_inside_compiled_code_ends_the_process_with_its_stack(tmp_path: Path) -> None:
    """The timer cannot interrupt a numba loop; the watchdog ends the process instead of
    letting the suite hang, and shows where it was."""
    here = Path(__file__).resolve().parent
    script = HANG.format(paths=[str(here), str(here.parent)])
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode != 0
    assert "Timeout (0:00:01.500000)!" in done.stderr and 'File "<string>", line 17' in done.stderr
