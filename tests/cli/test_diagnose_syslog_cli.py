"""``tacit diagnose syslog templates|mine|problems`` end to end, run as subprocesses."""

from __future__ import annotations

import csv
import json
import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from clirun import finish, run_here
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
        "mine": run_here(*base, "mine", "switches.log", "--topology", "topo.txt", "--json", cwd=d),
        "problems": run_here(
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
        "templates": run_here(*base, "templates", "switches.log", cwd=d),
        "bad": run_here(*base, "templates", "bad.log", cwd=d),
        "bad_topo": run_here(*base, "mine", "switches.log", "--topology", "badtopo.txt", cwd=d),
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
    p = run_here(
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


RFC3339 = (
    "2024-05-01T12:34:56.123456+00:00 web1 nginx[812]: upstream timed out\n"
    "2024-05-01T14:34:57+02:00 web2 nginx[813]: upstream timed out\n"
)
RFC3164 = "Dec 31 23:59:59 core1 sshd[1]: session opened\nJan  1 00:00:01 core1 sshd[1]: x\n"
CUSTOM = "1714566896.5 | db1 | checkpoint starting\n1714566897.25 | db2 | checkpoint complete\n"
CUSTOM_REGEX = r"(?P<time>\S+) \| (?P<host>\S+) \| (?P<message>.*)"


@pytest.fixture(scope="module")
def reading(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """The reading options of the syslog commands, run once each."""
    d = tmp_path_factory.mktemp("reading")
    (d / "iso.log").write_text(RFC3339)
    (d / "bsd.log").write_text(RFC3164)
    stamp = datetime(2025, 1, 3, tzinfo=UTC).timestamp()
    os.utime(d / "bsd.log", (stamp, stamp))
    (d / "custom.log").write_text(CUSTOM)
    (d / "mixed.log").write_text(RFC3339 + "garbage [not] a line\n" + RFC3339)
    templates = ("diagnose", "syslog", "templates")
    runs = {
        "iso": (*templates, "iso.log", "--json"),
        "bsd_mtime": (*templates, "bsd.log", "--json"),
        "bsd_year": (*templates, "bsd.log", "--year", "2019", "--json"),
        "custom": (
            *templates,
            "custom.log",
            "--line-regex",
            CUSTOM_REGEX,
            "--time-format",
            "epoch",
            "--json",
        ),
        "mixed": (*templates, "mixed.log", "--json"),
        "mixed_raise": (*templates, "mixed.log", "--errors", "raise"),
        "bad_year": (*templates, "bsd.log", "--year", "99999"),
        "bad_errors": (*templates, "bsd.log", "--errors", "ignore"),
        "bad_regex": (*templates, "custom.log", "--line-regex", "(?P<time>\\S+"),
        "lone_time_format": (*templates, "custom.log", "--time-format", "epoch"),
        "regex_and_format": (
            *templates,
            "custom.log",
            "--format",
            "rfc3164",
            "--line-regex",
            CUSTOM_REGEX,
        ),
    }
    return d, finish({k: run_here(*v, cwd=d) for k, v in runs.items()})


def test_rfc3339_file(reading):
    _, r = reading
    assert r["iso"].returncode == 0, r["iso"].stderr
    doc = json.loads(r["iso"].stdout)
    assert doc["formats"] == {"iso.log": "rfc3339"} and doc["years"] == {}
    assert doc["accounting"] == {"lines": 2, "parsed": 2, "blank": 0, "unparsed": 0}
    assert doc["templates"] == [{"template": "upstream timed out", "count": 2}]


def test_rfc3164_years_are_reported(reading):
    _, r = reading
    for name, years in (
        ("bsd_mtime", "2024-2025 (from the file's modification time, 2025-01-03; "),
        ("bsd_year", "2019-2020 (given; "),
    ):
        assert r[name].returncode == 0, r[name].stderr
        said = f"{years}a new year at line 2)"
        assert json.loads(r[name].stdout)["years"] == {"bsd.log": said}
        assert r[name].stderr.strip() == f"bsd.log: year-less times dated {said}"


def test_user_line_format(reading):
    _, r = reading
    assert r["custom"].returncode == 0, r["custom"].stderr
    doc = json.loads(r["custom"].stdout)
    assert doc["formats"] == {"custom.log": "custom"}
    assert doc["accounting"] == {"lines": 2, "parsed": 2, "blank": 0, "unparsed": 0}


def test_unparsed_lines_counted_and_named_or_raised(reading):
    _, r = reading
    assert r["mixed"].returncode == 0, r["mixed"].stderr
    doc = json.loads(r["mixed"].stdout)
    assert doc["accounting"] == {"lines": 5, "parsed": 4, "blank": 0, "unparsed": 1}
    assert r["mixed"].stderr.strip() == (
        "warning: 1 line(s) not parsed; first: "
        "mixed.log:3: not a rfc3339 line: 'garbage [not] a line'"
    )
    assert r["mixed_raise"].returncode == 2
    assert (
        r["mixed_raise"]
        .stderr.strip()
        .endswith("mixed.log: record line 3: not a rfc3339 line: 'garbage [not] a line'")
    )
    assert len(r["mixed_raise"].stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("bad_year", "--year must be in [1678, 2261], got 99999"),
        ("bad_errors", "errors must be 'count' or 'raise', not 'ignore'"),
        ("bad_regex", "is not a regular expression"),
        ("lone_time_format", "give --line-regex"),
        ("regex_and_format", "give no --format with it"),
    ],
)
def test_reading_options_checked_one_line_exit_2(reading, name, says):
    _, r = reading
    assert r[name].returncode == 2, r[name].stderr
    assert says in r[name].stderr and len(r[name].stderr.strip().splitlines()) == 1
