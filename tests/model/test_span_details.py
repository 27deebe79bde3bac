"""Span details: what a tracer recorded beyond the columns."""

import pickle

from tacit.model.span_details import STATUS_ERROR, SpanDetail, SpanEvent


def test_a_detail_pickled_comes_back_equal_and_shares_what_it_shared():
    attributes, resource = {"http.target": "/hotels?in=2"}, {"service.name": "frontend"}
    details = [
        SpanDetail("00f067aa0ba902b7", attributes, resource),
        SpanDetail(
            None,
            attributes,
            resource,
            STATUS_ERROR,
            "timed out",
            (SpanEvent(5, "exception", {"exception.type": "TimeoutError"}),),
        ),
    ]
    back = pickle.loads(pickle.dumps(details))
    assert back == details
    assert back[0].attributes is back[1].attributes  # one mapping, as the reader shares them
    assert back[0].resource is back[1].resource
