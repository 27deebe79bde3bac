"""Synthetic requests for the tail and A/B tests: a front service calling a then b."""

from __future__ import annotations

import numpy as np

from tacit.model.spans import CLIENT, SERVER, SpanTableBuilder


def requests(n: int, seed: int):
    """n requests: front calls a then b (serial), each with lognormal latencies (log-sd 0.5, a
    tail as heavy as the real HotelReservation services')."""
    rng = np.random.default_rng(seed)
    b = SpanTableBuilder()
    t = 0
    for i in range(n):
        fa, a, fb, bb, tail = (rng.lognormal(13, 0.5, 5)).astype(np.int64)
        t0 = t
        rows = [
            ("front", SERVER, t0, t0 + fa + fb + tail, "f", None),
            ("front", CLIENT, t0 + fa // 2, t0 + fa // 2 + a, "fa", "f"),
            ("a", SERVER, t0 + fa // 2 + 1, t0 + fa // 2 + a - 1, "a", "fa"),
            ("front", CLIENT, t0 + fa // 2 + a, t0 + fa // 2 + a + bb, "fb", "f"),
            ("b", SERVER, t0 + fa // 2 + a + 1, t0 + fa // 2 + a + bb - 1, "b", "fb"),
        ]
        rows[0] = ("front", SERVER, t0, rows[3][3] + tail, "f", None)
        for k, (svc, kind, s, e, sid, par) in enumerate(rows):
            b.add(
                service=svc,
                instance=None,
                endpoint="op",
                kind=kind,
                start=int(s),
                end=int(e),
                record=5 * i + k,
                trace=f"t{i}",
                span_id=sid,
                parent_id=par,
            )
        t += 10**7
    return b.build()
