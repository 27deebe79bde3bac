"""OTLP JSON Lines and CSV span tables streamed trace by trace, against the batch online mode on
the same file and against the simulator's ground truth."""

from __future__ import annotations

import json
from dataclasses import replace
from functools import partial
from pathlib import Path

import numpy as np
import pytest

from span_streams import link_accuracy, streamed_and_batch, write_csv_stream, write_otlp_stream
from tacit.formats import observe
from tacit.model.spans import CLIENT, NONE, SpanTable
from tacit.reconstruct.callgraph import learn_callgraph
from tacit.reconstruct.online import OnlineParams
from tacit.reconstruct.pipeline import reconstruct_stream, stream_source
from tacit.reconstruct.trace_stream import NotInStreamOrder
from tacit.simulate import load_app, simulate

MS = 1_000_000
SHORT = OnlineParams(
    window_ns=500 * MS, lookahead_ns=500 * MS, max_request_ns=500 * MS, lateness_ns=50 * MS
)
"""Windows much shorter than the stream, so that traces are held, observed and finished while
it goes on."""
WRITERS = {"otlp.jsonl": partial(write_otlp_stream, per_line=1), "csv": write_csv_stream}
"""One span per export: exports of several, grouped by resource, are out of order by more than
the short lateness."""


@pytest.fixture(scope="module")
def sim() -> SpanTable:
    return simulate(load_app(None), 40, duration_s=4.0, seed=4, record_threads=False)


def without_callers_clients(sim: SpanTable) -> SpanTable:
    """``sim`` without the client spans of the calls to one service: their server spans'
    parents are the callers' server spans, as in exports whose callers record no client span."""
    callee = sim.service[sim.link[np.flatnonzero((sim.kind == CLIENT) & (sim.link != NONE))[0]]]
    drop = (sim.kind == CLIENT) & (sim.link != NONE) & (sim.service[sim.link] == callee)
    t = sim.take(np.arange(len(sim)))
    under = np.flatnonzero((t.parent != NONE) & drop[t.parent])
    t.parent[under] = t.parent[t.parent[under]]
    return t.take(~drop)


@pytest.mark.parametrize("suffix", WRITERS)
def test_streamed_traces_equal_the_batch_online_modes(
    sim: SpanTable, suffix: str, tmp_path: Path
) -> None:
    """With kinds (OTLP) and without (CSV), where some callers recorded no client span: the
    roles and the synthesized client spans of whole traces, in the stream too."""
    spans = without_callers_clients(sim)
    WRITERS[suffix](tmp_path / f"s.{suffix}", spans)
    streamed, batch, observed, accounting = streamed_and_batch(tmp_path / f"s.{suffix}", SHORT)
    assert streamed == batch
    assert accounting == observed.accounting  # every record, by what became of it
    assert accounting["input"] == len(spans)
    assert accounting["client_synthesized"] > 100
    assert link_accuracy(streamed, observed) > 0.9


def test_spans_late_within_the_lateness_are_put_in_order(sim: SpanTable, tmp_path: Path) -> None:
    """Exports swapped pairwise (each of 2 spans: at most 0.25 s of this traffic) are still a
    stream with a lateness above that."""
    path = tmp_path / "s.jsonl"
    write_otlp_stream(path, sim, per_line=2)
    lines = path.read_text().splitlines()
    even = len(lines) // 2 * 2
    lines[0:even:2], lines[1:even:2] = lines[1:even:2], lines[0:even:2]
    path.write_text("\n".join(lines) + "\n")
    streamed, batch, _, _ = streamed_and_batch(path, replace(SHORT, lateness_ns=300 * MS))
    assert streamed == batch


def test_a_span_later_than_the_lateness_is_no_stream(sim: SpanTable, tmp_path: Path) -> None:
    path = tmp_path / "s.csv"
    write_csv_stream(path, sim)
    header, *rows = path.read_text().splitlines()
    rows[100], rows[3000] = rows[3000], rows[100]
    path.write_text("\n".join([header, *rows]) + "\n")
    stream = stream_source([path], online=SHORT)
    assert stream is not None
    with pytest.raises(NotInStreamOrder, match=r"s\.csv: record 103: ends .* s before a span"):
        list(stream.chunks)


def test_alternatives_name_spans_of_other_batches_as_those_are_written(tmp_path: Path) -> None:
    """A candidate parent in another batch keeps its exported span id there: the alternatives
    naming it say that id, not a fresh one."""
    sim = simulate(load_app(None), 150, duration_s=2.0, seed=4, record_threads=False)
    write_otlp_stream(tmp_path / "s.jsonl", sim, per_line=1)
    graph = learn_callgraph(observe([tmp_path / "s.jsonl"])[0].spans)
    brief = OnlineParams(100 * MS, 100 * MS, 100 * MS, 20 * MS)
    stream = stream_source([tmp_path / "s.jsonl"], online=brief)
    assert stream is not None
    batches = list(reconstruct_stream(stream, graph, online=brief))
    batch_of = {t.name("span_id", r): k for k, (t, _) in enumerate(batches) for r in range(len(t))}
    named = [
        (k, a)
        for k, (t, tags) in enumerate(batches)
        for tag in tags.values()
        for a, *_ in json.loads(tag.get("tacit.alternatives", "[]"))
    ]
    assert all(a in batch_of for _, a in named)
    assert any(batch_of[a] != k for k, a in named)  # some name a span of another batch
