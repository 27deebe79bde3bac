"""``tacit latency oneway simulate`` end to end, run as subprocesses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clirun import TACIT, finish, run_here
from tacit.formats.pcap_write import build_frame, write_pcap
from tacit.model.packets import UDP

ISSUE_FIELDS = {
    "packets",
    "set_difference",
    "results",
    "insert_packets_per_second",
    "decode_seconds",
}
RESULT_FIELDS = {
    "method",
    "mean_relative_error",
    "std_relative_error",
    "useful_packets",
    "memory_bytes",
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    d = tmp_path_factory.mktemp("oneway")
    frames = [
        build_frame("10.0.0.1", "10.0.0.9", proto=UDP, sport=9, dport=7, ip_id=i, payload=b"%d" % i)
        for i in range(500)
    ]
    write_pcap(d / "small.pcap", frames, [10**18 + 20_000 * i for i in range(500)])
    (d / "bad.pcap").write_bytes(b"this is not a capture at all")
    assert TACIT.exists(), TACIT
    sim = ("latency", "oneway", "simulate")
    procs = {
        "json": run_here(
            *sim, "--packets", "60000", "--loss", "0.01", "--reorder", "0.5", "--json", cwd=d
        ),
        "pcap": run_here(
            *sim, "small.pcap", "--packets", "30000", "--rate", "1e6", "--json", cwd=d
        ),
        "sweep": run_here(
            *sim,
            "--sweep",
            "--packets",
            "20000",
            "--rate",
            "1e6",
            "--differences",
            "0,200",
            "--seeds",
            "1",
            "--memory",
            "20000",
            "--plots",
            "figs",
            "--json",
            cwd=d,
        ),
        "table": run_here(*sim, "small.pcap", cwd=d),
        "bad_pcap": run_here(*sim, "bad.pcap", cwd=d),
        "bad_loss": run_here(*sim, "--packets", "1000", "--loss", "1.5", cwd=d),
        "nothing": run_here(*sim, cwd=d),
        "huge": run_here(*sim, "--packets", str(2**63), cwd=d),
    }
    return d, finish(procs)


def result_of(doc: dict, method: str) -> dict:
    return next(r for r in doc["results"] if r["method"] == method)


def test_json_has_the_issue_fields(runs):
    _, r = runs
    assert r["json"].returncode == 0, r["json"].stderr
    doc = json.loads(r["json"].stdout)
    assert set(doc) >= ISSUE_FIELDS
    assert doc["packets"] == 60_000 and doc["replay"] is None
    assert [x["method"] for x in doc["results"]] == ["rda", "srda", "lda", "finecomb"]
    for x in doc["results"]:
        assert set(x) >= RESULT_FIELDS and x["memory_bytes"] <= 100_000
    rda, lda = result_of(doc, "rda"), result_of(doc, "lda")
    assert rda["decoded_intervals"] == doc["intervals"] == 6
    assert rda["mean_relative_error"] <= 1e-9 and rda["std_relative_error"] < 0.05
    assert lda["mean_relative_error"] > rda["mean_relative_error"]
    assert rda["useful_packets"] == rda["matched_packets"] == doc["received"]
    assert doc["set_difference"] > 0 and doc["decode_seconds"] > 0
    assert doc["insert_packets_per_second"] > 0


def test_replayed_capture_says_what_it_did(runs):
    _, r = runs
    assert r["pcap"].returncode == 0, r["pcap"].stderr
    doc = json.loads(r["pcap"].stdout)
    assert doc["packets"] == 30_000
    assert doc["replay"]["repetitions"] == 60 and doc["replay"]["distinct"] == 500
    assert doc["replay"]["duplicates"] == 0
    assert result_of(doc, "rda")["mean_relative_error"] <= 1e-9
    table = r["table"]
    assert table.returncode == 0, table.stderr
    assert "500 packets replayed from small.pcap" in table.stderr
    assert "finecomb" in table.stdout and "mean rel. error" in table.stdout


def test_sweep_json_and_plots(runs):
    d, r = runs
    assert r["sweep"].returncode == 0, r["sweep"].stderr
    doc = json.loads(r["sweep"].stdout)
    assert [p["target"] for p in doc["points"]] == [0, 200]
    assert doc["memory_bytes"] == 20_000 and doc["seeds"] == 1
    assert len(doc["plots"]) == 3
    for p in doc["plots"]:
        assert (d / p).read_bytes()[:4] == b"\x89PNG"
    rda = next(x for x in doc["points"][1]["results"] if x["method"] == "rda")
    assert rda["decoded_fraction"] == 1.0 and rda["mean_relative_error"] <= 1e-9


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("bad_pcap", "bad.pcap"),
        ("bad_loss", "--loss must be in [0, 1]"),
        ("nothing", "--packets N"),
        ("huge", "--packets must be in [1, 100000000]"),  # refused before allocating the stream
    ],
)
def test_errors_are_one_line_exit_2(runs, name, words):
    _, r = runs
    assert r[name].returncode == 2
    lines = r[name].stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tacit: error:") and words in lines[0]
