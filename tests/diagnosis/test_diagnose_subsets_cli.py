"""``tacit diagnose tail`` and ``abtest`` as a user runs them, on real traces."""

from __future__ import annotations

import json

import pytest

from clirun import finish, start

HOTEL = "traceweaver/hotel_reservation/load100.jaeger.json.gz"


@pytest.mark.realdata
def test_tail_and_abtest_json(shared_data, tmp_path):
    f = shared_data / HOTEL
    procs = {
        "tail": start(
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
        "ab": start(
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
        "bad": start("diagnose", "tail", f, "--inject", "reservation", cwd=tmp_path),
    }
    res = finish(procs)
    tail = json.loads(res["tail"].stdout)
    assert sorted(tail["culprits"]) == ["profile", "reservation"]
    assert set(tail["profile"]) == {"frontend", "search", "geo", "rate", "reservation", "profile"}
    assert len(tail["per_span"]["culprits"]) == 6
    ab = json.loads(res["ab"].stdout)
    assert ab["routed_to_b"] == 200 and ab["tests"][0]["p"] < 0.05
    assert res["bad"].returncode == 2 and "SERVICE:MS" in res["bad"].stderr
