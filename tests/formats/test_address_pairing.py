"""Calls and requests that no context paired, paired by the server end and target both name."""

from __future__ import annotations

from tacit.formats.address_pairing import pair_by_address
from tacit.model.span_details import SpanDetail
from tacit.model.spans import CLIENT, SERVER, SpanTable, SpanTableBuilder

GEO = "http://geo.local:8080"
SPANS = [
    # name, service, kind, start, end, attributes, (trace, span id, parent id)
    ("c1", "front", CLIENT, 100, 200, {"url.full": f"{GEO}/near?lat=1"}, None),
    ("s1", "geo", SERVER, 110, 190, {"http.host": "geo.local:8080", "http.target": "/near?lat=1"},
     None),
    ("c2", "front", CLIENT, 105, 210, {"url.full": f"{GEO}/near?lat=2"}, None),
    ("s2", "geo", SERVER, 112, 195, {"server.address": "geo.local", "server.port": 8080,
                                     "url.path": "/near", "url.query": "lat=2"}, None),
    # the context crossed: s3 names c3, and neither is paired again
    ("c3", "front", CLIENT, 300, 400, {"url.full": f"{GEO}/near?lat=3"}, ("t", "c3", None)),
    ("s3", "geo", SERVER, 310, 390, {"http.host": "geo.local:8080", "http.target": "/near?lat=3"},
     ("t", "s3", "c3")),
    # a request without a caller that no call encloses
    ("s4", "geo", SERVER, 500, 600, {"http.host": "geo.local:8080", "http.target": "/near"}, None),
    # a queue: each consumer takes the oldest message of its id produced before it started
    ("p1", "front", CLIENT, 700, 701, {"messaging.destination.name": "q",
                                       "messaging.message.id": "m"}, None),
    ("p2", "front", CLIENT, 710, 711, {"messaging.destination.name": "q",
                                       "messaging.message.id": "m"}, None),
    ("k1", "worker", SERVER, 705, 900, {"messaging.destination.name": "q",
                                        "messaging.message.id": "m"}, None),
    ("k2", "worker", SERVER, 720, 900, {"messaging.destination.name": "q",
                                        "messaging.message.id": "m"}, None),
]  # fmt: skip


def table() -> SpanTable:
    b = SpanTableBuilder("t")
    for rec, (name, svc, kind, start, end, attributes, ids) in enumerate(SPANS, 1):
        trace, span_id, parent_id = ids or (name, name, None)
        b.add(svc, None, name, kind, start, end, rec, trace=trace, span_id=span_id,
              parent_id=parent_id, detail=SpanDetail(span_id, attributes))  # fmt: skip
    return b.build()


def test_each_request_pairs_with_the_call_that_names_its_end_and_target():
    spans = table()
    assert pair_by_address(spans) == 4
    names = [s[0] for s in SPANS]
    pairs = {names[r]: names[int(spans.link[r])] for r in range(len(spans)) if spans.link[r] >= 0}
    assert pairs == {
        "c1": "s1", "s1": "c1", "c2": "s2", "s2": "c2",
        "p1": "k1", "k1": "p1", "p2": "k2", "k2": "p2",
    }  # fmt: skip


def test_spans_without_attributes_pair_nothing():
    b = SpanTableBuilder("t")
    b.add("front", None, "GET", CLIENT, 0, 10, 1)
    b.add("geo", None, "GET /near", SERVER, 1, 9, 2)
    assert pair_by_address(b.build()) == 0
