"""The traces in the store of ``tacit serve``: the acknowledged requests (``ingest``), the
finished traces written whole (spans, processes, traces, their operations, confidence), the
Jaeger documents made from them and the searches over them, retention, and the call graphs
learned. Apart from the latency series (:mod:`.store_latency`), which share only the
connection (:mod:`.store_db`) with them.
"""

from __future__ import annotations

import itertools
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson

from tacit.formats.jaeger import JaegerSpan, trace_doc, with_tags
from tacit.model.span_details import STATUS_ERROR
from tacit.reconstruct.assemble import EVIDENCE_TAGS, evidence_tags
from tacit.reconstruct.callgraph import CallGraph
from tacit.reconstruct.pipeline import ONLINE
from tacit.serve.journal import Request
from tacit.serve.store_db import SET_STATE, Database

TAG_PAGE = 500
"""A search by tags makes the documents of the most recent traces that may match (see
:meth:`TraceStore.find_traces`) ``limit`` at a time, or this many if fewer, until it has found
``limit``: most that may match do, and each document is costly to make."""


def unpack_doc(stored: bytes) -> str:
    """A ``traces.doc`` value of a file of an earlier version as JSON text: zlib-compressed
    JSON, or, earlier still, JSON text (as bytes once :meth:`.store_db.Database._upgrade`
    altered the column), which a zlib stream cannot start as (``{`` against ``x``)."""
    return (zlib.decompress(stored) if stored[:1] != b"{" else stored).decode()


FINISHED_TABLES = {
    "spans": "INSERT",
    "traces": "INSERT",
    "trace_operations": "INSERT",
    "confidence": "INSERT",
    "processes": "INSERT OR IGNORE",  # a process is stored once, the first time it is seen
}
"""The tables :meth:`TraceStore.write_finished` adds to, in its one transaction, and how."""


@dataclass(frozen=True)
class TraceQuery:
    """A Jaeger ``/api/traces`` search: traces with a span of ``service`` (and ``operation``)
    that started in [``start_ns``, ``end_ns``] and lasted at least ``min_duration_ns`` (at most
    ``max_duration_ns``), and has each of ``tags`` (name, value as text), that are at least
    ``min_probability`` likely to be right; the ``limit`` that started last."""

    service: str
    operation: str | None = None
    start_ns: int | None = None
    end_ns: int | None = None
    min_duration_ns: int | None = None
    max_duration_ns: int | None = None
    limit: int = 20
    tags: tuple[tuple[str, str], ...] = ()
    min_probability: float | None = None


@dataclass(frozen=True)
class Expired:
    """What one retention pass (:meth:`TraceStore.expire`) deleted, per table, and whether it was
    all there was to delete (else a pass bounded by its span count left the newer part)."""

    rows: dict[str, int]
    done: bool


class TraceStore(Database):
    """The traces of the store: its requests, spans and traces, and the call graphs learned
    from them."""

    # -- spans a restart takes back, call graphs ---------------------------------------------
    def latest_ids(self, horizon_ns: int) -> list[tuple[str, str, int]]:
        """(given trace id, span id, end) of the stored spans a sender gave ids, that end
        within ``horizon_ns`` of the latest stored end (in start order, oldest first): what a
        restart remembers, so that a span sent again after it is still known."""
        rows = self._cursor().execute(
            "SELECT given_trace_id, span_id, start_ns + duration_ns FROM spans "
            "WHERE given_trace_id IS NOT NULL AND start_ns >= "
            "(SELECT max(start_ns) FROM spans) - ? ORDER BY start_ns + duration_ns",
            [2 * horizon_ns],
        )
        return [(t, s, int(e)) for t, s, e in rows.fetchall()]

    def learning_spans(self, horizon_ns: int, limit: int) -> list[tuple]:
        """The latest ``limit`` stored spans that start within ``horizon_ns`` of the latest,
        but those drawn for services that sent none: (span id, parent span id, service,
        instance, operation, kind, start, duration, whether the parent is the one its sender
        gave, the tags where they name a thread id, else None), in start order."""
        rows = self._cursor().execute(
            "SELECT * FROM (SELECT span_id, parent_span_id, service, instance, operation, kind, "
            "start_ns, duration_ns, coalesce(link = 'given', false), "
            "CASE WHEN contains(tags, '\"thread.id\"') THEN tags END FROM spans "
            "WHERE start_ns >= (SELECT max(start_ns) FROM spans) - ? "
            "AND coalesce(link, '') <> 'virtual' ORDER BY start_ns DESC LIMIT ?) "
            "ORDER BY start_ns",
            [horizon_ns, limit],
        )
        return rows.fetchall()

    def add_callgraph(self, at_ns: int, yaml: str) -> None:
        """Keep a call graph that took effect at ``at_ns``."""
        self._cursor().execute("INSERT INTO callgraphs VALUES (?, ?)", [at_ns, yaml])

    def latest_callgraph(self) -> tuple[int, CallGraph] | None:
        """The call graph that took effect last, and when."""
        rows = (
            self._cursor()
            .execute("SELECT at_ns, yaml FROM callgraphs ORDER BY at_ns DESC LIMIT 1")
            .fetchall()
        )
        if not rows:
            return None
        at_ns, text = rows[0]
        return int(at_ns), CallGraph.from_yaml(text, f"{self.path}: callgraphs at {at_ns}")

    # -- ingest ------------------------------------------------------------------------------
    def next_seq(self) -> int:
        """The sequence number the next acknowledged span gets."""
        self.settle()
        ((last,),) = self._cursor().execute("SELECT max(first_seq + spans) FROM ingest").fetchall()
        return int(last or 0)

    def append_request(
        self,
        first_seq: int,
        spans: int,
        received_ns: int,
        encoding: str,
        body: bytes,
        state: dict[str, int] | None = None,
        sync: bool = True,
    ) -> None:
        """Make a request durable, with the ``state`` values that go with it, before it is
        acknowledged: in the journal (:mod:`.journal`), which the next round of finished
        traces moves into ``ingest``. Without ``sync`` it is written and not waited for: it
        survives the loss of the process but not of the machine, for a source that keeps the
        request until it is in the store (the shared log)."""
        request = Request(first_seq, spans, received_ns, encoding, body, state or {})
        self._journal.append(request, sync)

    def requests_from(self, seq: int) -> Iterator[tuple[int, str, bytes, int]]:
        """(first_seq, encoding, body, received_ns) of the requests holding spans numbered
        ``seq`` or later, in order."""
        self.settle()
        with self._con.cursor() as cur:
            cur.execute(
                "SELECT first_seq, encoding, body, received_ns FROM ingest "
                "WHERE first_seq + spans > ? ORDER BY first_seq",
                [seq],
            )
            while rows := cur.fetchmany(256):
                for first, encoding, body, received_ns in rows:
                    yield int(first), str(encoding), bytes(body), int(received_ns)

    def finished_from(self, seq: int) -> set[int]:
        """The sequence numbers from ``seq`` on of spans already in finished traces."""
        rows = self._cursor().execute("SELECT seq FROM spans WHERE seq >= ?", [seq]).fetchall()
        return {int(r[0]) for r in rows}

    # -- finished traces ---------------------------------------------------------------------
    def write_finished(self, tables: dict[str, Any], state: dict[str, int]) -> None:
        """Append the rows of ``tables`` (pyarrow tables named by :data:`FINISHED_TABLES`) and
        set ``state``, in one transaction (which moves the journal in): a trace is stored
        whole or not at all."""
        with self._settled() as cur:
            for name, table in tables.items():
                if name not in FINISHED_TABLES:
                    raise ValueError(f"not a table of finished traces: {name}")
                cur.register("rows_in", table)
                cur.execute(f"{FINISHED_TABLES[name]} INTO {name} SELECT * FROM rows_in")
                cur.unregister("rows_in")
            for key, value in state.items():
                cur.execute(SET_STATE, [key, value])

    # -- retention ---------------------------------------------------------------------------
    def expire(self, before_ns: int, low_water: int, most_spans: int | None = None) -> Expired:
        """Delete what the service took in before ``before_ns`` (its own clock), in one
        transaction: at most about ``most_spans`` spans (the oldest), so that a writer waiting
        for the file is not held up long; :attr:`Expired.done` says whether all went.

        A span goes once it was received before then (its ingest request's ``received_ns``)
        and below ``low_water``: spans are numbered in the order they were received, so the
        rule is a sequence number, the first received at or after ``before_ns`` or
        ``low_water`` if lower. A trace goes with its spans, once it finished before
        ``before_ns`` and none of its spans is at or past that number; spans in no trace go
        by the number alone. The ingest requests go once all their spans are below it, but
        for the last, which keeps the numbering going on a restart. Confidence goes by
        ``at_ns``, RDA records by ``received_ns``, Pirate's estimates of a live source by
        their epoch's end (a live capture is stamped with the system clock; a capture file's
        estimates stay: they are replaced whole when it is read again).
        """
        with self._settled() as cur:
            ((first_after,),) = cur.execute(
                "SELECT min(first_seq) FROM ingest WHERE received_ns >= ?", [before_ns]
            ).fetchall()
            cut = low_water if first_after is None else min(low_water, int(first_after))
            # The traces that go, and the spans in no trace that go: the first ones (by trace
            # id, by number) up to about ``most_spans`` spans, set down once for every delete.
            most = 2**62 if most_spans is None else most_spans
            due = (
                "FROM traces WHERE finished_ns < ? AND trace_id NOT IN "
                "(SELECT trace_id FROM spans WHERE seq >= ? AND trace_id IS NOT NULL)"
            )
            cur.execute(
                f"CREATE TEMP TABLE expiring AS SELECT trace_id, spans {due} "
                "QUALIFY sum(spans) OVER (ORDER BY trace_id) - spans < ?",
                [before_ns, cut, most],
            )
            ((alone,),) = cur.execute(
                "SELECT max(seq) + 1 FROM (SELECT seq FROM spans "
                "WHERE trace_id IS NULL AND seq < ? ORDER BY seq LIMIT ?)",
                [cut, most],
            ).fetchall()
            alone = 0 if alone is None else int(alone)
            ((more,),) = cur.execute(
                f"SELECT (SELECT count(*) {due}) > (SELECT count(*) FROM expiring) "
                "OR EXISTS (SELECT 1 FROM spans "
                "WHERE trace_id IS NULL AND seq >= ? AND seq < ?)",
                [before_ns, cut, alone, cut],
            ).fetchall()
            expiring = "SELECT trace_id FROM expiring"
            deletes = {
                "spans": (
                    f"DELETE FROM spans WHERE trace_id IN ({expiring}) "
                    "OR (trace_id IS NULL AND seq < ?)",
                    [alone],
                ),
                "trace_operations": (
                    f"DELETE FROM trace_operations WHERE trace_id IN ({expiring})",
                    [],
                ),
                "traces": (f"DELETE FROM traces WHERE trace_id IN ({expiring})", []),
                "ingest": (
                    "DELETE FROM ingest WHERE first_seq + spans <= ? "
                    "AND first_seq < (SELECT max(first_seq) FROM ingest)",
                    [cut],
                ),
                "confidence": ("DELETE FROM confidence WHERE at_ns < ?", [before_ns]),
                "pirate_estimates": (
                    "DELETE FROM pirate_estimates WHERE source LIKE 'live:%' AND epoch_end_ns < ?",
                    [before_ns],
                ),
                "rda_intervals": ("DELETE FROM rda_intervals WHERE received_ns < ?", [before_ns]),
                "rda_rejected": ("DELETE FROM rda_rejected WHERE received_ns < ?", [before_ns]),
            }
            rows = {
                table: int(cur.execute(sql, args).fetchall()[0][0])
                for table, (sql, args) in deletes.items()
            }
            cur.execute("DROP TABLE expiring")
        return Expired(rows, not more)

    # -- queries -----------------------------------------------------------------------------
    def services(self) -> list[str]:
        rows = self._cursor().execute(
            "SELECT DISTINCT service FROM trace_operations ORDER BY service"
        )
        return [r[0] for r in rows.fetchall()]

    def operations(self, service: str) -> list[tuple[str, str]]:
        """(operation, span kind) of ``service``'s spans."""
        rows = self._cursor().execute(
            "SELECT DISTINCT operation, kind FROM spans WHERE service = ? ORDER BY operation",
            [service],
        )
        return [(r[0], r[1]) for r in rows.fetchall()]

    def find_traces(self, q: TraceQuery) -> list[str]:  # noqa: C901
        """The Jaeger documents of the traces ``q`` selects, most recent first."""
        where: list[str] = ["service = ?"]
        args: list[str | int | float] = [q.service]
        for clause, value in (
            ("operation = ?", q.operation),
            ("start_ns >= ?", q.start_ns),
            ("start_ns <= ?", q.end_ns),
            ("duration_ns >= ?", q.min_duration_ns),
            ("duration_ns <= ?", q.max_duration_ns),
        ):
            if value is not None:
                where.append(clause)
                args.append(value)
        if q.min_probability is not None:
            where.append("trace_id IN (SELECT trace_id FROM traces WHERE probability >= ?)")
            args.append(q.min_probability)
        if q.tags:
            # Traces with a span of the service (and operation) whose tags or process's tags
            # hold each tag, as their JSON writes it, or that were stored with their document
            # (spans of an earlier version have no tags): the few more than match that a
            # pattern lets through are told by their documents (:func:`_has_tags`).
            spans = ["s.service = ?", "s.trace_id IS NOT NULL"]
            span_args: list[str | int] = [q.service]
            if q.operation is not None:
                spans.append("s.operation = ?")
                span_args.append(q.operation)
            for key, value in q.tags:
                if key in EVIDENCE_TAGS:  # in the spans' columns, not their tags: told by docs
                    continue
                patterns = _tag_patterns(key, value)
                like = [f"{c}.tags LIKE ? ESCAPE '\\'" for c in "sp" for _ in patterns]
                spans.append(f"(s.tags IS NULL OR {' OR '.join(like)})")
                span_args += patterns * 2
            where.append(
                "trace_id IN (SELECT s.trace_id FROM spans s "
                "LEFT JOIN processes p ON s.process = p.process WHERE " + " AND ".join(spans) + ")"
            )
            args += span_args
        query = (
            "SELECT trace_id FROM trace_operations WHERE "
            + " AND ".join(where)
            + " GROUP BY trace_id ORDER BY max(trace_start_ns) DESC LIMIT ? OFFSET ?"
        )
        if not q.tags:
            return self._docs(self._ids(query, [*args, q.limit, 0]))
        found: list[str] = []
        page = min(q.limit, TAG_PAGE)
        for offset in itertools.count(0, page):
            ids = self._ids(query, [*args, page, offset])
            found += self._docs(ids, keep=lambda doc: _has_tags(doc, q))
            if len(found) >= q.limit or len(ids) < page:
                break
        return found[: q.limit]

    def _ids(self, query: str, args: list[str | int | float]) -> list[str]:
        return [r[0] for r in self._cursor().execute(query, args).fetchall()]

    def _docs(self, ids: list[str], keep: Callable[[dict], bool] | None = None) -> list[str]:
        """The Jaeger documents of the traces ``ids`` (those stored, and of them those ``keep``
        takes, if given: it sees each document before it is written as JSON), in that order."""
        if not ids:
            return []
        # The traces are found by the index, and their spans by their numbers (the spans
        # table is in about the order of them, so its zone maps skip most of it).
        stored = self._cursor().execute(
            "SELECT trace_id, doc, first_seq, last_seq, probability FROM traces "
            "WHERE trace_id IN ?",
            [ids],
        )
        docs, spans_of = {}, {}
        for trace_id, doc, first, last, probability in stored.fetchall():
            if doc is None:
                spans_of[trace_id] = (first, last, probability)
                continue
            text = unpack_doc(doc)  # a document stored by an earlier version
            if keep is None or keep(orjson.loads(text)):
                docs[trace_id] = text
        for trace_id, made in self._made_docs(spans_of).items():
            if keep is None or keep(made):
                docs[trace_id] = orjson.dumps(made).decode()
        return [docs[i] for i in ids if i in docs]

    def _made_docs(self, spans_of: dict[str, tuple[int, int, float | None]]) -> dict[str, dict]:
        """The Jaeger documents of traces, made from their spans' parts (``spans_of``: the
        first and last number of each trace's spans, and its probability), by trace id. The
        root of each fragment the trace absorbed (a span its sender gave another trace id and
        no parent) follows from itself in that trace: a span link to the id its sender knows."""
        if not spans_of:
            return {}
        cur = self._cursor()
        rows = cur.execute(
            "SELECT trace_id, span_id, parent_span_id, operation, start_ns, "
            "start_ns + duration_ns, tags, logs, process, seq, "
            "CASE WHEN given_trace_id <> trace_id AND given_parent_id IS NULL "
            "AND parent_span_id IS NOT NULL THEN given_trace_id END, "
            "score, probability, alternatives, unmapped, link "
            "FROM spans WHERE seq BETWEEN ? AND ? AND trace_id IN ?",
            [
                min(first for first, _, _ in spans_of.values()),
                max(last for _, last, _ in spans_of.values()),
                list(spans_of),
            ],
        ).fetchall()
        keys = list({r[8] for r in rows})
        processes = {
            key: {"serviceName": service, "tags": orjson.loads(tags)}
            for key, service, tags in cur.execute(
                "SELECT process, service, tags FROM processes WHERE process IN ?", [keys]
            ).fetchall()
        }
        traces: dict[str, list[JaegerSpan]] = {}
        for row in rows:
            trace, span, parent, op, start, end, tags, logs, process, seq, fragment = row[:11]
            score, probability, alternatives, unmapped, link = row[11:]
            traces.setdefault(trace, []).append(
                JaegerSpan(
                    trace,
                    span,
                    parent,
                    op,
                    start,
                    end,
                    with_tags(
                        orjson.loads(tags),
                        evidence_tags(
                            ONLINE,
                            score,
                            probability,
                            alternatives,
                            unmapped,
                            link,
                            trace_probability=None if parent else spans_of[trace][2],
                        ),
                    ),
                    orjson.loads(logs) if logs else [],
                    process,
                    seq,
                    () if fragment is None else ((fragment, span),),
                )
            )
        return {t: trace_doc(sp, processes) for t, sp in traces.items()}

    def trace(self, trace_id: str) -> str | None:
        """The Jaeger document of a trace by its id, or by the id a sender gave one of its
        spans (a fragment that the reconstruction joined to another trace)."""
        wanted = trace_id.lower()
        docs = self._docs([wanted])
        if not docs:
            joined = self._cursor().execute(
                "SELECT trace_id FROM spans WHERE given_trace_id = ? AND trace_id IS NOT NULL "
                "ORDER BY seq LIMIT 1",
                [wanted],
            )
            docs = self._docs([row[0] for row in joined.fetchall()])
        return docs[0] if docs else None

    def span_ends(
        self, services: list[str], kinds: list[str], after_ns: int, until_ns: int
    ) -> tuple[list[str], list[str], np.ndarray, np.ndarray, np.ndarray]:
        """(service, operation, end ns, duration ns, failed) of the stored spans of
        ``services`` and ``kinds`` that ended after ``after_ns`` and by ``until_ns``
        (``failed``: their status code was ERROR)."""
        rows = (
            self._cursor()
            .execute(
                "SELECT service, operation, start_ns + duration_ns AS end_ns, duration_ns, "
                "status IS NOT DISTINCT FROM ? AS failed FROM spans "
                "WHERE service IN ? AND kind IN ? "
                "AND start_ns + duration_ns > ? AND start_ns + duration_ns <= ?",
                [STATUS_ERROR, services, kinds, after_ns, until_ns],
            )
            .fetchnumpy()
        )
        return (
            rows["service"].tolist(),
            [o or "" for o in rows["operation"].tolist()],
            np.asarray(rows["end_ns"], np.int64),
            np.asarray(rows["duration_ns"], np.int64),
            np.asarray(rows["failed"], bool),
        )

    def dependencies(self, start_ns: int, end_ns: int) -> list[tuple[str, str, int]]:
        """(caller, callee, calls) between services over spans that started in the interval."""
        rows = self._cursor().execute(
            "SELECT parent_service, service, count(*) FROM spans "
            "WHERE parent_service IS NOT NULL AND parent_service <> service "
            "AND start_ns BETWEEN ? AND ? GROUP BY ALL ORDER BY ALL",
            [start_ns, end_ns],
        )
        return [(a, b, int(n)) for a, b, n in rows.fetchall()]

    def confidence(self, since_ns: int) -> dict[str, tuple[int, float]]:
        """Per calling service, (links, the sum of their probabilities) since ``since_ns``
        (rows of an earlier version, which counted otherwise, left out)."""
        rows = self._cursor().execute(
            "SELECT service, sum(links), sum(probability) FROM confidence "
            "WHERE at_ns >= ? AND links IS NOT NULL GROUP BY service ORDER BY service",
            [since_ns],
        )
        return {s: (int(n), float(p)) for s, n, p in rows.fetchall()}


def _has_tags(doc: dict[str, Any], q: TraceQuery) -> bool:
    """Whether a Jaeger trace document has a span of ``q``'s service (and operation) with
    every one of ``q.tags``, among its own tags or its process's."""
    processes = doc["processes"]
    for span in doc["spans"]:
        process = processes[span["processID"]]
        if process["serviceName"] != q.service:
            continue
        if q.operation is not None and span["operationName"] != q.operation:
            continue
        have = {(t["key"], tag_value_text(t["value"])) for t in (*span["tags"], *process["tags"])}
        if all(tag in have for tag in q.tags):
            return True
    return False


def _tag_patterns(key: str, value: str) -> list[str]:
    """``LIKE`` patterns (escaped by ``\\``), one of which the JSON of a list of Jaeger tags
    matches when it has the tag ``key`` with ``value`` as :func:`tag_value_text` writes it: a
    string (``"value":"db"``), or the JSON text of a number or boolean (``"value":500``)."""
    name = _like_literal(orjson.dumps(key).decode())
    texts = [orjson.dumps(value).decode()]
    try:
        bare = orjson.loads(value)
    except orjson.JSONDecodeError:
        bare = None
    if isinstance(bare, (bool, int, float)):
        texts.append(value)
    return [f'%{{"key":{name},"type":"%","value":{_like_literal(t)}}}%' for t in texts]


def _like_literal(text: str) -> str:
    """``text`` matched literally by a ``LIKE ... ESCAPE '\\'`` pattern."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def tag_value_text(value: Any) -> str:
    """A tag's value as a search compares it: a string as it is, anything else as its JSON
    text (``true``, ``500``)."""
    return value if isinstance(value, str) else orjson.dumps(value).decode()
