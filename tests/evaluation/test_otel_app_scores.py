"""Scores of reconstructed traces of the OpenTelemetry app: two requests, one through an
uninstrumented search whose hop the truth records, scored for a right and for wrong answers."""

from __future__ import annotations

import json

from tacit.evaluation import score_traces


def _truth(tmp_path):
    rows = [
        # request a: frontend S1 → search (C1, uninstrumented: the hop H) → geo G1; → profile P1/Q1
        ("S1", "server", "frontend", "a", None),
        ("C1", "client", "frontend", "a", "S1"),
        (None, "unobserved", "search", "a", "C1"),
        ("G1", "server", "geo", "a", "C1"),
        ("P1", "client", "frontend", "a", "S1"),
        ("Q1", "server", "profile", "a", "P1"),
        # request b: frontend S2 → profile P2/Q2
        ("S2", "server", "frontend", "b", None),
        ("P2", "client", "frontend", "b", "S2"),
        ("Q2", "server", "profile", "b", "P2"),
    ]
    path = tmp_path / "truth.jsonl"
    path.write_text(
        "".join(
            json.dumps(
                {
                    "span_id": s and s.lower(),
                    "kind": kind,
                    "service": service,
                    "operation": "GET",
                    "request_id": request,
                    "parent_span_id": parent and parent.lower(),
                    "start_ns": 0,
                    "end_ns": 1,
                }
            )
            + "\n"
            for s, kind, service, request, parent in rows
        )
    )
    return path


EXPORTED = {
    "s1": None,
    "c1": "s1",
    "g1": None,
    "p1": None,
    "q1": "p1",
    "s2": None,
    "p2": "s2",
    "q2": "p2",
}
"""What the SDK gave: G1 lost its parent behind the uninstrumented search, P1 was made in a pool
thread without the context."""


def _trace(trace_id, links):
    return {
        "traceID": trace_id,
        "spans": [
            {
                "traceID": trace_id,
                "spanID": s,
                "references": [] if p is None else [{"refType": "CHILD_OF", "spanID": p}],
            }
            for s, p in links
        ],
    }


RIGHT = [
    _trace(
        "ta", [("S1", None), ("C1", "S1"), ("V", "C1"), ("G1", "V"), ("P1", "S1"), ("Q1", "P1")]
    ),
    _trace("tb", [("S2", None), ("P2", "S2"), ("Q2", "P2")]),
]


def test_a_right_answer_scores_every_link_request_and_hop(tmp_path):
    score = score_traces(_truth(tmp_path), RIGHT, EXPORTED)
    assert score["spans"] == score["exported"] == score["found"] == 8
    assert (score["missing"], score["duplicated"], score["extra"]) == (0, 0, 1)  # the hop's span
    assert score["given"] == {"links": 4, "kept": 4, "share": 1.0}
    assert score["inferred"] == {"links": 2, "right": 2, "share": 1.0}
    assert score["roots"] == {"spans": 2, "right": 2, "share": 1.0}
    assert score["requests"] == {"total": 2, "right": 2, "share": 1.0}
    assert score["unobserved_hops"] == {"hops": 1, "drawn": 1}


def test_a_hop_drawn_as_a_server_span_with_its_client_spans_is_drawn(tmp_path):
    drawn = [
        _trace(
            "ta",
            [
                *[("S1", None), ("C1", "S1"), ("V", "C1"), ("W", "V"), ("G1", "W")],
                *[("P1", "S1"), ("Q1", "P1")],
            ],
        ),
        RIGHT[1],
    ]
    score = score_traces(_truth(tmp_path), drawn, EXPORTED)
    assert score["unobserved_hops"] == {"hops": 1, "drawn": 1}
    assert score["inferred"]["right"] == 2 and score["extra"] == 2


def test_wrong_answers_are_counted_wrong(tmp_path):
    truth = _truth(tmp_path)
    # G1 right under C1 but no span for the hop; P1 under request b's frontend span
    wrong = [
        _trace("ta", [("S1", None), ("C1", "S1"), ("G1", "C1")]),
        _trace("tb", [("S2", None), ("P2", "S2"), ("Q2", "P2"), ("P1", "S2"), ("Q1", "P1")]),
    ]
    score = score_traces(truth, wrong, EXPORTED)
    assert score["given"] == {"links": 4, "kept": 4, "share": 1.0}
    assert score["inferred"] == {"links": 2, "right": 1, "share": 0.5}
    assert score["requests"] == {"total": 2, "right": 0, "share": 0.0}  # b holds a's spans
    assert score["unobserved_hops"] == {"hops": 1, "drawn": 0}
    # as exported, unreconstructed: the lost links stay lost, a's spans in three traces
    as_exported = [
        _trace("ta", [("S1", None), ("C1", "S1")]),
        _trace("tg", [("G1", None)]),
        _trace("tp", [("P1", None), ("Q1", "P1")]),
        _trace("tb", [("S2", None), ("P2", "S2")]),
    ]
    score = score_traces(truth, {"data": as_exported}, EXPORTED)
    assert score["inferred"]["right"] == 0 and score["given"]["kept"] == 3
    assert (score["missing"], score["found"]) == (1, 7)  # Q2
    assert score["requests"]["right"] == 0


def test_a_span_twice_or_a_cycle_is_not_right(tmp_path):
    truth = _truth(tmp_path)
    twice = [*RIGHT, _trace("tx", [("Q2", "P2")])]
    score = score_traces(truth, twice, EXPORTED)
    assert score["duplicated"] == 1 and score["requests"]["right"] == 1
    cycle = [
        _trace("ta", [("S1", None), ("C1", "S1"), ("V", "W"), ("W", "V"), ("G1", "V")]),
        *RIGHT[1:],
    ]
    assert score_traces(truth, cycle, EXPORTED)["inferred"]["right"] == 0


def test_without_the_exported_spans_only_the_links_are_not_told_apart(tmp_path):
    score = score_traces(_truth(tmp_path), RIGHT, None)
    assert score["exported"] == score["given"]["links"] == score["inferred"]["links"] == 0
    assert score["roots"]["right"] == 2 and score["requests"]["right"] == 2
    assert score["unobserved_hops"]["drawn"] == 1


def test_the_exported_parents_are_read_from_otlp_json_lines(tmp_path):
    spans = [{"spanId": s, **({"parentSpanId": p} if p else {})} for s, p in EXPORTED.items()]
    line = {"resourceSpans": [{"scopeSpans": [{"spans": spans[:4]}, {"spans": spans[4:]}]}]}
    path = tmp_path / "spans.jsonl"
    path.write_text(json.dumps(line) + "\n")
    assert score_traces(_truth(tmp_path), RIGHT, path) == score_traces(
        _truth(tmp_path), RIGHT, EXPORTED
    )
