"""``tacit diagnose syslog templates|mine|problems`` end to end, run as subprocesses."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from clirun import finish, start
from tacit.simulate.syslog_cascades import CascadeParams, simulate_cascades

S = 1_000_000_000


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    d = tmp_path_factory.mktemp("syslog")
    sim = simulate_cascades(CascadeParams(seed=11, duration_ns=8 * 3600 * S, n_rpcs=10_000))
    (d / "switches.log").write_text(sim.text())
    (d / "topo.txt").write_text("".join(f"{a} {b}\n" for a, b in sim.topology.links()))
    with open(d / "rpcs.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["time_ns", "src", "dst", "one_way_ns", "end_to_end_ns"])
        w.writerows(
            zip(
                sim.rpc_time,
                sim.rpc_src,
                sim.rpc_dst,
                sim.rpc_one_way_ns,
                sim.rpc_end_to_end_ns,
                strict=True,
            )
        )
    (d / "bad.log").write_text("\nnot a syslog line at all\n")
    (d / "badtopo.txt").write_text("a b c\n")
    base = ("diagnose", "syslog")
    procs = {
        "mine": start(*base, "mine", "switches.log", "--topology", "topo.txt", "--json", cwd=d),
        "problems": start(
            *base,
            "problems",
            "switches.log",
            "--topology",
            "topo.txt",
            "--rpcs",
            "rpcs.csv",
            "--json",
            cwd=d,
        ),
        "templates": start(*base, "templates", "switches.log", cwd=d),
        "bad": start(*base, "templates", "bad.log", cwd=d),
        "bad_topo": start(*base, "mine", "switches.log", "--topology", "badtopo.txt", cwd=d),
    }
    return d, {"sim": sim, **finish(procs)}


def test_mine_json_names_the_true_rules(runs):
    _, r = runs
    assert r["mine"].returncode == 0, r["mine"].stderr
    rules = json.loads(r["mine"].stdout)["rules"]
    got = {(x["cause"].split(":")[0], x["effect"].split(":")[0], x["scope"]) for x in rules}
    assert got == {
        ("%LINK-3-UPDOWN", "%SPANTREE-5-TOPOTRAP", "intra"),
        ("%SPANTREE-5-TOPOTRAP", "%LINEPROTO-5-UPDOWN", "inter"),
    }


def test_problems_attach_graphs_to_flagged_rpcs(runs):
    _, r = runs
    assert r["problems"].returncode == 0, r["problems"].stderr
    doc = json.loads(r["problems"].stdout)
    sim = r["sim"]
    assert len(doc["problem_graphs"]) >= 0.8 * len(sim.incidents)
    roots = [g["nodes"][i]["template"] for g in doc["problem_graphs"] for i in g["roots"]]
    assert sum(t.startswith("%LINK-3-UPDOWN") for t in roots) >= 0.8 * len(sim.incidents)
    flagged = doc["flagged_rpcs"]
    assert flagged and all(sim.rpc_incident[x["row"]] >= 0 for x in flagged)
    assert sum(bool(x["problem_graphs"]) for x in flagged) >= 0.9 * len(flagged)


def test_templates_table(runs):
    _, r = runs
    assert r["templates"].returncode == 0, r["templates"].stderr
    assert (
        "9 templates" in r["templates"].stdout and "%SPANTREE-5-TOPOTRAP" in r["templates"].stdout
    )


def test_bad_inputs_one_line_exit_2(runs):
    _, r = runs
    for name, where in (("bad", "bad.log: record line 2"), ("bad_topo", "record line 1")):
        assert r[name].returncode == 2, r[name].stderr
        assert where in r[name].stderr and len(r[name].stderr.strip().splitlines()) == 1


def test_templates_scored_on_loghub(shared_data, tmp_path):
    d = shared_data / "logs" / "loghub" / "OpenSSH"
    p = start(
        "diagnose",
        "syslog",
        "templates",
        d / "OpenSSH_2k.log",
        "--truth",
        d / "OpenSSH_2k.log_structured.csv",
        "--json",
        cwd=tmp_path,
    )
    done = finish({"t": p})["t"]
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["grouping_accuracy"] >= 0.7
