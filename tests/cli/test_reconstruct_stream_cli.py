"""``tacit reconstruct --algorithm traceweaver-online`` streaming a blind file or OTLP JSON
Lines, against the batch path on the same spans: the same traces, tags and summary; a file not
in stream order is read whole, saying so."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from clirun import finish, run_here, start
from span_streams import write_csv_stream, write_otlp_stream
from tacit.formats import read_spans, write_otlp
from tacit.formats.blind import write_blind
from tacit.model.roles import infer_roles
from tacit.model.spans import CLIENT, KIND_NAMES, NONE, SpanTable
from tacit.reconstruct.callgraph import learn_callgraph
from tacit.simulate import load_app, simulate

ONLINE = ("--algorithm", "traceweaver-online", "--callgraph", "cg.yaml", "--json")


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("stream-cli")
    app = load_app(None)
    learn_callgraph(infer_roles(simulate(app, 20, n_requests=300, seed=7)).spans).save(
        d / "cg.yaml"
    )
    blind = infer_roles(simulate(app, 30, duration_s=22.0, seed=8, record_threads=False))
    write_blind(d / "stream.jsonl.gz", blind.without_truth(), in_end_order=True)
    write_blind(d / "grouped.jsonl", blind.without_truth())
    sim = simulate(app, 20, duration_s=3.0, seed=9)
    write_otlp_stream(d / "stream.otlp.jsonl", sim)
    write_otlp(d / "whole.otlp.json", sim)
    write_csv_stream(d / "disordered.csv", sim)
    header, *rows = (d / "disordered.csv").read_text().splitlines()
    (d / "disordered.csv").write_text("\n".join([header, *rows[::-1]]) + "\n")
    return d


@pytest.fixture(scope="module")
def runs(work: Path) -> dict[str, subprocess.CompletedProcess]:
    """The command that writes its traces to the standard output gets a process of its own; the
    others run in this process meanwhile."""
    to_stdout = start("reconstruct", "disordered.csv", "--out", "-", *ONLINE[:-1], cwd=work)
    here = {
        "streamed": ("stream.jsonl.gz", "--out", "s.json"),
        "batch": ("grouped.jsonl", "--out", "b.json"),
        "otlp": ("stream.jsonl.gz", "--out", "s.otlp.json.gz", "--format", "otlp"),
        "otlp-in": ("stream.otlp.jsonl", "--out", "os.json"),
        "disordered": ("disordered.csv", "--out", "d.json"),
    }
    return finish(
        {name: run_here("reconstruct", *args, *ONLINE, cwd=work) for name, args in here.items()}
        | {"disordered-out": to_stdout}
    )


def summary(run: subprocess.CompletedProcess) -> dict:
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


def jaeger_spans(path: Path) -> dict[tuple, tuple]:
    """Per span (by content): its parent's, its trace's spans, and its tags with the
    alternatives' span ids replaced by the spans they name."""
    doc = json.loads(path.read_text())
    spans = {}
    for trace in doc["data"]:
        procs = trace["processes"]
        for s in trace["spans"]:
            tags = {t["key"]: t["value"] for t in s["tags"]}
            p = procs[s["processID"]]
            host = next((t["value"] for t in p["tags"]), p["serviceName"])
            key = (p["serviceName"], host, s["operationName"], tags["span.kind"])
            key += (s["startTime"], s["duration"])
            parent = s["references"][0]["spanID"] if s["references"] else None
            spans[s["spanID"]] = (key, trace["traceID"], parent, tags)
    members: dict[str, set] = {}
    for key, trace, _, _ in spans.values():
        members.setdefault(trace, set()).add(key)
    out = {}
    for key, trace, parent, tags in spans.values():
        alts = json.loads(tags.pop("tacit.alternatives", "[]"))
        tags["alternatives"] = [(spans[a][0], *rest) for a, *rest in alts]
        out[key] = (spans[parent][0] if parent else None, frozenset(members[trace]), tags)
    assert len(out) == len(spans)  # the content identifies every span
    return out


def structure(t: SpanTable) -> dict[tuple, tuple | None]:
    """Per span (by content, times in microseconds as Jaeger has them): its parent's."""

    def key(r: int) -> tuple:
        start_us = int(t.start[r]) // 1000
        dur = -(-int(t.end[r]) // 1000) - start_us
        names = (t.name("service", r), t.name("instance", r), t.name("endpoint", r))
        return (*names, KIND_NAMES[int(t.kind[r])], start_us, dur)

    return {key(r): None if t.parent[r] == NONE else key(int(t.parent[r])) for r in range(len(t))}


def test_streamed_run_writes_the_batch_runs_traces(runs, work: Path) -> None:
    streamed, batch = summary(runs["streamed"]), summary(runs["batch"])
    assert streamed.pop("streamed") is True and batch.pop("streamed") is False
    assert streamed.pop("out") == "s.json" and batch.pop("out") == "b.json"
    assert streamed == batch
    assert streamed["spans"] > 10_000
    assert jaeger_spans(work / "s.json") == jaeger_spans(work / "b.json")


def test_streamed_otlp_json_lines_hold_the_same_traces(runs, work: Path) -> None:
    assert summary(runs["otlp"])["streamed"] is True
    assert structure(read_spans(work / "s.otlp.json.gz")) == structure(read_spans(work / "b.json"))


def test_streamed_otlp_json_lines_are_every_span_reconstructed(runs, work: Path) -> None:
    """OTLP JSON Lines in: streamed, every record accounted for, every span written (the traces
    equal the batch mode's: tests/reconstruct/test_trace_stream.py)."""
    streamed = summary(runs["otlp-in"])
    assert streamed["streamed"] is True
    spans = read_spans(work / "whole.otlp.json")
    assert streamed["accounting"]["input"] == len(spans)
    assert streamed["spans"] == len(read_spans(work / "os.json")) == len(spans)
    assert streamed["mapped"] > 0.9 * int((spans.kind == CLIENT).sum())


def test_a_file_not_in_stream_order_is_read_whole_saying_so(runs, work: Path) -> None:
    run = runs["disordered"]
    assert summary(run)["streamed"] is False
    said = " ".join(run.stderr.split())  # as wrapped at the terminal's width
    assert re.match(r"disordered\.csv: record \d+: ends .* s before a span read earlier", said)
    assert "not in stream order" in said and "reading the input whole instead" in said
    assert (work / "d.json").is_file()


def test_not_in_stream_order_is_an_error_once_traces_are_on_the_standard_output(runs) -> None:
    run = runs["disordered-out"]
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert re.fullmatch(
        r"tacit: error: disordered\.csv: record \d+: ends .* not in stream order .*; the traces "
        r"before it are written: write to a file to have such an input read whole\n",
        run.stderr,
    )


def test_progress_goes_to_stderr_not_stdout(runs) -> None:
    json.loads(runs["streamed"].stdout)  # stdout holds the summary alone
    assert "Traceback" not in runs["streamed"].stderr
