"""Constructed traces for the diagnosis tests: a root and RPCs with known timing."""

from __future__ import annotations

from tacit.model.spans import CLIENT, SERVER, SpanTableBuilder

US = 1_000


def trace(calls: list[tuple], *, root: tuple = ("frontend", 0, 100), trace_id: str = "t1"):
    """A root server span and RPCs under it, times in µs.

    ``calls``: (name, parent name or None for the root, callee service, client start, client
    end, server start, server end); each RPC is a client span at the parent's service and a
    server span at the callee. Returns the table and the row of each span by name
    ("root", "name:client", "name:server").
    """
    b = SpanTableBuilder("constructed")
    svc = {"root": root[0]}
    b.add(
        service=root[0],
        instance=None,
        endpoint="GET /",
        kind=SERVER,
        start=root[1] * US,
        end=root[2] * US,
        record=0,
        trace=trace_id,
        span_id="root",
    )
    names = ["root"]
    for name, parent, callee, cs, ce, ss, se in calls:
        caller = svc[parent or "root"]
        pid = f"{parent}:server" if parent else "root"
        b.add(
            service=caller,
            instance=None,
            endpoint=name,
            kind=CLIENT,
            start=cs * US,
            end=ce * US,
            record=len(names),
            trace=trace_id,
            span_id=f"{name}:client",
            parent_id=pid,
        )
        b.add(
            service=callee,
            instance=None,
            endpoint=name,
            kind=SERVER,
            start=ss * US,
            end=se * US,
            record=len(names) + 1,
            trace=trace_id,
            span_id=f"{name}:server",
            parent_id=f"{name}:client",
        )
        names += [f"{name}:client", f"{name}:server"]
        svc[name] = callee
    return b.build(), {n: i for i, n in enumerate(names)}


SERIAL_CALLS = [("a", None, "A", 10, 40, 15, 35), ("b", None, "B", 50, 90, 55, 85)]
PARALLEL_CALLS = [("a", None, "A", 10, 50, 12, 48), ("b", None, "B", 10, 80, 12, 78)]
# Three replicas asked at once; the parent goes on after two answers (at 55, with d).
REDUNDANT_CALLS = [
    ("a", None, "A", 10, 30, 12, 28),
    ("b", None, "B", 10, 50, 12, 48),
    ("c", None, "C", 10, 95, 12, 93),
    ("d", None, "D", 55, 90, 57, 88),
]
