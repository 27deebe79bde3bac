"""Small hand-written span tables for unit tests."""

from __future__ import annotations

from tacit.model.spans import NONE, SpanTable, StringPool


def table(rows: list[tuple]) -> SpanTable:
    """rows: (kind, endpoint, peer, start, end, true parent row); all at instance a/a-0."""
    s = StringPool()
    n = len(rows)
    return SpanTable(
        s,
        service=[s.code("a")] * n,
        instance=[s.code("a-0")] * n,
        endpoint=[s.code(r[1]) for r in rows],
        kind=[r[0] for r in rows],
        start=[r[3] for r in rows],
        end=[r[4] for r in rows],
        peer=[s.code(r[2]) for r in rows],
        thread=[NONE] * n,
        trace=[NONE] * n,
        span_id=[NONE] * n,
        parent=[r[5] for r in rows],
        link=[NONE] * n,
        record=list(range(n)),
    )
