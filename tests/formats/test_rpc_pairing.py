"""Pairing client and server spans of one RPC by key, agreeing identifiers and nesting in time."""

from __future__ import annotations

import pytest

from tacit.formats.rpc_pairing import (
    NO_KEY,
    NONE_WITHIN,
    NOTHING_OPPOSITE,
    TAKEN,
    PairingParams,
    pair_rpcs,
)
from tacit.model.spans import CLIENT, NONE, SERVER, SpanTable, SpanTableBuilder

# name, service, kind, start, end, key, agree
SPANS = [
    ("c1", "a", CLIENT, 0, 100, "K", None),
    ("c2", "a", CLIENT, 10, 60, "K", None),
    ("s1", "b", SERVER, 20, 50, "K", None),
    ("s2", "b", SERVER, 5, 95, "K", None),  # within c1 only, and closest to it
    ("c3", "a", CLIENT, 200, 300, "K", None),  # nothing of K in its time
    ("c4", "a", CLIENT, 400, 500, "K2", None),  # nothing of K2 at all
    ("c5", "a", CLIENT, 400, 500, None, None),  # no key
    ("c6", "a", CLIENT, 600, 700, "K", None),
    ("c7", "c", CLIENT, 590, 720, "K", None),  # s3 is closer to c6
    ("s3", "b", SERVER, 610, 690, "K", None),
    ("c8", "a", CLIENT, 800, 900, "K", "x"),
    ("s4", "b", SERVER, 810, 890, "K", "y"),  # disagrees with c8
    ("s5", "a", SERVER, 1010, 1090, "K", None),  # c9's own process
    ("c9", "a", CLIENT, 1000, 1100, "K", None),
    ("s6", "b", SERVER, 1200, 1301, "K", None),  # ends 1 ns after c10
    ("c10", "c", CLIENT, 1200, 1300, "K", None),
]


def table() -> SpanTable:
    b = SpanTableBuilder("t")
    for rec, (name, svc, kind, start, end, _, _) in enumerate(SPANS, 1):
        endpoint = "raw /x/1" if kind == CLIENT else f"GET /x/{{id}} {name}"
        b.add(service=svc, instance=None, endpoint=endpoint, kind=kind, start=start, end=end,
              record=rec, peer="addr" if kind == CLIENT else None)  # fmt: skip
    return b.build()


def pairs(spans: SpanTable) -> dict[str, str]:
    names = [s[0] for s in SPANS]
    return {names[r]: names[int(spans.link[r])] for r in range(len(spans)) if spans.link[r] >= 0}


def test_closest_nesting_pairs_one_to_one_and_every_span_is_accounted_for() -> None:
    spans = table()
    got = pair_rpcs(spans, [s[5] for s in SPANS], [[s[6] for s in SPANS]])
    assert pairs(spans) == {"c1": "s2", "s2": "c1", "c2": "s1", "s1": "c2", "c6": "s3", "s3": "c6"}
    assert got == {
        "client_spans": 10,
        "server_spans": 6,
        "rpcs_paired": 3,
        f"client spans unpaired: {NO_KEY}": 1,
        f"client spans unpaired: {NOTHING_OPPOSITE}": 1,
        f"client spans unpaired: {NONE_WITHIN}": 4,  # c3, c8, c9, c10
        f"client spans unpaired: {TAKEN}": 1,  # c7
        f"server spans unpaired: {NONE_WITHIN}": 3,  # s4, s5, s6
    }
    c1, s2 = 0, 3
    assert spans.name("peer", c1) == "b" and spans.name("peer", s2) == "a"
    assert spans.name("endpoint", c1) == "GET /x/{id} s2"  # the callee names the endpoint
    assert spans.link[4] == NONE and spans.name("peer", 4) == "addr"  # unpaired: as read


def test_tolerance_lets_coarse_times_nest() -> None:
    spans = table()
    pair_rpcs(spans, [s[5] for s in SPANS], [[s[6] for s in SPANS]], PairingParams(1))
    assert pairs(spans)["c10"] == "s6"


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="one value per span"):
        pair_rpcs(table(), ["K"])
    with pytest.raises(ValueError, match="tolerance_ns"):
        pair_rpcs(table(), [s[5] for s in SPANS], params=PairingParams(-1))
