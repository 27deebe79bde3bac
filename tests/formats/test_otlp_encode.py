"""OTLP JSON documents written as protobuf read back as the JSON does: the same spans, ids,
parents, attributes and tacit's tags."""

from __future__ import annotations

import numpy as np
import orjson

from tacit.formats.otlp import otlp_document, read_export_request
from tacit.formats.otlp_encode import encode_request
from tacit.model.roles import infer_roles
from tacit.simulate import load_app, simulate


def test_protobuf_reads_back_as_the_json_document():
    spans = infer_roles(simulate(load_app(), 50, n_requests=20, seed=3)).spans
    doc = otlp_document(spans, {0: {"tacit.probability": 0.25, "tacit.link": "inferred"}})
    from_json, parents_json = read_export_request(orjson.dumps(doc), "json", "json")
    from_pb, parents_pb = read_export_request(encode_request(doc), "protobuf", "protobuf")
    assert len(from_pb) == len(from_json) == len(spans)
    for column in ("start", "end", "kind", "parent"):
        assert np.array_equal(getattr(from_pb, column), getattr(from_json, column)), column
    for column in ("trace", "span_id", "service", "instance", "endpoint"):
        assert _named(from_pb, getattr(from_pb, column)) == _named(
            from_json, getattr(from_json, column)
        ), column
    assert _named(from_pb, parents_pb) == _named(from_json, parents_json)  # the ids given
    assert from_pb.detail(0) == from_json.detail(0)


def _named(table, ids: np.ndarray) -> list[str | None]:
    return [table.strings[int(x)] if x >= 0 else None for x in ids]
