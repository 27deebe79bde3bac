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


def test_a_call_named_by_its_method_alone_takes_the_name_the_graph_knows_it_by(tmp_path):
    (tmp_path / "cg.yaml").write_text(GRAPH)
    b = SpanTableBuilder("t")
    for k, (kind, peer, name) in enumerate(
        [
            (CLIENT, "cart", "GET"),  # one endpoint of cart is called: that one
            (CLIENT, "profile", "GET"),  # two of profile, and no server span: cannot be told
            (CLIENT, "profile", "GET"),  # two of profile, answered at /visit (the next row)
            (SERVER, "front", "GET /visit"),
            (CLIENT, "profile", "GET /visit"),  # known as it is
            (CLIENT, None, "GET"),  # callee unknown
            (CLIENT, "cart", "Purge"),  # a call of its own, which the graph does not know
        ]
    ):
        b.add("front", None, name, kind, 10 * k, 10 * k + 5, k, peer=peer)
    spans = b.build()
    spans.link[2], spans.link[3] = 3, 2
    CallNames(CallGraph.load(tmp_path / "cg.yaml")).name(spans)
    assert spans.strings.names(spans.endpoint) == [
        "GET /cart/{id}",
        "GET",
        "GET /visit",
        "GET /visit",
        "GET /visit",
        "GET",
        "Purge",
    ]
