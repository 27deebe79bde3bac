"""Calls named as the call graph names them."""

from __future__ import annotations

from tacit.model.spans import CLIENT, SERVER, SpanTableBuilder
from tacit.reconstruct.call_names import CallNames
from tacit.reconstruct.callgraph import CallGraph

GRAPH = """\
front:
  GET /home:
    calls:
    - {id: 0, service: cart, endpoint: "GET /cart/{id}", after: []}
    - {id: 1, service: profile, endpoint: GET /profile, after: []}
    - {id: 2, service: profile, endpoint: GET /visit, after: []}
"""


def test_a_call_the_graph_knows_by_one_name_takes_it_and_no_other_is_renamed(tmp_path):
    (tmp_path / "cg.yaml").write_text(GRAPH)
    b = SpanTableBuilder("t")
    for k, (kind, peer, name) in enumerate(
        [
            (CLIENT, "cart", "GET"),  # one endpoint of cart is called: that one
            (CLIENT, "profile", "GET"),  # two of profile: cannot be told
            (CLIENT, "profile", "GET /visit"),  # known as it is
            (CLIENT, None, "GET"),  # callee unknown
            (SERVER, "cart", "GET"),  # not a call
        ]
    ):
        b.add("front", None, name, kind, 10 * k, 10 * k + 5, k, peer=peer)
    spans = b.build()
    CallNames(CallGraph.load(tmp_path / "cg.yaml")).name(spans)
    assert spans.strings.names(spans.endpoint) == [
        "GET /cart/{id}",
        "GET",
        "GET /visit",
        "GET",
        "GET",
    ]
