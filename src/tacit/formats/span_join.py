"""Several span files as one set of spans.

Per-service exporters write one file per service (the OpenTelemetry Collector's file exporter
per pipeline, one SDK per process), so a client span is in its caller's file and the server span
of the call, which names it as its parent, in the callee's. A reader links parents within one
file (:class:`~tacit.model.spans.SpanInput`); :func:`join_inputs` makes the files one set: a
span's parent is the span with its trace id and parent span id, whichever file holds it, and
a span in two files (the same trace id and span id: an export written twice, a file beside the
directory that holds it too) is one span, kept from the first file that has it and counted as a
duplicate in the others. Copies that differ in service, name, kind or parent are not one span
exported twice: an :class:`InputError` names both.

One span id in two files may also be Zipkin's *shared* span: the server side of an RPC recorded
under the client's id (:mod:`.zipkin`). Within one file the Zipkin reader tells it by its
``shared`` flag or by a non-server span with the same id; across files, a server span and a
non-server span with one id are taken for it here, as that reader takes them within a file: the
server side gets the id ``ID:server`` (:data:`SHARED_SERVER`) and the client span as parent.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import NamedTuple

import numpy as np

from tacit.errors import InputError
from tacit.model.columns import recode
from tacit.model.parents import climb
from tacit.model.spans import (
    KIND_NAMES,
    NONE,
    SERVER,
    SpanInput,
    SpanTable,
    concat,
    link_parents,
    span_key,
)
from tacit.runs import distinct, run_heads

SHARED_SERVER = ":server"
"""Appended to the id of the server side of a shared span (Zipkin's ``shared``)."""


class Joined(NamedTuple):
    """What :func:`join_inputs` made of several inputs."""

    spans: SpanTable
    """One table of the inputs' spans, each once, their parents linked across inputs."""
    duplicates: int
    """Spans left out because an earlier input has them (their trace id and span id)."""


def join_inputs(inputs: Sequence[SpanInput]) -> Joined:
    """The spans of ``inputs`` (in their order) as one set; see the module docstring.

    Raises :class:`InputError` for two different spans with one trace id and span id in two
    inputs, and for parent links that form a cycle through several inputs."""
    if len(inputs) <= 1:
        return Joined(inputs[0].spans if inputs else SpanTable.empty(), 0)
    tables = [i.spans for i in inputs]
    spans = concat(tables)
    parent_id = np.concatenate([_recoded(spans, i) for i in inputs])
    origin = np.repeat(np.arange(len(tables)), [len(t) for t in tables])
    copies = _Copies(spans)
    _check_copies(spans, parent_id, origin, tables, copies.rows, copies.kept[copies.rows])
    # A parent in the span's own file stays (its kept copy, if the file repeats another's).
    parent = np.where(spans.parent >= 0, copies.kept[np.maximum(spans.parent, 0)], NONE)
    if len(copies.shared):
        _rename_shared(spans, copies.shared)
    keep = np.ones(len(spans), bool)
    keep[copies.rows] = False
    # The others by trace and parent span id among the spans of every file.
    wanted = keep & (parent == NONE) & (parent_id != NONE)
    linked = link_parents(
        span_key(spans.trace, spans.span_id),
        keep & (spans.span_id != NONE),
        span_key(spans.trace, parent_id),
        wanted,
    )
    if linked.duplicate >= 0:  # a server side renamed here met one its own file renamed
        r = linked.duplicate
        raise InputError(
            f"span id {spans.name('span_id', r)} of trace {spans.name('trace', r)} is in "
            "another input too",
            path=_source(tables, origin, r),
            record=int(spans.record[r]),
        )
    parent = np.where(wanted, linked.parent, parent)
    parent[copies.shared] = copies.clients
    parent[~keep] = NONE
    cycle = int(climb(parent)[2])
    if cycle >= 0:
        raise InputError(
            f"trace {spans.name('trace', cycle)}: parent links form a cycle through span "
            f"{spans.name('span_id', cycle)} (parents in several files)",
            path=_source(tables, origin, cycle),
            record=int(spans.record[cycle]),
        )
    spans.parent = parent
    return Joined(spans.take(keep) if len(copies.rows) else spans, len(copies.rows))


class _Copies:
    """The spans of a joined table that share a trace id and span id.

    Rows with one key are copies of one span, the first kept; but a server span and a
    non-server span with one key are two spans (Zipkin's shared span, a side in each file):
    the server spans among them are copies of the server side, the others of the client side.
    """

    def __init__(self, spans: SpanTable) -> None:
        rows = np.flatnonzero(spans.span_id != NONE)
        key = span_key(spans.trace[rows], spans.span_id[rows])
        by_key = np.argsort(key, kind="stable")
        order = rows[by_key]
        group = np.cumsum(run_heads(key[by_key])) - 1  # per sorted row, its key's number
        server = spans.kind[order] == SERVER
        groups = int(group[-1]) + 1 if len(order) else 0
        has_server, has_other = np.zeros(groups, bool), np.zeros(groups, bool)
        has_server[group[server]] = True
        has_other[group[~server]] = True
        side = server & (has_server & has_other)[group]  # the server side of a shared span
        resort = np.lexsort((side, group))  # stable: the copies of one span stay in input order
        order, group, side = order[resort], group[resort], side[resort]
        head = run_heads(group, side)
        first = np.maximum.accumulate(np.where(head, np.arange(len(order)), 0))
        self.kept = np.arange(len(spans))
        """Per row, the row kept of its span's copies (itself, but for :attr:`rows`)."""
        self.kept[order] = order[first]
        self.rows = order[~head]
        """The copies left out."""
        self.shared = order[head & side]
        """The kept server sides of shared spans."""
        self.clients = order[np.flatnonzero(run_heads(group))[group[head & side]]]
        """The kept client side of each of :attr:`shared` (the first of its key: False sorts
        before True)."""


def _recoded(spans: SpanTable, part: SpanInput) -> np.ndarray:
    """The parent span ids of ``part`` as codes of the joined ``spans``' strings."""
    ids = np.asarray(part.parent_ids, np.int64)
    lookup = recode(spans.strings, part.spans.strings, distinct(ids[ids >= 0]))
    return lookup[ids].astype(np.int64)  # -1 reads the lookup's last slot: -1


def _source(tables: Sequence[SpanTable], origin: np.ndarray, row: int) -> str | None:
    sources = tables[int(origin[row])].sources
    return sources[0] if sources else None


def _check_copies(
    spans: SpanTable,
    parent_id: np.ndarray,
    origin: np.ndarray,
    tables: Sequence[SpanTable],
    copies: np.ndarray,
    kept: np.ndarray,
) -> None:
    """Raise :class:`InputError` at the first of ``copies`` that is not the span it shares its
    ids with (``kept``): another service, name, kind or parent. Times are not compared: a span
    exported by two formats may be in µs in one (Jaeger, Zipkin) and in ns in the other."""
    fields = {
        "service": spans.service,
        "name": spans.endpoint,
        "kind": spans.kind,
        "parent": parent_id,
    }
    for what, column in fields.items():
        differ = np.flatnonzero(column[copies] != column[kept])
        if not len(differ):
            continue
        r, k = int(copies[differ[0]]), int(kept[differ[0]])
        if what == "kind":
            there, here = (KIND_NAMES[int(spans.kind[x])] for x in (k, r))
        else:
            there, here = (_shown(spans.strings[int(column[x])]) for x in (k, r))
        raise InputError(
            f"span id {spans.name('span_id', r)} of trace {spans.name('trace', r)} is another "
            f"span in {_source(tables, origin, k)} (record {int(spans.record[k])}): {what} "
            f"{here} here, {there} there",
            path=_source(tables, origin, r),
            record=int(spans.record[r]),
        )


def _shown(value: str | None) -> str:
    return "none" if value is None else repr(value)


def _rename_shared(spans: SpanTable, rows: np.ndarray) -> None:
    """Give the server sides of shared spans (``rows``) their own ids (:data:`SHARED_SERVER`)."""
    pool = spans.strings
    ids = [f"{pool[int(c)]}{SHARED_SERVER}" for c in spans.span_id[rows].tolist()]
    spans.span_id[rows] = pool.codes(ids)
    if spans.details is not None:
        for r, new in zip(rows.tolist(), ids, strict=True):
            detail = spans.details[r]
            if detail is not None:
                spans.details[r] = replace(detail, span_id=new)
