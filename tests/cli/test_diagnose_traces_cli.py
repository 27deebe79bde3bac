"""``tacit diagnose detect`` and ``critical-path`` end to end, run as subprocesses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clirun import TACIT, finish, run_here, start
from tacit.formats.jaeger import write_jaeger
from tacit.simulate import load_app, simulate


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    d = tmp_path_factory.mktemp("diagnose")
    write_jaeger(d / "traces.json", simulate(load_app(None), 50, n_requests=300, seed=7))
    (d / "bad.json").write_text('{"data": [{"traceID": 1, "spans": "x"}]}')
    (d / "bad.rules").write_text("SYMPTOM slow\nPATHOLOGY x DEF slow AND\n")
    assert TACIT.exists(), TACIT
    procs = {
        "cp": run_here(
            "diagnose", "critical-path", "traces.json", "--json", "--html", "r.html", cwd=d
        ),
        "cp_table": start(
            "diagnose", "critical-path", "traces.json", "--slowest", "3", cwd=d, columns=80
        ),
        "detect": run_here(
            "diagnose", "detect", "traces.json", "--by", "endpoint", "--json", cwd=d
        ),
        "detect_table": run_here("diagnose", "detect", "traces.json", cwd=d),
        "bad": run_here("diagnose", "critical-path", "bad.json", cwd=d),
        "blind": run_here(
            "diagnose", "critical-path", "traces.json", "--blind", "--weigh-links", "--json", cwd=d
        ),
        "explain": run_here("diagnose", "explain", "traces.json", "--json", cwd=d),
        "bad_rules": run_here("diagnose", "explain", "traces.json", "--rules", "bad.rules", cwd=d),
        "bad_by": run_here("diagnose", "detect", "traces.json", "--by", "region", cwd=d),
    }
    return d, finish(procs)


def test_critical_path_json_and_report(runs):
    d, r = runs
    assert r["cp"].returncode == 0, r["cp"].stderr
    doc = json.loads(r["cp"].stdout)
    assert doc["traces"] == 300 and len(doc["slowest"]) == 10
    lat = [t["latency_ms"] for t in doc["slowest"]]
    assert lat == sorted(lat, reverse=True)
    for t in doc["slowest"]:
        assert sum(c["share"] for c in t["top"]) <= 1 + 1e-9
        assert t["path"][0].startswith("frontend/")
    assert abs(sum(doc["overall_share"].values()) - 1) < 1e-9
    html = (d / "r.html").read_text()
    assert html.count("<svg") == 10 and "#d62728" in html
    assert r["cp_table"].returncode == 0 and "latency ms" in r["cp_table"].stdout
    # On an 80-column terminal every trace id is shown whole, ready to paste into a search.
    slowest = [t["trace"] for t in doc["slowest"][:3]]
    assert all(len(t) == 32 and t in r["cp_table"].stdout for t in slowest), slowest


def test_detect_json_accounts_for_every_trace(runs):
    _, r = runs
    assert r["detect"].returncode == 0, r["detect"].stderr
    doc = json.loads(r["detect"].stdout)
    acc = doc["accounting"]
    assert acc["traces"] == 300
    verdicts = [k for k in acc if k not in ("traces", "history")]
    assert sum(acc[k] for k in verdicts) == 300
    assert doc["flagged_total"] == acc["slower"] + acc["faster"]
    for f in doc["flagged"]:
        assert f["latency_ms"] > f["q3_ms"] or f["latency_ms"] < f["q1_ms"]
    assert r["detect_table"].returncode == 0


def test_bad_input_is_one_line(runs):
    _, r = runs
    for name in ("bad", "bad_by", "bad_rules"):
        assert r[name].returncode == 2, r[name].stderr
        assert "Traceback" not in r[name].stderr
        assert len(r[name].stderr.strip().splitlines()) == 1, r[name].stderr


def test_blind_critical_paths_sum_to_latency(runs):
    _, r = runs
    assert r["blind"].returncode == 0, r["blind"].stderr
    doc = json.loads(r["blind"].stdout)
    assert doc["blind"] and doc["weigh_links"] and doc["traces"] >= 300
    assert abs(sum(doc["overall_share"].values()) - 1) < 1e-9


def test_explain_evaluates_rules_on_slow_traces(runs):
    _, r = runs
    assert r["explain"].returncode == 0, r["explain"].stderr
    doc = json.loads(r["explain"].stdout)
    assert doc["slow_total"] == doc["accounting"]["slower"]
    for p in doc["slow"]:
        f = p["features"]
        assert f["slow"] is True and 0 <= f["network_share"] <= 1
        assert set(p["holds"]) <= {
            "slow_network",
            "slow_service",
            "fanout_straggler",
            "serial_chain",
        }
        if "slow_network" in p["holds"]:
            assert f["network_share"] >= 0.5
