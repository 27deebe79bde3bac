"""Finished traces as rows of the store (:mod:`.store`): each span with the parts of its Jaeger
document (tags, logs, process), from which the store makes trace documents when they are asked
for (:meth:`.store.Store.find_traces`).

Documents are not made here: making every trace's Jaeger document as it finishes (and
compressing it) would cost as much as the rest of storing it (``bench/bench_serve.py
sustained`` measures storing), for documents few of which are ever read."""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson
import pyarrow as pa

from tacit.formats.common import Traces, hex_ids
from tacit.formats.jaeger import jaeger_parts
from tacit.model.span_details import status_codes
from tacit.model.spans import CLIENT, KIND_NAMES, NONE, SERVER, SpanTable
from tacit.model.traces import roots
from tacit.reconstruct.assemble import Evidence
from tacit.reconstruct.online import Finished
from tacit.reconstruct.pipeline import assemble_finished, finished_parents
from tacit.runs import run_starts
from tacit.serve.online_feed import Alone, Given


@dataclass
class Rows:
    """Rows for the store's tables of finished traces, and what the metrics count of them."""

    # The rows of each table by column, in the table's order (thousands a second: no dict per
    # row, which pyarrow converts several times slower).
    spans: dict[str, list[Any]] = field(default_factory=lambda: _columns("spans"))
    traces: dict[str, list[Any]] = field(default_factory=lambda: _columns("traces"))
    operations: dict[str, list[Any]] = field(default_factory=lambda: _columns("trace_operations"))
    processes: dict[int, tuple[str | None, str]] = field(default_factory=dict)
    confidence: dict[str, list[float]] = field(default_factory=dict)  # service -> [links, Σ p]
    link_probability: dict[str, list[float]] = field(default_factory=dict)  # service -> p
    trace_probability: dict[str, list[float]] = field(default_factory=dict)  # by root service
    mapped: int = 0
    given: int = 0
    drawn: int = 0
    fates: dict[str, int] = field(default_factory=dict)
    unmapped: dict[str, int] = field(default_factory=dict)
    agree: int = 0
    disagree: int = 0
    forward: list[Traces] = field(default_factory=list)

    @property
    def span_count(self) -> int:
        return len(self.spans["seq"])

    @property
    def trace_count(self) -> int:
        return len(self.traces["trace_id"])

    def tables(self, now_ns: int) -> dict[str, pa.Table]:
        """The rows as pyarrow tables in the store's column order."""
        out = {
            name: pa.Table.from_pydict(rows, schema=_SCHEMAS[name])
            for name, rows in (
                ("spans", self.spans),
                ("traces", self.traces),
                ("trace_operations", self.operations),
            )
            if next(iter(rows.values()))
        }
        if self.processes:
            out["processes"] = pa.Table.from_pydict(
                {
                    "process": list(self.processes),
                    "service": [svc for svc, _ in self.processes.values()],
                    "tags": [t for _, t in self.processes.values()],
                },
                schema=_SCHEMAS["processes"],
            )
        if self.confidence:
            out["confidence"] = pa.Table.from_pylist(
                [
                    {"at_ns": now_ns, "service": s, "links": int(n), "probability": p}
                    for s, (n, p) in self.confidence.items()
                ],
                schema=_SCHEMAS["confidence"],
            )
        return out

    def add_finished(
        self,
        f: Finished,
        seq: np.ndarray,
        given: Given,
        seed: int,
        now_ns: int,
        kept: dict[int, str],
    ) -> SpanTable:
        """The traces of ``f`` (spans numbered ``seq``, with what their senders gave). A trace
        keeps the id its root's sender gave where :func:`kept_ids` kept it (``kept``); else it
        gets a fresh one. Returns the traces as they are stored, each span's parent a row."""
        spans, evidence = finished_traces(f, seed, kept)
        s = spans.strings
        trace_ids, span_ids = hex_ids(spans)
        given_ids = s.names(spans.span_id)  # the ids before hex_ids pads them
        parents = spans.parent.tolist()
        service, operation = _names(spans)
        given_parents = given.parent_id.tolist()
        received = ~f.virtual if len(f.virtual) else np.ones(len(spans), dtype=bool)
        self.drawn += len(spans) - int(received.sum())
        server = received & (spans.kind == SERVER)
        self._count("caller", int((server & (spans.parent != NONE)).sum()))
        self._count("root", int((server & (spans.parent == NONE)).sum()))
        for r in np.flatnonzero(received & (spans.kind == CLIENT)).tolist():
            p, named = parents[r], given_parents[r]
            if r in evidence.given:
                self.given += 1
                self._count("given")
                continue
            if p != NONE:
                self.mapped += 1
                self._count("inferred")
            else:
                self._count("unlinked")
                why = evidence.unmapped.get(r, "unmapped")
                self.unmapped[why] = self.unmapped.get(why, 0) + 1
            if named:
                if p != NONE and given_ids[p] == named:
                    self.agree += 1
                else:
                    self.disagree += 1
        rows = range(len(spans))
        self._add_spans(
            spans,
            seq,
            given,
            service,
            operation,
            trace_id=trace_ids,
            span_id=span_ids,
            parent_span_id=[span_ids[p] if p != NONE else None for p in parents],
            parent_service=[service[p] if p != NONE else None for p in parents],
            score=evidence.score,
            alternatives=list(map(evidence.alternatives.get, rows)),
            unmapped=list(map(evidence.unmapped.get, rows)),
            link=list(map(evidence.link, rows)),
            probability=evidence.probability,
            **self._jaeger_parts(spans),
        )
        self._confidence(spans, received, evidence.probability)
        self._traces(spans, seq, trace_ids, evidence, now_ns, service, operation)
        self.forward.append((spans, evidence))
        return spans

    def _count(self, fate: str, n: int = 1) -> None:
        if n:
            self.fates[fate] = self.fates.get(fate, 0) + n

    def _jaeger_parts(self, spans: SpanTable) -> dict[str, list[Any]]:
        """The ``tags``, ``logs`` and ``process`` columns of ``spans`` (the rows of
        :func:`.jaeger_parts` as JSON, and the process by :func:`_process_id`), and their
        processes in :attr:`processes`. The tags are the span's own: the store adds the
        reconstruction's evidence to them from its columns (:meth:`.store.Store.find_traces`),
        so that rows that share their tags share their JSON, made once."""
        parts = jaeger_parts(spans)
        pids = []
        for process, key in zip(parts.process, parts.key, strict=True):
            pid = _process_id(key)
            if pid not in self.processes:
                self.processes[pid] = (
                    process["serviceName"],
                    orjson.dumps(process["tags"]).decode(),
                )
            pids.append(pid)
        # As text: the bytes orjson returns keep its 4 KB buffer, one per tag set held.
        texts = [orjson.dumps(t).decode() for t in parts.tags]
        return {
            "tags": list(map(texts.__getitem__, parts.group)),
            "logs": [orjson.dumps(logs).decode() if logs else None for logs in parts.logs],
            "process": list(map(pids.__getitem__, parts.group)),
        }

    def _confidence(
        self, spans: SpanTable, received: np.ndarray, probability: list[float | None]
    ) -> None:
        """Per calling service, its links and their probabilities
        (:mod:`tacit.reconstruct.link_probability`), of the calls received (``received``: not
        drawn for a service that sent none)."""
        calls = np.flatnonzero(received & (spans.kind == CLIENT)).tolist()
        names = spans.strings.names(spans.service[calls])
        for name, r in zip(names, calls, strict=True):
            self._link(name or "?", probability[r] or 0.0)

    def _link(self, service: str, p: float) -> None:
        c = self.confidence.setdefault(service, [0, 0.0])
        c[0] += 1
        c[1] += p
        self.link_probability.setdefault(service, []).append(p)

    def _traces(
        self,
        spans: SpanTable,
        seq: np.ndarray,
        trace_ids: list[str],
        evidence: Evidence,
        now_ns: int,
        service: list[str | None],
        operation: list[str | None],
    ) -> None:
        """The ``traces`` and ``trace_operations`` rows of ``spans`` (numbered ``seq``, their
        traces ``trace_ids``, their scores and probabilities in ``evidence``), traces in the
        order of their first row, a trace's operations in the order of theirs; ``service`` and
        ``operation``: those columns of ``spans`` as names. Grouped by sorting, not by Python
        loops over the rows, which cost more a span."""
        begin, end = spans.start, spans.end
        score = np.array(evidence.score, dtype=float)
        by_trace = np.lexsort((np.arange(len(spans)), spans.trace))
        trace_of = spans.trace[by_trace]
        cuts = run_starts(trace_of)
        first = by_trace[cuts]  # each trace's first row
        # its head: the earliest root (the trace's only one, as assembled), else its first row
        roots = by_trace[spans.parent[by_trace] == NONE]
        roots = roots[np.lexsort((begin[roots], spans.trace[roots]))]
        root_heads = roots[run_starts(spans.trace[roots])]
        head = first.copy()
        head[np.searchsorted(trace_of[cuts], spans.trace[root_heads])] = root_heads
        start = np.minimum.reduceat(begin[by_trace], cuts)
        finish = np.maximum.reduceat(end[by_trace], cuts)
        low_score = np.fmin.reduceat(score[by_trace], cuts)
        low_seq = np.minimum.reduceat(seq[by_trace], cuts)
        high_seq = np.maximum.reduceat(seq[by_trace], cuts)
        count = np.diff(np.r_[cuts, len(by_trace)])
        trace_start = np.empty(len(spans), dtype=np.int64)
        trace_start[by_trace] = np.repeat(start, count)
        k = np.argsort(first, kind="stable")  # traces in the order of their first row
        h = head[k].tolist()
        probability = [evidence.trace_probability.get(r) for r in h]
        for r, p in zip(h, probability, strict=True):
            if p is not None:
                self.trace_probability.setdefault(service[r] or "?", []).append(p)
        _extend(
            self.traces,
            trace_id=[trace_ids[r] for r in h],
            service=[service[r] for r in h],
            operation=[operation[r] for r in h],
            start_ns=start[k].tolist(),
            duration_ns=(finish - start)[k].tolist(),
            spans=count[k].tolist(),
            min_score=[None if math.isnan(x) else x for x in low_score[k].tolist()],
            finished_ns=[now_ns] * len(k),
            doc=[None] * len(k),
            first_seq=low_seq[k].tolist(),
            last_seq=high_seq[k].tolist(),
            probability=probability,
        )
        # operations: a trace's (service, operation) pairs, their earliest start, longest span
        rows = np.arange(len(spans))
        by_op = np.lexsort((rows, spans.endpoint, spans.service, spans.trace))
        op_cuts = run_starts(spans.trace[by_op], spans.service[by_op], spans.endpoint[by_op])
        op_first = by_op[op_cuts]
        op_start = np.minimum.reduceat(begin[by_op], op_cuts)
        op_longest = np.maximum.reduceat((end - begin)[by_op], op_cuts)
        trace_rank = np.empty(len(spans), dtype=np.int64)
        trace_rank[by_trace] = np.repeat(np.argsort(k), count)
        in_order = np.lexsort((op_first, trace_rank[op_first]))
        r = op_first[in_order].tolist()
        _extend(
            self.operations,
            trace_id=[trace_ids[x] for x in r],
            service=[service[x] for x in r],
            operation=[operation[x] for x in r],
            start_ns=op_start[in_order].tolist(),
            duration_ns=op_longest[in_order].tolist(),
            trace_start_ns=trace_start[r].tolist(),
        )

    def add_alone(self, a: Alone) -> None:
        """Spans finished without reconstruction: stored with their reason, in no trace."""
        self._count("alone", len(a.reason))
        for why in a.reason:
            self.unmapped[why] = self.unmapped.get(why, 0) + 1
        calls = np.flatnonzero(a.spans.kind == CLIENT)
        for name in a.spans.strings.names(a.spans.service[calls]):
            self._link(name or "?", 0.0)
        n = len(a.spans)
        self._add_spans(
            a.spans,
            a.seq,
            a.given,
            *_names(a.spans),
            trace_id=[None] * n,
            span_id=a.given.span_id.tolist(),
            parent_span_id=[None] * n,
            parent_service=[None] * n,
            score=[None] * n,
            alternatives=[None] * n,
            unmapped=list(a.reason),
            tags=[None] * n,
            logs=[None] * n,
            process=[None] * n,
            link=[None] * n,
            probability=[None] * n,
        )

    def _add_spans(
        self,
        spans: SpanTable,
        seq: np.ndarray,
        given: Given,
        service: list[str | None],
        operation: list[str | None],
        **made: list[Any],
    ) -> None:
        """Add the ``spans`` rows of ``spans`` as received (numbered ``seq``, with what their
        senders gave, and ``service`` and ``operation`` as :func:`_names` gives them), and what
        reconstruction ``made`` of them (the other columns)."""
        s = spans.strings
        received = {
            "seq": seq.tolist(),
            "service": service,
            "instance": s.names(spans.instance),
            "operation": operation,
            "kind": [KIND_NAMES[k] for k in spans.kind.tolist()],
            "start_ns": spans.start.tolist(),
            "duration_ns": (spans.end - spans.start).tolist(),
            "status": status_codes(spans.details, len(spans)).tolist(),
            "given_trace_id": given.trace_id.tolist(),
            "given_parent_id": given.parent_id.tolist(),
        }
        _extend(self.spans, **received, **made)


_S, _I, _F = pa.string(), pa.int64(), pa.float64()
_SCHEMAS = {
    "spans": pa.schema(
        [
            ("seq", _I),
            ("trace_id", _S),
            ("span_id", _S),
            ("parent_span_id", _S),
            ("service", _S),
            ("instance", _S),
            ("operation", _S),
            ("kind", _S),
            ("start_ns", _I),
            ("duration_ns", _I),
            ("parent_service", _S),
            ("score", _F),
            ("alternatives", _S),
            ("unmapped", _S),
            ("given_trace_id", _S),
            ("given_parent_id", _S),
            ("tags", _S),
            ("logs", _S),
            ("process", _I),
            ("link", _S),
            ("probability", _F),
            ("status", _I),
        ]
    ),
    "traces": pa.schema(
        [
            ("trace_id", _S),
            ("service", _S),
            ("operation", _S),
            ("start_ns", _I),
            ("duration_ns", _I),
            ("spans", pa.int32()),
            ("min_score", _F),
            ("finished_ns", _I),
            ("doc", pa.binary()),
            ("first_seq", _I),
            ("last_seq", _I),
            ("probability", _F),
        ]
    ),
    "trace_operations": pa.schema(
        [
            ("trace_id", _S),
            ("service", _S),
            ("operation", _S),
            ("start_ns", _I),
            ("duration_ns", _I),
            ("trace_start_ns", _I),
        ]
    ),
    "processes": pa.schema([("process", _I), ("service", _S), ("tags", _S)]),
    "confidence": pa.schema(
        [
            ("at_ns", _I),
            ("service", _S),
            ("incoming", _I),
            ("top_choice", _I),
            ("links", _I),
            ("probability", _F),
        ]
    ),
}


class TakenIds:
    """The trace ids given to the most recent ``most`` traces, so that a trace split by the
    reconstruction keeps its id in one part only (the others find it: :meth:`.store.Store.trace`
    looks a sender's trace id up among the spans too)."""

    def __init__(self, most: int = 1_000_000) -> None:
        self.most = most
        self._ids: dict[str, None] = {}

    def take(self, trace_id: str) -> bool:
        """Whether ``trace_id`` was free; it is taken now."""
        if trace_id in self._ids:
            return False
        self._ids[trace_id] = None
        if len(self._ids) > self.most:
            del self._ids[next(iter(self._ids))]
        return True


def kept_ids(f: Finished, given: Given, taken: TakenIds) -> dict[int, str]:
    """Per root of the traces of ``f`` (a row), the trace id its sender gave (``given``), where
    it gave one and no other trace took it: taken now, so that those after know it. Apart from
    the rest of the rows, which are made from ``f`` alone, wherever that is done."""
    root = roots(finished_parents(f))
    heads = np.flatnonzero(root == np.arange(len(root)))
    return {
        head: gid
        for head, gid in zip(heads.tolist(), given.trace_id[heads].tolist(), strict=True)
        if gid and taken.take(gid)
    }


def finished_traces(f: Finished, seed: int, kept: dict[int, str]) -> tuple[SpanTable, Evidence]:
    """The traces of ``f`` with their evidence (:func:`.assemble_finished`), each with the trace
    id :func:`kept_ids` kept for its root, where it kept one."""
    spans, evidence = assemble_finished(f, seed)
    root = roots(spans.parent)
    code = spans.strings.code
    codes = np.full(len(spans), NONE, dtype=np.int64)  # per head, the code of its trace id
    for head, gid in kept.items():
        codes[head] = code(gid)
    per_row = codes[root]
    spans.trace[per_row != NONE] = per_row[per_row != NONE]
    return spans, evidence


def _process_id(process: bytes) -> int:
    """The key of a process in the ``processes`` table: a 64-bit hash of its JSON (the key
    :func:`.jaeger_parts` gives it), the same in every run, so that a process is stored once."""
    digest = hashlib.blake2b(process, digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def _names(spans: SpanTable) -> tuple[list[str | None], list[str | None]]:
    """The service and the operation of every row of ``spans``."""
    s = spans.strings
    return s.names(spans.service), s.names(spans.endpoint)


def _columns(table: str) -> dict[str, list[Any]]:
    """Empty columns of one of the store's tables, in its order."""
    return {name: [] for name in _SCHEMAS[table].names}


def _extend(columns: dict[str, list[Any]], **values: list[Any]) -> None:
    """Rows given column by column, every column of the table named."""
    if values.keys() != columns.keys():
        raise ValueError(f"columns {sorted(values)} are not the table's {sorted(columns)}")
    for name, column in columns.items():
        column.extend(values[name])
