"""The online mode over a blind file read incrementally, against the batch online path."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from span_streams import canonical, write_otlp_stream
from tacit.formats import write_otlp
from tacit.formats.blind import write_blind
from tacit.model.roles import infer_roles
from tacit.model.spans import CLIENT, NONE, SERVER
from tacit.reconstruct.callgraph import learn_callgraph
from tacit.reconstruct.online import OnlineParams, OnlineTraceWeaver
from tacit.reconstruct.pipeline import (
    ONLINE,
    StreamTotals,
    reconstruct_blind,
    reconstruct_stream,
    stream_source,
)
from tacit.simulate import load_app, simulate


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory):
    app = load_app(None)
    graph = learn_callgraph(infer_roles(simulate(app, 20, n_requests=300, seed=7)).spans)
    # 25 s of traffic: more than the default windows, so traces come out before the end
    blind = infer_roles(simulate(app, 40, duration_s=25.0, seed=4, record_threads=False))
    blind = blind.without_truth()
    d = tmp_path_factory.mktemp("stream")
    write_blind(d / "stream.jsonl.gz", blind, in_end_order=True)
    write_blind(d / "grouped.jsonl", blind)
    return d, blind, graph


def test_streamed_traces_equal_the_batch_online_paths(setup) -> None:
    d, blind, graph = setup
    source = stream_source([d / "stream.jsonl.gz"])
    assert source is not None
    totals = StreamTotals()
    batches = list(reconstruct_stream(source, graph, totals=totals))
    assert len(batches) > 1  # traces came out as the stream went, not all at its end
    traces, tags, rec = reconstruct_blind(blind, graph, ONLINE)
    streamed = canonical(batches)
    assert len(streamed) == len(blind)
    assert streamed == canonical([(traces, tags)])
    assert totals.spans == len(blind)
    assert totals.traces == len(set(traces.trace.tolist()))
    assert totals.mapped == int(((blind.kind == CLIENT) & (rec.parent >= 0)).sum())
    assert sum(totals.unmapped.values()) == len(rec.unmapped)
    assert totals.accounting == infer_roles(blind).accounting


def test_span_ids_are_unique_across_batches(setup) -> None:
    d, _, graph = setup
    ids = [
        t.name("span_id", r)
        for t, _ in reconstruct_stream(stream_source([d / "stream.jsonl.gz"]), graph)
        for r in range(len(t))
    ]
    assert len(ids) == len(set(ids))


def test_what_is_streamed(setup, tmp_path: Path) -> None:
    """One blind file in end order, OTLP JSON Lines or a CSV span table (as detected or named);
    not a blind file grouped by instance, several files, a directory, one OTLP document."""
    d, _, _ = setup
    assert stream_source([d / "grouped.jsonl"]) is None
    assert stream_source([d / "stream.jsonl.gz", d / "stream.jsonl.gz"]) is None
    assert stream_source([d]) is None
    text = tmp_path / "x.csv"
    text.write_text(
        "TraceID,SpanID,ParentID,PodName,OperationName,StartTimeUnixNano,EndTimeUnixNano\n"
    )
    assert stream_source([text]) is not None
    assert stream_source([text], "csv") is not None
    assert stream_source([text], "otlp") is None
    sim = simulate(load_app(None), 20, n_requests=5, seed=2)
    write_otlp(tmp_path / "one.json", sim)
    assert stream_source([tmp_path / "one.json"]) is None
    write_otlp_stream(tmp_path / "lines.jsonl", sim, per_line=10)
    assert stream_source([tmp_path / "lines.jsonl"]) is not None


def test_a_partner_that_never_arrives_is_unobserved_at_close() -> None:
    """A server span announcing a caller still to come (any position not pushed yet) waits
    for it; when the stream ends without it, the span is a root of its own."""
    blind = infer_roles(simulate(load_app(None), 20, n_requests=5, seed=2)).without_truth()
    graph = learn_callgraph(infer_roles(simulate(load_app(None), 20, n_requests=50, seed=7)).spans)
    server = int(np.flatnonzero((blind.kind == SERVER) & (blind.link == NONE))[0])
    chunk = blind.take(np.array([server]))
    chunk.link[:] = np.iinfo(np.int64).max
    tw = OnlineTraceWeaver(graph, online=OnlineParams(window_ns=1, lookahead_ns=1))
    assert tw.push(chunk) == []
    (f,) = tw.close()
    assert f.parent.tolist() == [NONE]
