"""The published artifact's real traces streamed as a CSV span table (no span kinds: roles from
whole traces): the traces of the batch online mode, as close to the ground truth."""

from __future__ import annotations

from pathlib import Path

import pytest

from span_streams import link_accuracy, streamed_and_batch, write_csv_stream
from tacit.formats import read_spans
from tacit.reconstruct.online import OnlineParams

pytestmark = pytest.mark.realdata
NS = 1_000_000_000
WINDOWS = OnlineParams(window_ns=NS, lookahead_ns=NS, max_request_ns=NS, lateness_ns=NS // 10)
"""Windows of a second, against the 33 s the file's 1,000 traces span."""


def test_streamed_real_traces_equal_the_batch_online_modes(
    shared_data: Path, tmp_path: Path
) -> None:
    path = tmp_path / "stream.csv"
    spans = read_spans(shared_data / "traceweaver/hotel_reservation/load150.jaeger.json.gz")
    write_csv_stream(path, spans)
    streamed, batch, observed, accounting = streamed_and_batch(path, WINDOWS)
    assert streamed == batch
    assert accounting == observed.accounting
    assert link_accuracy(streamed, observed) > 0.99  # measured 99.58%
