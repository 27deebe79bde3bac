"""Spans as numpy column batches.

A span is (service, instance, endpoint, kind, start, end, peer, thread), optionally with the
identifiers a tracer assigned (trace, span, parent). Strings are interned into one
:class:`StringPool` per table and stored as int32 codes, so that grouping and sorting are
numpy operations rather than loops over objects. Times are int64 nanoseconds. What a tracer
recorded beyond these (attributes, status, events, resource, the original span id) rides along
in an optional object column of :class:`~tacit.model.span_details.SpanDetail` references
(see :mod:`tacit.model.span_details` for the design).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar, NamedTuple

import numpy as np
import numpy.typing as npt

from tacit.errors import InputError
from tacit.model.columns import NONE, ColumnTable, StringPool, recode, typed_columns
from tacit.model.parents import climb
from tacit.model.span_details import SpanDetail, concat_details, detail_column
from tacit.runs import distinct, find_sorted

__all__ = ["NONE", "StringPool"]  # re-exported: where spans' users have always found them

SERVER = 0
"""An incoming request handled by the span's instance."""
CLIENT = 1
"""An outgoing request made by the span's instance."""
INTERNAL = 2
"""In-process work: invisible to a collector outside the process."""
UNKNOWN = -1
"""Kind not recorded; :func:`tacit.model.roles.infer_roles` decides it."""

KIND_NAMES = {SERVER: "server", CLIENT: "client", INTERNAL: "internal", UNKNOWN: "unknown"}
KIND_CODES = {v: k for k, v in KIND_NAMES.items()}

_COLUMNS = {
    "service": np.int32,
    "instance": np.int32,
    "endpoint": np.int32,
    "kind": np.int8,
    "start": np.int64,
    "end": np.int64,
    "peer": np.int32,
    "thread": np.int64,
    "trace": np.int32,
    "span_id": np.int32,
    "parent": np.int64,
    "link": np.int64,
    "record": np.int64,
}
_STRING_COLUMNS = ("service", "instance", "endpoint", "peer", "trace", "span_id")


@dataclass
class SpanTable(ColumnTable):
    """A batch of spans, one numpy column per field.

    ``service``, ``instance``, ``endpoint``, ``peer`` (the service on the other side of an RPC),
    ``trace`` and ``span_id`` are codes into ``strings``. ``parent`` is the row of the parent span
    (the tracer's ground truth, -1 for roots or when unknown). ``link`` pairs the two sides of one
    RPC: the row of the callee's server span for a client span, and the caller's client span for a
    server span (-1 when the other side was not observed). ``record`` is the position of the span
    in its input, for error messages and accounting; ``sources`` names the input files.
    ``details`` is the object column of :class:`SpanDetail` (None where a row has none), or
    None when no row has one; :meth:`take` and :func:`concat` carry it.
    """

    strings: StringPool
    service: np.ndarray
    instance: np.ndarray
    endpoint: np.ndarray
    kind: np.ndarray
    start: np.ndarray
    end: np.ndarray
    peer: np.ndarray
    thread: np.ndarray
    trace: np.ndarray
    span_id: np.ndarray
    parent: np.ndarray
    link: np.ndarray
    record: np.ndarray
    sources: list[str] = field(default_factory=list)
    details: np.ndarray | None = None
    COLUMNS: ClassVar[Mapping[str, npt.DTypeLike]] = _COLUMNS

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.details is not None and (
            self.details.dtype != object or len(self.details) != len(self)
        ):
            raise ValueError(f"details must be an object column of {len(self)} rows")

    def detail(self, row: int) -> SpanDetail | None:
        """What the input recorded about span ``row`` beyond the columns, if anything."""
        return None if self.details is None else self.details[row]

    def take(self, rows: np.ndarray) -> SpanTable:
        """The spans at ``rows`` (an index array or mask), with row references remapped.

        ``parent`` and ``link`` that point outside the selection become -1.
        """
        rows = np.flatnonzero(rows) if rows.dtype == bool else np.asarray(rows, dtype=np.int64)
        remap = np.full(len(self) + 1, NONE, dtype=np.int64)
        remap[rows] = np.arange(len(rows))
        cols = {k: v[rows] for k, v in self.columns().items()}
        cols["parent"] = remap[cols["parent"]]  # -1 indexes the sentinel slot, which stays -1
        cols["link"] = remap[cols["link"]]
        details = None if self.details is None else self.details[rows]
        return SpanTable(self.strings, **cols, sources=self.sources, details=details)

    def compacted(self) -> SpanTable:
        """These spans with a pool of only the strings they use: a slice of a big table shares
        its whole pool, which pickling it (to send it to another process) would carry along.
        The codes keep their order, so what is sorted by code stays sorted alike."""
        pool = StringPool()
        table = _recoded(pool, self)
        cols = {k: table[v] if k in _STRING_COLUMNS else v for k, v in self.columns().items()}
        return SpanTable(pool, **cols, sources=self.sources, details=self.details)

    def describe(self, row: int) -> str:
        """A short human description of one span, for messages."""
        return (
            f"{self.name('service', row)}/{self.name('endpoint', row)} "
            f"({KIND_NAMES[int(self.kind[row])]}, record {int(self.record[row])})"
        )


def concat(tables: Sequence[SpanTable], *, into_first: bool = False) -> SpanTable:
    """Concatenate tables, re-interning strings into one pool and offsetting row references.

    With ``into_first``, the pool is the first table's, extended with the others' strings: its
    codes stay as they are (as do those of every table sharing the pool), so the work is that
    of the other tables alone, not of every row again; but the pool keeps strings no row uses
    any more, and a caller that appends forever compacts it now and then (``into_first``
    False: a fresh pool of the strings in use)."""
    if not tables:
        return SpanTable.empty()
    if len(tables) == 1:
        return tables[0]
    pool = tables[0].strings if into_first else StringPool()
    parts: dict[str, list[np.ndarray]] = {k: [] for k in _COLUMNS}
    offset = 0
    sources: list[str] = []
    for i, t in enumerate(tables):
        # the first table's codes, kept as they are
        table = None if into_first and i == 0 else _recoded(pool, t)
        for k, v in t.columns().items():
            if k in _STRING_COLUMNS and table is not None:
                v = table[v]
            elif k in ("parent", "link"):
                v = np.where(v >= 0, v + offset, NONE)
            parts[k].append(v)
        offset += len(t)
        sources.extend(s for s in t.sources if s not in sources)
    details = concat_details([(len(t), t.details) for t in tables])
    cols = {k: np.concatenate(v) for k, v in parts.items()}
    return SpanTable(pool, **cols, sources=sources, details=details)


def _recoded(pool: StringPool, table: SpanTable) -> np.ndarray:
    """A lookup from the string codes of ``table`` to codes of ``pool``, into which only the
    strings its rows use are interned (in the order of their codes): a slice of a big table
    shares its whole pool."""
    used = distinct(np.concatenate([getattr(table, k) for k in _STRING_COLUMNS]))
    return recode(pool, table.strings, used)


def _bad_times(start: int, end: int) -> str:
    """Why a span of ``start`` and ``end`` (ns since the epoch) is refused: it ends before it
    starts, or starts before 1970 (a time of a clock that was never set, or a sign error),
    which the windows of online reconstruction and the samplers' seeds take as no time."""
    if start < 0:
        return f"span starts before 1970 ({start} ns since the epoch)"
    return f"span ends before it starts ({end} < {start} ns)"


class SpanTableBuilder:
    """Accumulates spans one by one (as parsers produce them) and builds a :class:`SpanTable`.

    Parents are given as span-id strings and resolved to rows within the same trace at
    :meth:`build`; a parent that is not in the input leaves the span a root of its fragment and
    is counted in :attr:`missing_parents`.
    """

    def __init__(self, source: str = "") -> None:
        self.strings = StringPool()
        self.source = source
        self._rows: list[tuple] = []  # the values of each span's columns, in _COLUMNS' order
        self._parent_ids: list[int] = []
        self._details: list[SpanDetail | None] = []
        self.missing_parents = 0

    def add(
        self,
        service: str,
        instance: str | None,
        endpoint: str,
        kind: int,
        start: int,
        end: int,
        record: int,
        peer: str | None = None,
        thread: int = NONE,
        trace: str | None = None,
        span_id: str | None = None,
        parent_id: str | None = None,
        detail: SpanDetail | None = None,
    ) -> None:
        if end < start or start < 0:
            raise InputError(_bad_times(start, end), path=self.source, record=record)
        code = self.strings.code
        self._rows.append(
            (
                code(service),
                code(instance if instance is not None else service),
                code(endpoint),
                kind,
                start,
                end,
                code(peer),
                thread,
                code(trace),
                code(span_id),
                NONE,
                NONE,
                record,
            )
        )
        self._parent_ids.append(code(parent_id))
        self._details.append(detail)

    def __len__(self) -> int:
        return len(self._rows)

    def parent_ids(self) -> np.ndarray:
        """The parent span id each span named, resolved or not, as codes of :attr:`strings`
        (-1 for none): what a reader of a stream needs to find parents in later inputs."""
        return np.asarray(self._parent_ids, np.int64)

    def build(self) -> SpanTable:
        return self.build_input().spans

    def build_input(self) -> SpanInput:
        """The table (:meth:`build`) with the parent span id each span named, for
        :func:`tacit.formats.span_join.join_inputs` to find parents in other inputs."""
        if self._rows:  # one list per column
            c = dict(zip(_COLUMNS, map(list, zip(*self._rows, strict=True)), strict=True))
        else:
            c = {k: [] for k in _COLUMNS}
        cols = typed_columns(c, _COLUMNS, c["record"], self.source)
        parent, self.missing_parents = resolve_parents(
            cols["trace"],
            cols["span_id"],
            self.parent_ids(),
            cols["record"],
            self.strings,
            self.source,
        )
        cols["parent"] = parent
        table = SpanTable(
            self.strings,
            **cols,
            sources=[self.source] if self.source else [],
            details=detail_column(self._details),
        )
        return SpanInput(table, self.parent_ids())


class SpanInput(NamedTuple):
    """The spans of one input (a file) as a reader read them: ``spans``, their parents linked
    within the input, and ``parent_ids``, the parent span id each span named (codes of
    ``spans.strings``, -1 for none), found in the input or not: several inputs are one set of
    spans, whose parents may be in another input (one file per service), and
    :func:`tacit.formats.span_join.join_inputs` links them by these ids."""

    spans: SpanTable
    parent_ids: np.ndarray


def resolve_parents(
    trace: np.ndarray,
    span_id: np.ndarray,
    parent_id: np.ndarray,
    record: np.ndarray,
    strings: StringPool,
    source: str,
) -> tuple[np.ndarray, int]:
    """The row of each span's parent (by its span id within the same trace; codes of
    ``strings``, -1 for none) and how many named parents are not in the input.

    Raises :class:`InputError` naming the record of a span id repeated within a trace, or of a
    span on a cycle of parent links (a span its own ancestor).
    """
    key = span_key(trace, span_id)
    parents = link_parents(key, span_id != NONE, span_key(trace, parent_id), parent_id != NONE)
    if parents.duplicate >= 0:
        r = parents.duplicate
        raise InputError(
            f"duplicate span id {strings[int(span_id[r])]} in trace {strings[int(trace[r])]}",
            path=source,
            record=int(record[r]),
        )
    cycle = parents.cycle
    if cycle >= 0:
        raise InputError(
            f"trace {strings[int(trace[cycle])]}: parent links form a cycle through span "
            f"{strings[int(span_id[cycle])]}",
            path=source,
            record=int(record[cycle]),
        )
    return parents.parent, parents.missing


class LinkedParents(NamedTuple):
    """What :func:`link_parents` found."""

    parent: np.ndarray
    """Per row, its parent's row (-1: none, or not found)."""
    missing: int
    """Rows naming a parent that is not there."""
    duplicate: int
    """The later of two rows with one key (-1: none; parents are then not linked)."""
    cycle: int
    """A row on a cycle of parent links (-1: none)."""


def link_parents(
    key: np.ndarray, has_key: np.ndarray, parent_key: np.ndarray, names_parent: np.ndarray
) -> LinkedParents:
    """Each row's parent: the row whose ``key`` (a trace and span id, of any sortable dtype)
    is its ``parent_key``, for the rows that have a key and those that name a parent (the two
    masks); with the first duplicated key and a row on a cycle, for the caller to report."""
    rows = np.flatnonzero(has_key)
    order = rows[np.argsort(key[rows], kind="stable")]
    sorted_key = key[order]
    parent = np.full(len(key), NONE, dtype=np.int64)
    dup = np.flatnonzero(sorted_key[1:] == sorted_key[:-1])
    if len(dup):
        return LinkedParents(parent, 0, int(order[dup[0] + 1]), NONE)
    named = np.flatnonzero(names_parent)
    want = parent_key[named]
    at = find_sorted(sorted_key, want)
    found = at != NONE
    parent[named[found]] = order[at[found]]
    return LinkedParents(parent, int((~found).sum()), NONE, int(climb(parent)[2]))


def span_key(trace: np.ndarray, span_id: np.ndarray) -> np.ndarray:
    """One int64 per (trace, span id) pair of string codes, ordered by trace then id."""
    return (trace.astype(np.int64) << 32) | (span_id.astype(np.int64) & 0xFFFFFFFF)


def input_from_columns(
    source: str,
    columns: Mapping[str, object],
    *,
    kind: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    record: np.ndarray,
    thread: np.ndarray | None = None,
    details: Sequence[SpanDetail | None] = (),
) -> SpanInput:
    """A table from whole columns at once (what a columnar reader has), with the parent span
    id each span named: the vectorized :meth:`SpanTableBuilder.build_input`.

    ``columns`` maps ``service``, ``instance``, ``endpoint``, ``peer``, ``trace``, ``span_id``
    and ``parent_id`` to sequences of strings (None: absent; a missing key: absent everywhere);
    ``instance`` defaults to ``service``. ``details``: one per row, or none at all.
    """
    n = len(start)
    pool = StringPool()
    codes = {
        name: _intern(pool, columns[name]) if name in columns else np.full(n, NONE, np.int32)
        for name in _CODED
    }
    if "instance" not in columns:
        codes["instance"] = codes["service"]
    spans = table_from_codes(
        source,
        pool,
        codes,
        kind=kind,
        start=start,
        end=end,
        record=record,
        thread=thread,
        details=details,
    )
    return SpanInput(spans, codes["parent_id"].astype(np.int64))


_CODED = ("service", "instance", "endpoint", "peer", "trace", "span_id", "parent_id")
"""The columns of :func:`table_from_codes` given as codes of strings."""


def table_from_codes(
    source: str,
    strings: StringPool,
    codes: Mapping[str, npt.ArrayLike],
    *,
    kind: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    record: np.ndarray,
    thread: np.ndarray | None = None,
    details: Sequence[SpanDetail | None] = (),
    parent: np.ndarray | None = None,
) -> SpanTable:
    """:func:`input_from_columns` with the string columns (every one of :data:`_CODED`)
    given as codes of ``strings`` already, by a reader that interned them as it read.
    ``parent``: each row's parent row, when the reader linked them already
    (:func:`link_parents`, which found no duplicate span id and no cycle)."""
    start = np.asarray(start, dtype=np.int64)
    end = np.asarray(end, dtype=np.int64)
    record = np.asarray(record, dtype=np.int64)
    bad = np.flatnonzero((end < start) | (start < 0))
    if len(bad):
        r = int(bad[0])
        raise InputError(_bad_times(int(start[r]), int(end[r])), path=source, record=int(record[r]))
    columns = {name: np.asarray(codes[name], np.int32) for name in _CODED}
    parent_id = columns.pop("parent_id")
    if parent is None:
        parent, _ = resolve_parents(
            columns["trace"], columns["span_id"], parent_id, record, strings, source
        )
    n = len(start)
    return SpanTable(
        strings,
        **columns,
        kind=np.asarray(kind, dtype=np.int8),
        start=start,
        end=end,
        thread=np.full(n, NONE, np.int64) if thread is None else thread,
        parent=parent,
        link=np.full(n, NONE, np.int64),
        record=record,
        sources=[source] if source else [],
        details=detail_column(details) if len(details) else None,
    )


def _intern(pool: StringPool, values: object) -> np.ndarray:
    """Codes in ``pool`` of a column of strings (None: absent), each distinct one interned once."""
    import pyarrow as pa

    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    encoded = values if isinstance(values, pa.Array) else pa.array(values, pa.string())
    encoded = encoded.dictionary_encode()
    lookup = np.array([pool.code(v) for v in encoded.dictionary.to_pylist()] + [NONE], np.int32)
    return lookup[encoded.indices.fill_null(-1).to_numpy().astype(np.int64)]
