"""``-`` for a file: the standard input (any format, gzip included) and the standard output,
with the command's own messages moved to stderr so that the data stays alone on stdout."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
from pathlib import Path

import pytest

from clirun import TACIT
from tacit.formats.blind import read_blind
from tacit.formats.jaeger import write_jaeger
from tacit.simulate import load_app, simulate


def tacit(*args: str, stdin: bytes = b"", cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    return subprocess.run(
        [str(TACIT), *args], input=stdin, capture_output=True, cwd=cwd, env=env, timeout=240
    )


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("stdio")
    write_jaeger(d / "traces.json", simulate(load_app(None), 50, n_requests=20, seed=3))
    return d


def test_a_pipeline_through_the_standard_streams(traces: Path) -> None:
    data = gzip.compress((traces / "traces.json").read_bytes())
    blind = tacit("blind", "-", "--out", "-", stdin=data, cwd=traces)
    assert blind.returncode == 0, blind.stderr
    (traces / "piped.jsonl").write_bytes(blind.stdout)
    assert len(read_blind(traces / "piped.jsonl")) > 0  # stdout holds the spans and nothing else
    cg = tacit("callgraph", "traces.json", "--out", "cg.yaml", cwd=traces)
    assert cg.returncode == 0, cg.stderr
    args = ("reconstruct", "-", "--callgraph", "cg.yaml", "--out=-", "--json")
    rec = tacit(*args, stdin=blind.stdout, cwd=traces)
    assert rec.returncode == 0, rec.stderr
    doc = json.loads(rec.stdout)
    assert json.loads(rec.stderr)["traces"] == len(doc["data"]) > 0


def test_standard_input_is_read_once(traces: Path) -> None:
    r = tacit("evaluate", "-", "-", stdin=b"{}", cwd=traces)
    assert r.returncode == 2 and b"standard input can be read once" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_standard_input_is_named_stdin_in_errors(traces: Path) -> None:
    r = tacit("evaluate", "-", stdin=b"garbage {", cwd=traces)
    assert r.returncode == 2
    assert r.stderr.decode().startswith("tacit: error: stdin: unknown span format")
