"""``tacit paths link`` and ``tacit paths evaluate`` end to end, run as subprocesses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clirun import TACIT, finish, run_here
from tacit.formats.jaeger import write_jaeger
from tacit.simulate import load_app, simulate


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    d = tmp_path_factory.mktemp("paths")
    write_jaeger(d / "traces.json", simulate(load_app(None), 10, n_requests=60, seed=5))
    (d / "bad.csv").write_text("sender,receiver,send_time\nA,B,not-a-time\n")
    assert TACIT.exists(), TACIT
    procs = {
        "evaluate": run_here(
            "paths", "evaluate", "traces.json", "--clock-offset-max", "2s", "--json", cwd=d
        ),
        "link": run_here("paths", "link", "traces.json", "--json", "--timeline", "tl", cwd=d),
        "table": run_here("paths", "link", "traces.json", cwd=d),
        "bad": run_here("paths", "link", "bad.csv", cwd=d),
        "bad_offset": run_here(
            "paths", "evaluate", "traces.json", "--clock-offset-max", "x", cwd=d
        ),
    }
    return d, finish(procs)


def test_evaluate_json(runs):
    _, r = runs
    assert r["evaluate"].returncode == 0, r["evaluate"].stderr
    doc = json.loads(r["evaluate"].stdout)
    for key in (
        "messages",
        "parent_accuracy",
        "pattern_precision",
        "pattern_recall",
        "clock_offset_error_ms",
        "seconds",
        "messages_per_second",
    ):
        assert key in doc
    # One request at a time (10/s, millisecond service times): linking is all but exact.
    assert doc["parent_accuracy"] > 0.95
    assert doc["clock_offset_error_ms"] < 1.0


def test_link_json_and_timelines(runs):
    d, r = runs
    assert r["link"].returncode == 0, r["link"].stderr
    doc = json.loads(r["link"].stdout)
    assert doc["messages"] == doc["accounting"]["messages"]
    expected = [p["expected"] for p in doc["patterns"]]
    assert expected and expected == sorted(expected, reverse=True)  # WAP5 §6.6's default order
    assert any(p["count"] >= 1 for p in doc["patterns"])
    assert doc["timelines"] and all((d / p).exists() for p in doc["timelines"])
    assert "count" in r["table"].stdout and r["table"].returncode == 0


def test_bad_input_is_one_line(runs):
    _, r = runs
    for name in ("bad", "bad_offset"):
        assert r[name].returncode == 2, r[name].stderr
        assert "Traceback" not in r[name].stderr
        assert len(r[name].stderr.strip().splitlines()) == 1, r[name].stderr
