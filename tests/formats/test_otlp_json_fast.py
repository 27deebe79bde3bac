"""The fast reading of OTLP/JSON documents (``_json_spans``) against the checking one
(``export_spans``): on any document, the same spans, or it leaves the document to the checking
path; and the forms exporters write are read the fast way."""

from __future__ import annotations

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from tacit.errors import InputError
from tacit.formats.otlp import otlp_document
from tacit.formats.otlp_json import _json_spans, export_spans
from tacit.formats.otlp_rows import Unusual
from tacit.model.roles import infer_roles
from tacit.simulate import load_app, simulate

# Each field's values: mostly the forms exporters write, now and then what the checking path
# refuses or reads otherwise.
ODD = st.sampled_from([None, 0, 1, -1, True, False, "", "x", "12", " 7 ", 1.5, [], {}])


def mostly(common: st.SearchStrategy, rare: st.SearchStrategy = ODD) -> st.SearchStrategy:
    """``common`` but one time in thirty, then ``rare`` (by default, an odd value)."""
    return st.integers(0, 29).flatmap(lambda k: common if k else rare)


def hex_id(digits: int) -> st.SearchStrategy:
    """Ids of up to ``digits`` hex digits, now and then one longer."""
    hexes = "0123456789abcdefABCDEF"
    return mostly(st.text(hexes, min_size=1, max_size=digits), st.text(hexes, min_size=digits + 1))


TIME = st.one_of(st.integers(0, 2**63 - 1), st.integers(0, 2**63 - 1).map(str))
SCALAR = mostly(
    st.one_of(
        st.fixed_dictionaries({"stringValue": mostly(st.text(max_size=5))}),
        st.fixed_dictionaries(
            {"intValue": mostly(st.one_of(st.integers(-(2**63), 2**63 - 1), TIME))}
        ),
        st.fixed_dictionaries({"doubleValue": mostly(st.floats(allow_nan=False))}),
        st.fixed_dictionaries({"boolValue": mostly(st.booleans())}),
    ),
    st.sampled_from(
        [{"arrayValue": {"values": [{"stringValue": "a"}]}}, {"stringValue": "a", "intValue": 1}]
    ),
)
KEY_VALUE = mostly(
    st.fixed_dictionaries(
        {"key": mostly(st.sampled_from(["peer.service", "thread.id", "k"])), "value": SCALAR}
    )
)
ATTRIBUTES = mostly(st.lists(KEY_VALUE, max_size=3))
STATUS = mostly(
    st.fixed_dictionaries(
        {},
        optional={
            "code": mostly(st.integers(0, 2), st.sampled_from([-1, 3, "STATUS_CODE_ERROR"])),
            "message": mostly(st.text(max_size=3)),
        },
    )
)
SPAN = mostly(
    st.fixed_dictionaries(
        {
            "traceId": mostly(hex_id(32)),
            "spanId": mostly(hex_id(16)),
            "startTimeUnixNano": mostly(TIME),
            "endTimeUnixNano": mostly(TIME),
        },
        optional={
            "parentSpanId": mostly(hex_id(16)),
            "name": mostly(st.text(max_size=4)),
            "kind": mostly(st.integers(0, 5), st.sampled_from([-1, 6, "SPAN_KIND_CLIENT"])),
            "attributes": ATTRIBUTES,
            "status": STATUS,
            "events": mostly(st.just([]), st.just([{"timeUnixNano": "1", "name": "e"}])),
        },
    )
)
RESOURCE = mostly(
    st.fixed_dictionaries(
        {
            "attributes": mostly(
                st.lists(KEY_VALUE, max_size=2).map(
                    lambda kvs: [{"key": "service.name", "value": {"stringValue": "svc"}}, *kvs]
                )
            )
        }
    )
)
SCOPE = mostly(st.fixed_dictionaries({"spans": mostly(st.lists(SPAN, min_size=1, max_size=3))}))
RESOURCE_SPANS = mostly(
    st.fixed_dictionaries(
        {"resource": RESOURCE, "scopeSpans": mostly(st.lists(SCOPE, max_size=2))},
    ),
    st.fixed_dictionaries(
        {"resource": RESOURCE, "instrumentationLibrarySpans": st.lists(SCOPE, max_size=1)}
    ),
)
DOCUMENT = mostly(
    st.fixed_dictionaries(
        {"resourceSpans": mostly(st.lists(RESOURCE_SPANS, min_size=1, max_size=2))}
    )
)


def _checked(doc: object) -> list[dict] | None:
    """The spans the checking path reads, None where it refuses the document."""
    try:
        return list(export_spans("doc.json", "", doc, 3))
    except InputError:
        return None


@settings(max_examples=250, deadline=None)
@given(DOCUMENT)
def test_fast_reading_gives_the_checked_spans_or_leaves_the_document(doc):
    checked = _checked(doc)
    try:
        fast = list(_json_spans(doc, 3))
    except Unusual:
        return  # the checking path reads it (and names what is wrong, if anything)
    assert checked is not None, "a document the checking path refuses was read"
    assert fast == checked


def test_a_document_as_exporters_write_it_is_read_the_fast_way():
    spans = infer_roles(simulate(load_app(), 50, n_requests=20, seed=3)).spans
    doc = orjson.loads(orjson.dumps(otlp_document(spans)))
    fast = list(_json_spans(doc, 3))
    assert len(fast) == len(spans)
    assert fast == _checked(doc)


def _base() -> dict:
    """A document of one span with every field the fast reading takes."""
    attributes = [
        {"key": "s", "value": {"stringValue": "x"}},
        {"key": "i", "value": {"intValue": "12"}},
        {"key": "d", "value": {"doubleValue": 1.5}},
        {"key": "b", "value": {"boolValue": True}},
    ]
    span = {
        "traceId": "0A" * 16,
        "spanId": "0b" * 8,
        "parentSpanId": "0c" * 8,
        "name": "op",
        "kind": 3,
        "startTimeUnixNano": "10",
        "endTimeUnixNano": 20,
        "attributes": attributes,
        "status": {"code": 2, "message": "m"},
        "events": [],
    }
    resource = {"attributes": [{"key": "service.name", "value": {"stringValue": "svc"}}]}
    return {"resourceSpans": [{"resource": resource, "scopeSpans": [{"spans": [span]}]}]}


def _places(doc: dict) -> list[tuple]:
    """Paths (keys and indices) to every value of ``doc``."""
    out = []

    def walk(value, path):
        out.append(path)
        if isinstance(value, (dict, list)):
            for k, v in value.items() if isinstance(value, dict) else enumerate(value):
                walk(v, (*path, k))

    walk(doc, ())
    return out[1:]


def test_each_value_made_odd_is_read_as_the_checking_path_reads_it_or_left_to_it():
    odd = [None, 0, 1, -1, 7, True, False, "", "x", "12", " 7 ", "SPAN_KIND_SERVER", 1.5, [], {}]
    for path in _places(_base()):
        for value in odd:
            doc = _base()
            *head, last = path
            at = doc
            for k in head:
                at = at[k]
            at[last] = value
            checked = _checked(doc)
            try:
                fast = list(_json_spans(doc, 3))
            except Unusual:
                continue
            assert checked is not None and fast == checked, (path, value)
