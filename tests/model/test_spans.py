"""The span table: a slice compacted to the strings it uses."""

import pickle

import numpy as np

from tacit.model.spans import NONE
from tacit.simulate import load_app, simulate

_STRINGS = ("service", "instance", "endpoint", "peer", "trace", "span_id")


def test_a_compacted_slice_names_every_span_alike_and_keeps_the_order_of_codes():
    spans = simulate(load_app(), 50, duration_s=4, seed=3)
    rows = np.flatnonzero(spans.start < np.quantile(spans.start, 0.1))
    part = spans.take(rows)
    small = part.compacted()
    for k in _STRINGS:
        before, after = getattr(part, k), getattr(small, k)
        assert part.strings.names(before) == small.strings.names(after)
        assert ((before == NONE) == (after == NONE)).all()
        # what is sorted by code is sorted alike
        assert (np.argsort(before, kind="stable") == np.argsort(after, kind="stable")).all()
    for k in ("kind", "start", "end", "parent", "link", "record"):
        assert (getattr(part, k) == getattr(small, k)).all()
    used = {v for k in _STRINGS for v in small.strings.names(getattr(small, k))} - {None}
    assert len(small.strings) == len(used) < len(spans.strings)
    assert len(pickle.dumps(small)) < len(pickle.dumps(part)) / 2
