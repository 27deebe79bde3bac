"""``tacit diagnose tail`` and ``abtest`` as a user runs them, on real traces."""

from __future__ import annotations

import json

import pytest

from clirun import finish, run_here

HOTEL = "traceweaver/hotel_reservation/load100.jaeger.json.gz"


@pytest.mark.realdata
def test_tail_and_abtest_json(shared_data, tmp_path):
    f = shared_data / HOTEL
    procs = {
        "tail": run_here(
            "diagnose",
            "tail",
            f,
            "--blind",
            "--inject",
            "reservation:40",
            "--inject",
            "profile:40",
            "--json",
            cwd=tmp_path,
        ),
        "ab": run_here(
            "diagnose",
            "abtest",
            f,
            "--service",
            "reservation",
            "--share",
            "0.2",
            "--effect",
            "-0.5",
            "--json",
            cwd=tmp_path,
        ),
        "bad": run_here("diagnose", "tail", f, "--inject", "reservation", cwd=tmp_path),
        "basis": run_here(
            "diagnose", "abtest", f, "--service", "reservation", "--basis", "wall", cwd=tmp_path
        ),
    }
    res = finish(procs)
    tail = json.loads(res["tail"].stdout)
    assert sorted(tail["culprits"]) == ["profile", "reservation"]
    assert set(tail["profile"]) == {"frontend", "search", "geo", "rate", "reservation", "profile"}
    assert len(tail["per_span"]["culprits"]) == 6
    ab = json.loads(res["ab"].stdout)
    assert ab["routed_to_b"] == 200 and ab["tests"][0]["p"] < 0.05
    assert res["bad"].returncode == 2 and "SERVICE:MS" in res["bad"].stderr
    assert res["basis"].returncode == 2 and "basis must be one of self, e2e" in res["basis"].stderr


def _jaeger_span(sid: str, parent: str, service: str, kind: str, start: int, us: int) -> dict:
    ref = [{"refType": "CHILD_OF", "traceID": "abc", "spanID": parent}]
    return {
        "traceID": "abc",
        "spanID": sid,
        "operationName": "op",
        "references": ref,
        "startTime": start,
        "duration": us,
        "tags": [{"key": "span.kind", "type": "string", "value": kind}],
        "processID": service,
    }


def test_a_cycle_of_parents_is_one_line_naming_the_trace(tmp_path):
    """Every command that reads traces refuses parent links that would send it round a cycle."""
    spans = [
        _jaeger_span("r", "c2", "front", "server", 0, 100),
        _jaeger_span("c1", "r", "front", "client", 10, 50),
        _jaeger_span("s1", "c1", "back", "server", 12, 40),
        _jaeger_span("c2", "s1", "back", "client", 15, 20),
    ]
    processes = {p: {"serviceName": p} for p in ("front", "back")}
    f = tmp_path / "cycle.json"
    f.write_text(json.dumps({"data": [{"traceID": "abc", "spans": spans, "processes": processes}]}))
    res = {
        "tail": run_here("diagnose", "tail", f, cwd=tmp_path),
        "ab": run_here("diagnose", "abtest", f, "--service", "back", cwd=tmp_path),
        "evaluate": run_here("evaluate", f, cwd=tmp_path),
        "paths": run_here("paths", "evaluate", f, cwd=tmp_path),
        "blind": run_here("blind", f, "--out", tmp_path / "b.jsonl", cwd=tmp_path),
        "critical": run_here("diagnose", "critical-path", f, "--blind", cwd=tmp_path),
    }
    assert not (tmp_path / "b.jsonl").exists()
    for r in res.values():
        assert r.returncode == 2
        assert r.stderr.count("\n") == 1 and "trace abc: parent links form a cycle" in r.stderr
