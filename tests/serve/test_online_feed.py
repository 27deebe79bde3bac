"""The feed between acknowledged spans and online TraceWeaver, without a running service."""

from __future__ import annotations

import numpy as np

from serve_app import QUICK, shop_callgraph, shop_spans
from tacit.experiment.otlp_load import BATCH, sdk_spans
from tacit.formats.otlp import read_export_request
from tacit.reconstruct.online import NS
from tacit.serve.online_feed import OnlineFeed


def _requests(seconds: float):
    """The shop app's spans as the SDK exporter's protobuf requests, decoded as ingest does."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    spans = shop_spans(seconds, rate=200)
    readable = sdk_spans(spans)
    order = np.argsort(spans.end, kind="stable").tolist()
    for a in range(0, len(order), BATCH):
        body = encode_spans([readable[r] for r in order[a : a + BATCH]]).SerializeToString()
        yield read_export_request(body, "protobuf", "test request")


def test_low_water_is_the_lowest_sequence_number_still_pending():
    feed = OnlineFeed(shop_callgraph(), QUICK, first_position=1000)
    next_seq, checked = 5000, 0
    for spans, parent_ids in _requests(8):
        fed = feed.push(spans, parent_ids, np.arange(next_seq, next_seq + len(spans)))
        next_seq += len(spans)
        for f in fed.finished:
            feed.release(f)
            checked += 1
        assert feed.low_water(next_seq) == min(feed.seq_of.values(), default=next_seq)
    for f in feed.advance(feed.tw.latest_end + 10 * NS):
        feed.release(f)
    assert checked and not feed.pending
    assert feed.low_water(next_seq) == next_seq
