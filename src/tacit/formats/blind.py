"""Blind spans: what a non-intrusive collector sees, as JSON lines.

One span per line, grouped by service instance and sorted by start::

    {"service": "search", "instance": "search-7b9", "endpoint": "/geo.Geo/Nearby",
     "kind": "client", "start_ns": 1655760362581907000, "end_ns": 1655760362589959000,
     "peer": "geo", "rpc": 17, "thread": null}

There are no trace, span or parent identifiers. ``rpc`` is the connection-level identity a
sidecar, eBPF probe or packet capture has for one request on the wire: the caller's client span
and the callee's server span of the same RPC share it (null when the other side was not
observed). It is numbered afresh in time order, so it carries nothing about traces.
"""

from __future__ import annotations

import json
from itertools import pairwise
from pathlib import Path

import numpy as np

from tacit.formats.common import Paths, input_files
from tacit.formats.fields import RecordReader
from tacit.formats.textio import iter_json_lines
from tacit.model.roles import process_key
from tacit.model.spans import KIND_CODES, KIND_NAMES, NONE, SpanTable, SpanTableBuilder, concat
from tacit.outputs import write_bytes

SUFFIXES = (".jsonl", ".jsonl.gz", ".json", ".json.gz")


def blind_lines(spans: SpanTable) -> list[str]:
    """The JSON lines of ``spans`` (identifiers dropped, RPC pairs numbered in time order)."""
    s = spans.strings
    order = np.lexsort((spans.start, spans.instance, spans.service))
    rpc = np.full(len(spans), NONE, dtype=np.int64)
    paired = np.flatnonzero(spans.link != NONE)
    first = paired[np.argsort(np.minimum(spans.start[paired], spans.start[spans.link[paired]]))]
    n = 0
    for r in first:
        if rpc[r] == NONE:
            rpc[r] = rpc[spans.link[r]] = n
            n += 1
    lines = []
    for r in order:
        lines.append(
            json.dumps(
                {
                    "service": s[int(spans.service[r])],
                    "instance": s[int(spans.instance[r])],
                    "endpoint": s[int(spans.endpoint[r])],
                    "kind": KIND_NAMES[int(spans.kind[r])],
                    "start_ns": int(spans.start[r]),
                    "end_ns": int(spans.end[r]),
                    "peer": s[int(spans.peer[r])],
                    "rpc": None if rpc[r] == NONE else int(rpc[r]),
                    "thread": None if spans.thread[r] == NONE else int(spans.thread[r]),
                },
                separators=(",", ":"),
            )
        )
    return lines


def write_blind(path: str | Path, spans: SpanTable) -> None:
    """Write ``spans`` as blind JSON lines (gzip when the name ends in .gz)."""
    write_bytes(path, ("\n".join(blind_lines(spans)) + "\n").encode())


def read_blind(paths: Paths) -> SpanTable:
    """Read blind JSON-lines files; spans sharing an ``rpc`` within a file are linked."""
    return concat([_read_file(f) for f in input_files(paths, SUFFIXES)])


def _read_file(path: Path) -> SpanTable:
    src = str(path)
    b = SpanTableBuilder(src)
    rpcs: list[int] = []
    for lineno, obj in iter_json_lines(path):
        r = RecordReader(src, f"line {lineno}")
        obj = r.obj(obj, "span")
        kind = r.string(obj, "kind")
        if kind not in ("server", "client"):
            raise r.fail(f"kind must be server or client, got {kind!r}")
        thread = r.integer(obj, "thread", default=NONE)
        b.add(
            service=r.string(obj, "service"),
            instance=r.string(obj, "instance", default=None),
            endpoint=r.string(obj, "endpoint"),
            kind=KIND_CODES[kind],
            start=r.integer(obj, "start_ns"),
            end=r.integer(obj, "end_ns"),
            record=lineno,
            peer=r.string(obj, "peer", default=None),
            thread=thread,
        )
        rpcs.append(r.integer(obj, "rpc", default=NONE))
    table = b.build()
    rpc = np.array(rpcs, dtype=np.int64)
    rows = np.flatnonzero(rpc != NONE)
    order = rows[np.lexsort((table.kind[rows], rpc[rows]))]
    proc = process_key(table)
    for a, c in pairwise(order):
        if rpc[a] == rpc[c]:
            if table.kind[a] == table.kind[c] or table.link[a] != NONE:
                raise RecordReader(src, f"line {table.record[c]}").fail(
                    f"rpc {rpc[c]} must pair exactly one server span with one client span"
                )
            table.link[a], table.link[c] = c, a
            if proc[a] == proc[c]:
                raise RecordReader(src, f"line {table.record[c]}").fail(
                    f"rpc {rpc[c]} pairs two spans of the same instance"
                )
    return table
