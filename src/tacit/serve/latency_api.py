"""tacit's latency series over HTTP, beside the Jaeger query API.

``GET /api/tacit/latency/response?server=&start=&end=&limit=``
    Pirate's estimates: ``data``, one row per connection and epoch (``source``, ``client``,
    ``server``, ``epoch_start_ns``, ``epoch_end_ns``, ``latency_ns``, ``samples``);
    ``series``, per server, one point per epoch: the samples-weighted mean of its connections'
    estimates (``latency_ns``), with their ``samples`` and ``connections``; ``packets``, per
    source, what became of every packet.
``GET /api/tacit/latency/oneway?source=&start=&end=&limit=``
    RDA's interval records (``data``, the columns of ``rda_intervals``) and the rejected lines
    per source (``rejected``).

``start`` and ``end`` are microseconds since the epoch, as in Jaeger's ``/api/traces``, and
bound the epoch's (interval's) start; ``limit`` (default :data:`DEFAULT_LIMIT`) keeps the latest
rows.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tacit.serve.jaeger_api import MAX_US, int_param
from tacit.serve.store import Store

DEFAULT_LIMIT = 10_000
_COLUMNS = ("source", "client", "server", "epoch_start_ns", "epoch_end_ns", "latency_ns", "samples")


def _window(params: Mapping[str, str]) -> tuple[int | None, int | None, int]:
    start, end = int_param(params, "start", MAX_US), int_param(params, "end", MAX_US)
    return (
        None if start is None else start * 1000,
        None if end is None else end * 1000,
        int_param(params, "limit") or DEFAULT_LIMIT,
    )


def response_series(store: Store, params: Mapping[str, str]) -> dict[str, Any]:
    """The answer of ``/api/tacit/latency/response``."""
    start, end, limit = _window(params)
    rows = store.pirate_estimates(params.get("server") or None, start, end, limit)
    points: dict[str, dict[int, list[int]]] = {}  # server: epoch start: [latency·n, n, conns]
    for _, _, server, epoch, _, latency, n in rows:
        p = points.setdefault(server, {}).setdefault(epoch, [0, 0, 0])
        p[0] += latency * n
        p[1] += n
        p[2] += 1
    return {
        "data": [dict(zip(_COLUMNS, r, strict=True)) for r in rows],
        "series": [
            {
                "server": server,
                "points": [
                    {
                        "epoch_start_ns": epoch,
                        "latency_ns": total // n,
                        "samples": n,
                        "connections": c,
                    }
                    for epoch, (total, n, c) in sorted(by_epoch.items())
                ],
            }
            for server, by_epoch in sorted(points.items())
        ],
        "packets": store.pirate_packets(),
    }


def oneway_series(store: Store, params: Mapping[str, str]) -> dict[str, Any]:
    """The answer of ``/api/tacit/latency/oneway``."""
    start, end, limit = _window(params)
    return {
        "data": store.rda_intervals(params.get("source") or None, start, end, limit),
        "rejected": store.rda_rejected(),
    }


def latency_series(store: Store, path: str, params: Mapping[str, str]) -> Any | None:
    """The answer of the latency series at ``path`` (module docstring); None for another
    path."""
    if path == "/api/tacit/latency/response":
        return response_series(store, params)
    if path == "/api/tacit/latency/oneway":
        return oneway_series(store, params)
    return None
