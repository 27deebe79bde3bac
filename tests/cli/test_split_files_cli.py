"""Several files are one input: ``callgraph``, ``blind``, ``reconstruct`` and ``evaluate`` give
on one file per service (as per-service exporters write them) what they give on one file
holding every span, in every trace format; a span in two files (an export written twice) is
read once and counted as a duplicate."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from clirun import ok, one_error_line, run_here
from split_exports import FORMATS, REQUESTS, sdk_spans, write_exports
from tacit.formats.span_files import DUPLICATE_SPANS

TIMINGS = ("seconds", "spans_per_second")


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, dict]]:
    d = tmp_path_factory.mktemp("split")
    return d, write_exports(sdk_spans(), d)


def tacit(work: Path, *args: str | Path) -> subprocess.CompletedProcess:
    return ok(run_here(*args, cwd=work))


def calls(graph: dict, service: str, endpoint: str) -> list[tuple[str, str]]:
    return [(c["service"], c["endpoint"]) for c in graph[service][endpoint]["calls"]]


def inputs(made: dict[str, dict], fmt: str, how: str) -> list[Path]:
    """The single file (``all``), the per-service files (``split``) or their directory."""
    files = made[fmt]
    return {"all": [files["all"]], "split": files["split"], "dir": [files["split"][0].parent]}[how]


@pytest.mark.parametrize("fmt", FORMATS)
def test_callgraph_of_per_service_files_is_that_of_one_file(made, fmt: str) -> None:
    work, files = made
    graphs = {how: tacit(work, "callgraph", *inputs(files, fmt, how)).stdout for how in files[fmt]}
    graphs["dir"] = tacit(work, "callgraph", *inputs(files, fmt, "dir")).stdout
    graph = yaml.safe_load(graphs["all"])
    assert calls(graph, "front", "GET /item") == [("stock", "GET"), ("price", "GET")]
    assert calls(graph, "stock", "GET /stock") == [("?", "HGET")]  # to redis, which is untraced
    assert graphs["split"] == graphs["all"]
    assert graphs["dir"] == graphs["all"]


@pytest.mark.parametrize("fmt", FORMATS)
def test_blind_spans_and_accounting_of_per_service_files_are_those_of_one_file(made, fmt) -> None:
    work, files = made
    got = {}
    for how in ("all", "split"):
        out = work / f"blind-{fmt}-{how}.jsonl"
        run = tacit(work, "blind", *inputs(files, fmt, how), "--out", out, "--json")
        got[how] = (json.loads(run.stdout)["accounting"], out.read_text())
    assert got["split"] == got["all"]
    accounting, lines = got["all"]
    assert accounting["input"] == 7 * REQUESTS
    # only the requests from outside and the calls to redis have no other side
    assert lines.count('"rpc":null') == 2 * REQUESTS


@pytest.mark.parametrize("fmt", ["otlp-pb", "otlp-jsonl", "jaeger", "zipkin"])
def test_reconstruct_of_per_service_files_is_that_of_one_file(made, fmt: str) -> None:
    work, files = made
    got = {}
    for how in ("all", "split"):
        out = work / f"rec-{fmt}-{how}.json"
        run = tacit(
            work, "reconstruct", *inputs(files, fmt, how), "--out", out, "--seed", "3", "--json"
        )
        summary = json.loads(run.stdout)
        summary.pop("out")
        got[how] = (summary, out.read_text())
    assert got["split"] == got["all"]
    assert got["all"][0]["traces"] == REQUESTS


@pytest.mark.parametrize("fmt", ["otlp-pb", "otlp-json", "jaeger", "zipkin"])
def test_evaluate_of_per_service_files_is_that_of_one_file(made, fmt: str) -> None:
    work, files = made
    got = {}
    for how in ("all", "split"):
        run = tacit(
            work, "evaluate", *inputs(files, fmt, how), "--algorithm", "traceweaver,fcfs", "--json"
        )
        doc = json.loads(run.stdout)
        for r in doc["results"]:
            for key in TIMINGS:
                r.pop(key)
        got[how] = doc
    assert got["split"] == got["all"]
    assert got["all"]["traces"] == REQUESTS
    assert [r["per_service"]["stock"]["incoming"] for r in got["all"]["results"]] == [REQUESTS] * 2


@pytest.mark.parametrize("fmt", ["otlp-pb", "otlp-jsonl", "jaeger", "zipkin"])
def test_a_file_given_twice_is_counted_as_duplicates_not_doubled(made, fmt: str) -> None:
    """The same export under two names (one of them gzip'd or not: another file) is read once;
    so is a per-service file beside the single file holding its spans too."""
    work, files = made
    copy = work / f"copy-{fmt}"
    copy.mkdir()
    again = copy / files[fmt]["all"].name
    shutil.copy(files[fmt]["all"], again)
    once = work / f"once-{fmt}.jsonl"
    twice = work / f"twice-{fmt}.jsonl"
    overlap = work / f"overlap-{fmt}.jsonl"
    single = json.loads(tacit(work, "blind", files[fmt]["all"], "--out", once, "--json").stdout)
    doubled = json.loads(
        tacit(work, "blind", files[fmt]["all"], again, "--out", twice, "--json").stdout
    )
    front = files[fmt]["split"][0]
    mixed = json.loads(
        tacit(work, "blind", front, files[fmt]["all"], "--out", overlap, "--json").stdout
    )
    assert single["accounting"]["input"] == 7 * REQUESTS
    assert doubled["accounting"] == {**single["accounting"], DUPLICATE_SPANS: 7 * REQUESTS}
    assert mixed["accounting"] == {**single["accounting"], DUPLICATE_SPANS: 4 * REQUESTS}
    assert twice.read_text() == once.read_text() == overlap.read_text()
    assert (
        tacit(work, "callgraph", files[fmt]["all"], again).stdout
        == tacit(work, "callgraph", files[fmt]["all"]).stdout
    )
    ev = {
        how: json.loads(tacit(work, "evaluate", *paths, "--algorithm", "fcfs", "--json").stdout)
        for how, paths in (("once", [files[fmt]["all"]]), ("twice", [again, files[fmt]["all"]]))
    }
    assert ev["twice"]["spans"] == ev["once"]["spans"]
    assert ev["twice"]["accounting"] == {**ev["once"]["accounting"], DUPLICATE_SPANS: 7 * REQUESTS}


def test_two_different_spans_with_one_id_are_refused_naming_both_files(made) -> None:
    work, files = made
    doc = json.loads(files["zipkin"]["split"][1].read_text())
    doc[0]["name"] = "another name"
    changed = work / "stock-changed.json"
    changed.write_text(json.dumps(doc))
    run = run_here("blind", files["zipkin"]["all"], changed, "--out", work / "x.jsonl")
    line = one_error_line(run, str(changed))
    assert str(files["zipkin"]["all"]) in line and doc[0]["id"] in line
