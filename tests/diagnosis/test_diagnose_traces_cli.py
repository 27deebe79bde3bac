"""``tacit diagnose detect`` and ``critical-path`` end to end, run as subprocesses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clirun import TACIT, finish, start
from tacit.formats.jaeger import write_jaeger
from tacit.simulate.microservices import load_app, simulate


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    d = tmp_path_factory.mktemp("diagnose")
    write_jaeger(d / "traces.json", simulate(load_app(None), 50, n_requests=300, seed=7))
    (d / "bad.json").write_text('{"data": [{"traceID": 1, "spans": "x"}]}')
    assert TACIT.exists(), TACIT
    procs = {
        "cp": start(
            "diagnose", "critical-path", "traces.json", "--json", "--html", "r.html", cwd=d
        ),
        "cp_table": start("diagnose", "critical-path", "traces.json", "--slowest", "3", cwd=d),
        "detect": start("diagnose", "detect", "traces.json", "--by", "endpoint", "--json", cwd=d),
        "detect_table": start("diagnose", "detect", "traces.json", cwd=d),
        "bad": start("diagnose", "critical-path", "bad.json", cwd=d),
        "bad_by": start("diagnose", "detect", "traces.json", "--by", "region", cwd=d),
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
    for name in ("bad", "bad_by"):
        assert r[name].returncode == 2, r[name].stderr
        assert "Traceback" not in r[name].stderr
        assert len(r[name].stderr.strip().splitlines()) == 1, r[name].stderr
