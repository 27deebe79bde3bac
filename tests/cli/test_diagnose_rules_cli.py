"""``tacit diagnose rules`` and ``tacit diagnose tcp`` end to end: the drawn table in a process
of its own (the terminal's width), the rest in the test's process."""

from __future__ import annotations

import json

import pytest

from clirun import TACIT, finish, run_here, start
from ss_sample import SS

RPCS = """id,local,peer,start_s,first_byte_ms,server_ms,slow
lossy,10.0.0.1:443,198.51.100.7:5000,1000.1,1400,10,true
busy,10.0.0.1:443,198.51.100.8:6000,1000.6,60,50,true
client,10.0.0.1:443,198.51.100.8:6000,1000.6,900,5,true
unseen,10.0.0.1:443,192.0.2.1:1,1000.6,50,10,true
"""


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict:
    d = tmp_path_factory.mktemp("rules")
    (d / "ss.txt").write_text(SS)
    (d / "rpcs.csv").write_text(RPCS)
    (d / "bad.csv").write_text("local,peer,start_s,first_byte_ms,server_ms\na,b,1,x,2\n")
    (d / "short.csv").write_text(RPCS.split("\n", 1)[0] + "\n\nlossy,10.0.0.1:443\n")
    (d / "inf.csv").write_text(RPCS.replace(",60,50,", ",inf,50,"))
    (d / "f.jsonl").write_text(
        json.dumps(
            {
                "id": "p1",
                "slow": True,
                "server_bound": True,
                "network_bound": False,
                "client_bound": False,
                "retransmissions": 0,
                "rtt_ns": 5,
                "minrtt_ns": 5,
            }
        )
        + "\n"
        + json.dumps({"id": "p2", "slow": False})
        + "\n"
    )
    (d / "bad.rules").write_text("SYMPTOM a\nPATHOLOGY p DEF (a OR\n")
    assert TACIT.exists(), TACIT
    return finish(
        {
            "rules_table": start("diagnose", "rules", "f.jsonl", cwd=d),
            "rules": run_here("diagnose", "rules", "f.jsonl", "--json", cwd=d),
            "tcp": run_here("diagnose", "tcp", "ss.txt", "--rpcs", "rpcs.csv", "--json", cwd=d),
            "bad_rules": run_here("diagnose", "rules", "f.jsonl", "--rules", "bad.rules", cwd=d),
            "bad_csv": run_here("diagnose", "tcp", "ss.txt", "--rpcs", "bad.csv", cwd=d),
            "short_row": run_here("diagnose", "tcp", "ss.txt", "--rpcs", "short.csv", cwd=d),
            "infinite": run_here("diagnose", "tcp", "ss.txt", "--rpcs", "inf.csv", cwd=d),
        }
    )


def test_rules_json(runs):
    r = runs["rules"]
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    by_id = {p["id"]: p for p in doc["results"]}
    assert by_id["p1"]["holds"] == ["server_slowness"]
    assert by_id["p2"]["holds"] == [] and "client_stack" not in by_id["p2"]["undetermined"]
    assert doc["pathologies"]["server_slowness"] == 1
    assert "server_slowness" in runs["rules_table"].stdout


def test_tcp_split_and_rules(runs):
    r = runs["tcp"]
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["bounds"] == {"server": 1, "network": 1, "client": 1, "undetermined": 1}
    by_id = {p["id"]: p for p in doc["results"]}
    assert [by_id[i]["path"]["bound"] for i in ("lossy", "busy", "client", "unseen")] == [
        "network",
        "server",
        "client",
        None,
    ]
    assert by_id["lossy"]["holds"] == ["path_congestion", "internet_path"]  # rtt 120 >= 2 x 40
    assert by_id["busy"]["holds"] == ["server_slowness"]
    assert by_id["client"]["holds"] == ["client_stack"]
    assert by_id["unseen"]["holds"] == []


def test_bad_input_is_one_line(runs):
    for name, where in (
        ("bad_rules", "bad.rules: record line 3 column 1"),
        ("bad_csv", "line 2"),
        ("short_row", "short.csv: record line 3: 2 fields, the header has 7"),
        ("infinite", "inf.csv: record line 3: bad value: first_byte_ms must be a number of ms"),
    ):
        r = runs[name]
        assert r.returncode == 2, r.stderr
        assert "Traceback" not in r.stderr
        assert len(r.stderr.strip().splitlines()) == 1 and where in r.stderr, r.stderr
