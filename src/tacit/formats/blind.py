"""Blind spans: what a non-intrusive collector sees, as JSON lines.

One span per line, grouped by service instance and sorted by start::

    {"service": "search", "instance": "search-7b9", "endpoint": "/geo.Geo/Nearby",
     "kind": "client", "start_ns": 1655760362581907000, "end_ns": 1655760362589959000,
     "peer": "geo", "rpc": 17, "thread": null}

There are no trace, span or parent identifiers. ``rpc`` is the connection-level identity a
sidecar, eBPF probe or packet capture has for one request on the wire: the caller's client span
and the callee's server span of the same RPC share it (null when the other side was not
observed). It is numbered afresh in time order, so it carries nothing about traces.

A file written in order of span end (``write_blind(..., in_end_order=True)``), as a collector
hands spans over, is a stream: :func:`read_blind_chunks` reads it incrementally for online
reconstruction, in memory that does not grow with the file.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np

from tacit.errors import ConfigError, InputError
from tacit.formats.common import Paths, input_files
from tacit.formats.fields import RecordReader
from tacit.formats.textio import iter_json_lines
from tacit.model.roles import process_key
from tacit.model.spans import KIND_CODES, KIND_NAMES, NONE, SpanTable, SpanTableBuilder, concat
from tacit.outputs import write_bytes

SUFFIXES = (".jsonl", ".jsonl.gz", ".json", ".json.gz")
_NOT_A_PAIR = "rpc {} must pair exactly one server span with one client span"
_SAME_INSTANCE = "rpc {} pairs two spans of the same instance"


def blind_lines(spans: SpanTable, in_end_order: bool = False) -> list[str]:
    """The JSON lines of ``spans`` (identifiers dropped, RPC pairs numbered in time order),
    grouped by instance and sorted by start, or with ``in_end_order`` sorted by end then start:
    a stream (see the module docstring)."""
    s = spans.strings
    if in_end_order:
        order = np.lexsort((spans.start, spans.end))
    else:
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


def write_blind(path: str | Path, spans: SpanTable, in_end_order: bool = False) -> None:
    """Write ``spans`` as blind JSON lines (gzip when the name ends in .gz), in the order of
    :func:`blind_lines`."""
    write_bytes(path, ("\n".join(blind_lines(spans, in_end_order)) + "\n").encode())


def read_blind(paths: Paths) -> SpanTable:
    """Read blind JSON-lines files; spans sharing an ``rpc`` within a file are linked."""
    return concat([_read_file(f) for f in input_files(paths, SUFFIXES)])


def _read_file(path: Path) -> SpanTable:
    src = str(path)
    b = SpanTableBuilder(src)
    rpcs: list[int] = []
    for lineno, obj in iter_json_lines(path):
        span, number = _record(RecordReader(src, f"line {lineno}"), lineno, obj)
        b.add(**span)
        rpcs.append(number)
    table = b.build()
    rpc = np.array(rpcs, dtype=np.int64)
    rows = np.flatnonzero(rpc != NONE)
    order = rows[np.lexsort((table.kind[rows], rpc[rows]))]
    proc = process_key(table)
    for a, c in pairwise(order):
        if rpc[a] == rpc[c]:
            if table.kind[a] == table.kind[c] or table.link[a] != NONE:
                raise RecordReader(src, f"line {table.record[c]}").fail(_NOT_A_PAIR.format(rpc[c]))
            table.link[a], table.link[c] = c, a
            if proc[a] == proc[c]:
                raise RecordReader(src, f"line {table.record[c]}").fail(
                    _SAME_INSTANCE.format(rpc[c])
                )
    return table


def _record(r: RecordReader, lineno: int, obj: object) -> tuple[dict[str, Any], int]:
    """Line ``lineno``'s span, as :meth:`SpanTableBuilder.add` takes it, and its ``rpc`` (NONE
    when null)."""
    obj = r.obj(obj, "span")
    kind = r.string(obj, "kind")
    if kind not in ("server", "client"):
        raise r.fail(f"kind must be server or client, got {kind!r}")
    service = r.string(obj, "service")
    instance = r.string(obj, "instance", default=None)
    span = {
        "service": service,
        "instance": service if instance is None else instance,
        "endpoint": r.string(obj, "endpoint"),
        "kind": KIND_CODES[kind],
        "start": r.integer(obj, "start_ns"),
        "end": r.integer(obj, "end_ns"),
        "record": lineno,
        "peer": r.string(obj, "peer", default=None),
        "thread": r.integer(obj, "thread", default=NONE),
    }
    return span, r.integer(obj, "rpc", default=NONE)


def _pair_error(rpc: int, first: dict[str, Any], span: dict[str, Any]) -> str | None:
    """Why ``span`` cannot be the other side of ``first`` (both with ``rpc``), or None."""
    if first["kind"] == span["kind"]:
        return _NOT_A_PAIR.format(rpc)
    if (first["service"], first["instance"]) == (span["service"], span["instance"]):
        return _SAME_INSTANCE.format(rpc)
    return None


LATER = np.iinfo(np.int64).max
"""The ``link`` of a streamed span whose RPC partner is still to come: a stream position that no
span has yet (see :func:`read_blind_chunks`)."""


def read_blind_chunks(path: str | Path, chunk_size: int = 1000) -> Iterator[SpanTable]:
    """A blind JSON-lines file as consecutive tables of ``chunk_size`` spans, read line by line.

    Each chunk has its own string pool (only its own strings) and records numbered by line from
    the file's start. ``link`` holds *stream positions* (the n-th span of the file is position
    n): the earlier side of an RPC pair has :data:`LATER` (its partner has not been read yet),
    the later side the earlier one's position, and a later side without ``peer`` gets the earlier
    side's service, as :func:`tacit.model.roles.infer_roles` gives it. Only RPCs whose second
    side has not come yet are remembered, so a third span reusing a completed ``rpc`` starts a
    new pair rather than being refused as :func:`read_blind` refuses it.
    """
    if chunk_size < 1:
        raise ConfigError(f"chunk_size must be positive, got {chunk_size}")
    src = str(path)
    waiting: dict[int, tuple[int, dict[str, Any]]] = {}  # rpc -> first side's position, span
    b = SpanTableBuilder(src)
    links: list[int] = []
    for position, (lineno, obj) in enumerate(iter_json_lines(path)):
        r = RecordReader(src, f"line {lineno}")
        span, rpc = _record(r, lineno, obj)
        link = NONE
        if rpc != NONE:
            if rpc in waiting:
                link, first = waiting.pop(rpc)
                why = _pair_error(rpc, first, span)
                if why:
                    raise r.fail(why)
                if span["peer"] is None:
                    span["peer"] = first["service"]
            else:
                waiting[rpc] = (position, span)
                link = LATER
        b.add(**span)
        links.append(link)
        if len(b) == chunk_size:
            yield _chunk(b, links)
            b, links = SpanTableBuilder(src), []
    if len(b):
        yield _chunk(b, links)


def _chunk(b: SpanTableBuilder, links: list[int]) -> SpanTable:
    table = b.build()
    table.link = np.array(links, dtype=np.int64)
    return table


def in_stream_order(path: str | Path) -> bool:
    """Whether :func:`read_blind_chunks` streams ``path`` as the batch online mode would order it:
    its spans sorted by end, then start, and every span with an ``rpc`` naming its ``peer`` (the
    stream cannot give an earlier side the peer its later partner implies). Reads the file line
    by line; a malformed file is not in stream order (its batch read names the error)."""
    src = str(path)
    last = (-1, -1)
    try:
        for lineno, obj in iter_json_lines(path):
            span, rpc = _record(RecordReader(src, f"line {lineno}"), lineno, obj)
            key = (span["end"], span["start"])
            if key < last or (rpc != NONE and span["peer"] is None):
                return False
            last = key
    except InputError:
        return False
    return True
