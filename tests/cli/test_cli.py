"""The ``tacit`` console script end to end, run as subprocesses.

Every run pays for importing numpy and scipy (a few seconds), so the independent
commands are started together by one module fixture and the tests only inspect their results.
"""

from __future__ import annotations

import gzip
import json
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

from clirun import TACIT, finish, ok, one_error_line, run_here, start
from tacit.formats.blind import write_blind
from tacit.formats.jaeger import read_jaeger, write_jaeger
from tacit.model.roles import infer_roles
from tacit.simulate import load_app, simulate

REQUESTS = 20


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("cli")
    sim = simulate(load_app(None), 80, n_requests=REQUESTS, seed=11)
    write_jaeger(d / "traces.json", sim)
    write_blind(d / "inproc.jsonl", infer_roles(sim).without_truth())
    (d / "inproc.orig").write_bytes((d / "inproc.jsonl").read_bytes())
    data = gzip.compress((d / "traces.json").read_bytes())
    (d / "cut.json.gz").write_bytes(data[: len(data) // 2])
    (d / "broken.json").write_text('{"data": [{"traceID": "t1", "spans": [')
    assert TACIT.exists(), TACIT
    return d


@pytest.fixture(scope="module")
def runs(work: Path) -> dict[str, subprocess.CompletedProcess]:
    """Every command, blind+callgraph before reconstruct; in this process as the console script
    runs them (:func:`run_here`), but for those that need a process of their own: one with
    an environment variable, and ``--debug``, whose traceback ends the process."""
    first = {
        "evaluate": run_here(
            "evaluate",
            "traces.json",
            "--algorithm",
            "traceweaver,fcfs",
            "--json",
            "--html",
            "calibration.html",
            cwd=work,
        ),
        "blind": run_here("blind", "traces.json", "--out", "b.jsonl", cwd=work),
        "callgraph": run_here("callgraph", "traces.json", "--out", "cg.yaml", cwd=work),
        "no_callgraph": run_here("reconstruct", "inproc.jsonl", "--out", "t0.json", cwd=work),
        "cut_gzip": run_here("evaluate", "cut.json.gz", "--json", cwd=work),
        "malformed": run_here("blind", "broken.json", "--out", "x.jsonl", cwd=work),
        "missing": run_here("callgraph", "missing.json", cwd=work),
        "debug": start("blind", "broken.json", "--out", "y.jsonl", "--debug", cwd=work),
        "out_is_input": run_here(
            "blind", "inproc.jsonl", "--out", "./inproc.jsonl", "--force", cwd=work
        ),
        "out_exists": run_here("blind", "traces.json", "--out", "inproc.orig", cwd=work),
        "out_is_dir": run_here("callgraph", "traces.json", "--out", ".", cwd=work),
        "out_full": run_here("blind", "traces.json", "--out", "/dev/full", cwd=work),
        "over_budget": start(
            "callgraph",
            "traces.json",
            "--out",
            "cg_budget.yaml",
            cwd=work,
            env={"TACIT_MEMORY_BUDGET": "1K"},
        ),
        **{
            name: run_here("reconstruct", "traces.json", "--out", name, *seed, "--json", cwd=work)
            for name, seed in (
                ("seed5.json", ["--seed", "5"]),
                ("seed5again.json", ["--seed", "5"]),
                ("unseeded.json", []),
            )
        },
    }
    res = finish(first)
    second = {}
    if res["blind"].returncode == 0 and res["callgraph"].returncode == 0:
        second["reconstruct"] = run_here(
            "reconstruct",
            "b.jsonl",
            "--callgraph",
            "cg.yaml",
            "--out",
            "t.json",
            "--json",
            cwd=work,
        )
    res.update(finish(second))
    return res


def test_evaluate_json(runs, work: Path) -> None:
    run = ok(runs["evaluate"])
    res = json.loads(run.stdout)
    assert res["traces"] == REQUESTS
    assert isinstance(res["spans"], int) and res["spans"] > REQUESTS
    assert [r["algorithm"] for r in res["results"]] == ["traceweaver", "fcfs"]
    for r in res["results"]:
        for k in ("accuracy", "link_accuracy"):
            assert 0.0 <= r[k] <= 1.0, (r["algorithm"], k, r[k])
        # top-5 needs ranked alternatives, which only traceweaver gives
        assert r["top5_accuracy"] is None or 0.0 <= r["top5_accuracy"] <= 1.0
        assert r["seconds"] > 0
        assert r["spans_per_second"] > 0
    tw = res["results"][0]
    assert tw["top5_accuracy"] is not None and tw["top5_accuracy"] >= tw["accuracy"]
    assert tw["accuracy"] >= 0.5  # light load: traceweaver gets most traces right
    # calibration of its link and trace probabilities, over every link and every trace
    links, traces = tw["calibration"]["links"], tw["calibration"]["traces"]
    assert traces["n"] == REQUESTS and sum(b["n"] for b in traces["bins"]) == REQUESTS
    assert links["n"] == sum(b["n"] for b in links["bins"]) > REQUESTS
    assert 0 <= links["ece"] <= 1 and 0 <= traces["ece"] <= 1 and len(links["bins"]) == 10
    assert res["results"][1]["calibration"] is None  # fcfs scores nothing
    # the reliability diagrams: a bar per filled bin, as high as its accuracy
    assert res["html"] == "calibration.html"
    page = _Elements()
    page.feed((work / "calibration.html").read_text())
    assert [a["data-algorithm"] for a in page.found["h2"]] == ["traceweaver"]
    diagrams = {s["data-kind"]: float(s["data-ece"]) for s in page.found["svg"]}
    assert diagrams == pytest.approx({"links": links["ece"], "traces": traces["ece"]})
    bars = [r for r in page.found["rect"] if r.get("class") == "bar"]
    filled = [b for kind in (links, traces) for b in kind["bins"] if b["n"]]
    assert [(int(r["data-n"]), float(r["data-accuracy"])) for r in bars] == [
        (b["n"], pytest.approx(b["accuracy"])) for b in filled
    ]


class _Elements(HTMLParser):
    """The attributes of every element of a page, by tag."""

    def __init__(self) -> None:
        super().__init__()
        self.found: dict[str, list[dict[str, str]]] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.found.setdefault(tag, []).append({k: v or "" for k, v in attrs})


def test_blind_writes_one_line_per_observed_span(runs, work: Path) -> None:
    ok(runs["blind"])
    lines = (work / "b.jsonl").read_text().splitlines()
    truth = infer_roles(read_jaeger(work / "traces.json")).spans
    assert len(lines) == len(truth)
    assert "traceID" not in (work / "b.jsonl").read_text()
    assert str(len(lines)) in runs["blind"].stdout


def test_callgraph_file(runs, work: Path) -> None:
    ok(runs["callgraph"])
    import yaml

    assert yaml.safe_load((work / "cg.yaml").read_text())


def test_reconstruct_with_callgraph(runs, work: Path) -> None:
    run = ok(runs["reconstruct"])
    n_blind = len((work / "b.jsonl").read_text().splitlines())
    summary = json.loads(run.stdout)
    assert summary["spans"] == n_blind
    back = read_jaeger(work / "t.json")
    assert len(back) == n_blind
    doc = json.loads((work / "t.json").read_text())
    spans = [s for t in doc["data"] for s in t["spans"]]
    assert len(spans) == n_blind
    clients = 0
    for s in spans:
        tags = {t["key"]: t["value"] for t in s["tags"]}
        assert tags.get("tacit.algorithm") == "traceweaver"
        if tags.get("span.kind") == "client":
            clients += 1
            assert "tacit.score" in tags or "tacit.unmapped" in tags, s
    assert clients > 0
    # client spans are parented inside their own trace
    assert all(p == -1 or back.trace[p] == back.trace[r] for r, p in enumerate(back.parent))


def test_reconstruct_joins_rpcs_into_one_trace_per_request(runs, work: Path) -> None:
    ok(runs["reconstruct"])
    back = read_jaeger(work / "t.json")
    assert len(np.unique(back.trace)) == REQUESTS


def test_reconstructed_traces_keep_span_ids_and_get_random_trace_ids(runs, work: Path) -> None:
    """Traces reconstructed from Jaeger input keep the input's span ids (but those of client
    spans the callers did not record, made up by role inference); their trace ids are new,
    random unless seeded."""

    def ids(name: str) -> tuple[set[str], set[str]]:
        doc = json.loads((work / name).read_text())
        return {t["traceID"] for t in doc["data"]}, {
            s["spanID"] for t in doc["data"] for s in t["spans"]
        }

    summary = json.loads(ok(runs["seed5.json"]).stdout)
    made_up = summary["accounting"]["client_synthesized"]
    traces, spans = ids("traces.json")
    seeded, seeded_spans = ids("seed5.json")
    again, again_spans = ids("seed5again.json")
    unseeded, _ = ids("unseeded.json")
    assert len(seeded_spans & spans) == summary["spans"] - made_up
    assert (seeded, seeded_spans) == (again, again_spans)
    assert len(seeded) == len(unseeded) == REQUESTS
    assert not seeded & unseeded and not seeded & traces


def test_reconstruct_without_callgraph_fails(runs, work: Path) -> None:
    line = one_error_line(runs["no_callgraph"], "--callgraph")
    assert "ground truth" in line
    assert not (work / "t0.json").exists()


def test_truncated_gzip(runs) -> None:
    line = one_error_line(runs["cut_gzip"], "cut.json.gz")
    assert "gzip" in line


def test_malformed_json(runs) -> None:
    line = one_error_line(runs["malformed"], "broken.json")
    assert "malformed JSON" in line


def test_nonexistent_file(runs) -> None:
    line = one_error_line(runs["missing"], "missing.json")
    assert "no such file" in line


def test_outputs_that_cannot_be_written_are_refused_in_one_line(runs, work: Path) -> None:
    """An output that is an input, an existing file (without --force), a directory or a full
    device: one line, exit 2, and the input left as it was."""
    one_error_line(runs["out_is_input"], "also an input")  # even with --force
    assert (work / "inproc.jsonl").read_bytes() == (work / "inproc.orig").read_bytes()
    one_error_line(runs["out_exists"], "inproc.orig: the output exists; add --force")
    assert (work / "inproc.orig").read_bytes() == (work / "inproc.jsonl").read_bytes()
    one_error_line(runs["out_is_dir"], "is a directory")
    one_error_line(runs["out_full"], "/dev/full: cannot write: No space left on device")


def test_an_allocation_beyond_the_memory_budget_is_refused_naming_the_input(runs, work) -> None:
    line = one_error_line(runs["over_budget"], "traces.json")
    assert "call slots would need" in line and "more than the 1.0 KiB" in line
    assert not (work / "cg_budget.yaml").exists()


def test_debug_shows_traceback(runs) -> None:
    run = runs["debug"]
    assert run.returncode not in (0, 2)
    assert "Traceback (most recent call last)" in run.stderr
    assert "InputError" in run.stderr and "broken.json" in run.stderr


def test_usage_error_exit_code(work: Path) -> None:
    run = finish({"x": start("evaluate", cwd=work)})["x"]
    assert run.returncode == 2
    assert "Traceback" not in run.stderr


# ~30 s: the demo runs every algorithm at several load levels
def test_demo(tmp_path: Path) -> None:
    proc = start("demo", "--requests", "60", "--out", "out", "--json", cwd=tmp_path)
    run = ok(finish({"demo": proc})["demo"])
    res = json.loads(run.stdout)
    out = tmp_path / "out"
    assert (out / "report.html").stat().st_size > 0
    again = run_here("demo", "--requests", "60", "--out", "out", cwd=tmp_path)
    assert one_error_line(again, "out: holds a demo's output; add --force to replace it")
    assert len(read_jaeger(out / "traces.jaeger.json")) > 0
    assert res["loads"] and res["algorithms"]
    for row in res["loads"]:
        for a in res["algorithms"]:
            assert 0.0 <= row["accuracy"][a] <= 1.0
