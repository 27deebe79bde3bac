"""Writing traces batch by batch: Jaeger as one export, OTLP as JSON Lines; both read back."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tacit.errors import InputError
from tacit.formats import detect_format, read_spans, write_traces_stream
from tacit.formats.jaeger import write_jaeger
from tacit.formats.otlp import write_otlp
from tacit.model.spans import NONE, SpanTable
from tacit.simulate import load_app, simulate


@pytest.fixture(scope="module")
def simulated() -> SpanTable:
    return simulate(load_app(None), 80, n_requests=30, seed=5)


def halves(spans: SpanTable) -> list[tuple[SpanTable, dict]]:
    cut = len(spans) // 2
    first = np.isin(spans.trace, np.unique(spans.trace[:cut]))
    return [(spans.take(first), {}), (spans.take(~first), {})]


def test_jaeger_stream_is_the_whole_export(simulated: SpanTable, tmp_path: Path) -> None:
    tags = {r: {"n": r} for r in range(len(simulated))}
    write_jaeger(tmp_path / "whole.json", simulated, tags)
    write_traces_stream(tmp_path / "stream.json", [(simulated, tags)], "jaeger")
    assert (tmp_path / "stream.json").read_bytes() == (tmp_path / "whole.json").read_bytes()
    write_traces_stream(tmp_path / "parts.json.gz", halves(simulated), "jaeger")
    back = read_spans(tmp_path / "parts.json.gz")
    assert len(back) == len(simulated)
    assert len(set(back.trace.tolist())) == len(set(simulated.trace.tolist()))


def test_otlp_json_lines_read_back(simulated: SpanTable, tmp_path: Path) -> None:
    path = tmp_path / "stream.json"
    write_traces_stream(path, halves(simulated), "otlp")
    lines = path.read_text().splitlines()
    assert len(lines) == 2 and all("resourceSpans" in json.loads(x) for x in lines)
    assert detect_format(path) == "otlp"
    back = read_spans(path)
    write_otlp(tmp_path / "whole.json", simulated)
    whole = read_spans(tmp_path / "whole.json")
    assert len(back) == len(whole) == len(simulated)
    assert back.record.tolist() == list(range(1, len(back) + 1))
    assert sorted(zip(back.start.tolist(), back.end.tolist(), strict=True)) == sorted(
        zip(whole.start.tolist(), whole.end.tolist(), strict=True)
    )
    assert (back.parent != NONE).sum() == (whole.parent != NONE).sum()


def test_otlp_json_lines_bad_line_is_named(simulated: SpanTable, tmp_path: Path) -> None:
    path = tmp_path / "stream.json"
    write_traces_stream(path, halves(simulated), "otlp")
    path.write_text(path.read_text() + '{"resourceSpans": 3}\n')
    with pytest.raises(InputError) as e:
        read_spans(path)
    assert str(path) in str(e.value) and "line 3" in str(e.value)
