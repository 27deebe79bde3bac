"""Small hand-written span tables for unit tests."""

from __future__ import annotations

from tacit.model.spans import NONE, SpanTable, StringPool


def table(rows: list[tuple]) -> SpanTable:
    """rows: (kind, endpoint, peer, start, end, true parent row[, thread]); all at instance
    a/a-0."""
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
        thread=[r[6] if len(r) > 6 else NONE for r in rows],
        trace=[NONE] * n,
        span_id=[NONE] * n,
        parent=[r[5] for r in rows],
        link=[NONE] * n,
        record=list(range(n)),
    )


def span_key(t: SpanTable, r: int) -> tuple:
    """What identifies span ``r`` of ``t`` whatever its ids and row: where it ran, its kind and
    its times (for matching the spans of two tables)."""
    return (
        t.name("service", r),
        t.name("instance", r),
        t.name("endpoint", r),
        int(t.kind[r]),
        int(t.start[r]),
        int(t.end[r]),
    )
