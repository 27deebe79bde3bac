"""The embedded store of ``tacit serve``: one DuckDB database file.

Schema (``docs/serve.md`` documents it for people who query the file directly):

``ingest``
    Every acknowledged OTLP request, verbatim: ``first_seq`` (the sequence number of its first
    span; spans are numbered in the order they were acknowledged), ``spans``, ``received_ns``,
    ``encoding`` (``protobuf`` or ``json``) and ``body``. A request is written to the journal
    (:mod:`.journal`: files ``<database>.journal.<n>`` beside it) and synced before its sender
    is told it was accepted, and moved here with the next round of finished traces, or when
    the file is opened or closed; so a crash loses nothing acknowledged: the restart moves in
    what the journal holds and reads back whatever had not been reconstructed yet.
``spans``
    Every span once its trace is final, with the parent TraceWeaver chose: ``seq``,
    ``trace_id``, ``span_id``, ``parent_span_id``, ``service``, ``instance``, ``operation``,
    ``kind``, ``start_ns``, ``duration_ns``, ``parent_service``, ``score`` (of the chosen
    parent), ``alternatives`` (JSON ``[[span id, score, share], ...]``, best first),
    ``unmapped`` (why no parent was chosen), ``link`` (``given`` where the parent is the one the
    sender gave, kept rather than inferred), ``probability`` (of a client span: that its parent,
    or its having none, is right), what the sender gave: ``given_trace_id``,
    ``given_parent_id``, and the span's parts of its Jaeger document: ``tags`` and ``logs``
    (JSON, as the Jaeger API writes them; ``logs`` NULL for none) and ``process`` (a key of
    ``processes``). The tags are the span's own: a document adds the reconstruction's
    evidence (``tacit.algorithm``, ``tacit.score``, ``tacit.probability``,
    ``tacit.alternatives``, ``tacit.unmapped``, ``tacit.link``, and on the root
    ``tacit.trace_probability``) from the columns (rows an earlier version wrote hold some of
    it in their tags too, the same). Ids are the ones the Jaeger API shows (lower-case hex,
    zero-padded to 16 and 32 digits).
``processes``
    The processes of the spans: ``process`` (the key), ``service``, ``tags`` (JSON).
``traces``
    One row per reconstructed trace: ``trace_id``, its root's ``service`` and ``operation``,
    ``start_ns``, ``duration_ns``, ``spans``, ``min_score``, ``finished_ns``, ``first_seq`` and
    ``last_seq`` (the numbers of its first and last span, which find its spans),
    ``probability`` (that the whole trace is right), and ``doc``:
    NULL, but in the rows of a file written before the spans held their documents' parts,
    where it holds the trace's Jaeger JSON, zlib-compressed or as text (:func:`unpack_doc`).
    Documents are made from the spans' parts when asked for (:meth:`Store.find_traces`).
``trace_operations``
    For searches: one row per trace, service and operation, with the longest such span's
    ``duration_ns``, the earliest ``start_ns``, and the trace's ``trace_start_ns`` (searches
    are ordered by it without reading the documents).
``confidence``
    Per-service confidence as it evolves: ``at_ns``, ``service``, ``links`` and ``probability``
    (per calling service and round of stored traces, its calls and the sum of their links'
    probabilities); ``incoming`` and ``top_choice``, what an earlier version counted instead,
    are NULL since.
``pirate_estimates``
    Pirate's response latency (:mod:`tacit.response_latency`), one row per connection and
    closed epoch: ``source`` (``live:IF`` or the capture file), ``client``, ``server``,
    ``epoch_start_ns``, ``epoch_end_ns``, ``latency_ns``, ``samples`` (the gaps it rests on).
``pirate_packets``
    What became of every packet of each source, running totals: ``source``, ``stage``
    (``capture``: the reader's buckets; ``estimator``: Pirate's, which partition the capture's
    IP packets), ``bucket``, ``packets``.
``rda_intervals``
    RDA one-way latency, one row per interval record of an agent (:mod:`tacit.oneway_latency.
    agent`): ``source`` (the results file, or the name a POST gave), ``role``, ``interval``,
    ``start_ns``, ``end_ns``, ``status``, ``mean_ns``, ``std_ns``, ``packets_sender``,
    ``packets_receiver``, ``matched``, ``set_difference``, ``lost``, ``late``, ``foreign``,
    ``buckets_per_bank``, ``peel_rounds``, ``received_ns``. A record sent again for the same
    source, role and interval replaces the earlier one.
``rda_rejected``
    Lines that were not interval records: ``source``, ``line``, ``reason``, ``received_ns``.
``state``
    ``low_water`` (no span before this sequence number is still being reconstructed),
    ``next_position`` (the next stream position), ``seed`` (of the trace ids) and, per RDA
    results file, ``rda_offset:FILE`` and ``rda_line:FILE`` (how far it has been read).

Each thread uses its own cursor on the one connection (DuckDB's rule for threads). Results
are always fetched whole: a result left partly read keeps its cursor's transaction open, and
the checkpoint at :meth:`Store.close` refuses to run while one is.
"""

from __future__ import annotations

import itertools
import threading
import zlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pyarrow as pa

from tacit.errors import ConfigError
from tacit.formats.jaeger import JaegerSpan, trace_doc, with_tags
from tacit.model.span_details import STATUS_ERROR
from tacit.reconstruct.assemble import EVIDENCE_TAGS, VIRTUAL, evidence_tags
from tacit.reconstruct.callgraph import CallGraph
from tacit.reconstruct.pipeline import ONLINE
from tacit.serve.journal import Journal, Request, read_segment

_SCHEMA = """
CREATE TABLE IF NOT EXISTS ingest(
    first_seq BIGINT, spans INTEGER, received_ns BIGINT, encoding VARCHAR, body BLOB);
CREATE TABLE IF NOT EXISTS spans(
    seq BIGINT, trace_id VARCHAR, span_id VARCHAR, parent_span_id VARCHAR, service VARCHAR,
    instance VARCHAR, operation VARCHAR, kind VARCHAR, start_ns BIGINT, duration_ns BIGINT,
    parent_service VARCHAR, score DOUBLE, alternatives VARCHAR, unmapped VARCHAR,
    given_trace_id VARCHAR, given_parent_id VARCHAR);
CREATE TABLE IF NOT EXISTS processes(process BIGINT PRIMARY KEY, service VARCHAR, tags VARCHAR);
CREATE TABLE IF NOT EXISTS callgraphs(at_ns BIGINT, yaml VARCHAR);
CREATE TABLE IF NOT EXISTS traces(
    trace_id VARCHAR, service VARCHAR, operation VARCHAR, start_ns BIGINT, duration_ns BIGINT,
    spans INTEGER, min_score DOUBLE, finished_ns BIGINT, doc BLOB);
CREATE TABLE IF NOT EXISTS trace_operations(
    trace_id VARCHAR, service VARCHAR, operation VARCHAR, start_ns BIGINT, duration_ns BIGINT,
    trace_start_ns BIGINT);
CREATE TABLE IF NOT EXISTS confidence(
    at_ns BIGINT, service VARCHAR, incoming BIGINT, top_choice BIGINT);
CREATE TABLE IF NOT EXISTS pirate_estimates(
    source VARCHAR, client VARCHAR, server VARCHAR, epoch_start_ns BIGINT, epoch_end_ns BIGINT,
    latency_ns BIGINT, samples BIGINT);
CREATE TABLE IF NOT EXISTS pirate_packets(
    source VARCHAR, stage VARCHAR, bucket VARCHAR, packets BIGINT,
    PRIMARY KEY (source, stage, bucket));
CREATE TABLE IF NOT EXISTS rda_intervals(
    source VARCHAR, role VARCHAR, interval BIGINT, start_ns BIGINT, end_ns BIGINT,
    status VARCHAR, mean_ns DOUBLE, std_ns DOUBLE, packets_sender BIGINT,
    packets_receiver BIGINT, matched BIGINT, set_difference BIGINT, lost BIGINT, late BIGINT,
    "foreign" BIGINT, buckets_per_bank BIGINT, peel_rounds BIGINT, received_ns BIGINT,
    PRIMARY KEY (source, role, interval));
CREATE TABLE IF NOT EXISTS rda_rejected(
    source VARCHAR, line BIGINT, reason VARCHAR, received_ns BIGINT);
CREATE TABLE IF NOT EXISTS state(key VARCHAR PRIMARY KEY, value BIGINT);
"""
_TRACES_INDEX = "CREATE INDEX IF NOT EXISTS traces_by_id ON traces(trace_id)"
_ADDED_COLUMNS = {
    "spans": (
        ("tags", "VARCHAR"),
        ("logs", "VARCHAR"),
        ("process", "BIGINT"),
        ("link", "VARCHAR"),
        ("probability", "DOUBLE"),
        ("status", "BIGINT"),
    ),
    "traces": (("first_seq", "BIGINT"), ("last_seq", "BIGINT"), ("probability", "DOUBLE")),
    "confidence": (("links", "BIGINT"), ("probability", "DOUBLE")),
}
"""Columns added since the first version of the schema (:data:`_SCHEMA`), in the order
added, by ``ALTER TABLE ... ADD COLUMN`` (:meth:`Store._upgrade`), to a new file as to one of an
earlier version: after the first version's columns."""


CHECKPOINT_THRESHOLD = "256MB"
"""How much write-ahead log DuckDB gathers before the commit that crosses it checkpoints the
file (its default is 16 MB). A checkpoint blocks the committing thread for a time that grows
with the file, so small ones, made often, hold reconstruction back; larger ones take some
more memory (``bench/bench_serve.py sustained`` measures both). Commits stay durable either way
(the log is synced at each); the cost is a longer log to replay when a killed service restarts."""
_SET_STATE = "INSERT OR REPLACE INTO state VALUES (?, ?)"
TAG_PAGE = 500
"""A search by tags makes the documents of the most recent traces that may match (see
:meth:`Store.find_traces`) ``limit`` at a time, or this many if fewer, until it has found
``limit``: most that may match do, and each document is costly to make."""


def unpack_doc(stored: bytes) -> str:
    """A ``traces.doc`` value of a file of an earlier version as JSON text: zlib-compressed
    JSON, or, earlier still, JSON text (as bytes once :meth:`Store._upgrade` altered the
    column), which a zlib stream cannot start as (``{`` against ``x``)."""
    return (zlib.decompress(stored) if stored[:1] != b"{" else stored).decode()


FINISHED_TABLES = {
    "spans": "INSERT",
    "traces": "INSERT",
    "trace_operations": "INSERT",
    "confidence": "INSERT",
    "processes": "INSERT OR IGNORE",  # a process is stored once, the first time it is seen
}
"""The tables :meth:`Store.write_finished` adds to, in its one transaction, and how."""


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
    """What one retention pass (:meth:`Store.expire`) deleted, per table, and whether it was
    all there was to delete (else a pass bounded by its span count left the newer part)."""

    rows: dict[str, int]
    done: bool


def cannot_write(error: BaseException) -> bool:
    """Whether ``error`` is the store failing to write its files (a full disk, a quota, a
    failing device), which space or time may mend, rather than a fault of the service. DuckDB
    names no errno: a commit whose log could not be written says so in its message."""
    import duckdb

    if isinstance(error, (OSError, duckdb.IOException)):
        return True
    return isinstance(error, duckdb.TransactionException) and "Could not write" in str(error)


class Store:
    """The database file at ``path`` (created with the schema when absent)."""

    def __init__(self, path: str | Path, memory_mib: int | None = None) -> None:
        """Open (or create) the store at ``path``; ``memory_mib``: DuckDB's memory limit
        (None: DuckDB's default)."""
        import duckdb

        self.path = Path(path)
        try:
            self._con = duckdb.connect(str(self.path))
        except (duckdb.Error, OSError) as e:
            raise ConfigError(f"{path}: cannot open the database: {e}") from None
        self._con.execute(_SCHEMA)
        self._upgrade()
        self._con.execute(_TRACES_INDEX)
        self._con.execute(f"SET checkpoint_threshold = '{CHECKPOINT_THRESHOLD}'")
        if memory_mib is not None:
            self._con.execute(f"SET memory_limit = '{int(memory_mib)}MiB'")
        self._local = threading.local()
        self._cursors: list[Any] = []
        self._lock = threading.Lock()
        self._journal = Journal(self.path)
        self._moving = threading.Lock()
        self.torn: list[tuple[Path, int]] = []
        """Journal segments that ended in bytes that are not a whole record, and how many: the
        record a crash cut short, never acknowledged."""
        self.settle()

    def _upgrade(self) -> None:
        """Bring a file of an earlier version to this schema: its trace documents were JSON
        text (VARCHAR), kept as they are in the BLOB column (:func:`unpack_doc` reads both),
        and it lacks the :data:`_ADDED_COLUMNS`, which its earlier rows have as NULL."""
        columns = dict(
            self._con.execute(
                "SELECT table_name || '.' || column_name, data_type "
                "FROM information_schema.columns WHERE table_name IN ?",
                [list(_ADDED_COLUMNS)],
            ).fetchall()
        )
        alter = [
            f"ALTER TABLE {table} ADD COLUMN {name} {kind}"
            for table, added in _ADDED_COLUMNS.items()
            for name, kind in added
            if f"{table}.{name}" not in columns
        ]
        if columns["traces.doc"] != "BLOB":
            alter.append("ALTER TABLE traces ALTER doc TYPE BLOB")
        if alter:
            # DuckDB alters no indexed table: the index is made again after (:meth:`__init__`).
            self._con.execute("DROP INDEX IF EXISTS traces_by_id")
        for statement in alter:
            self._con.execute(statement)

    def close(self) -> None:
        """Move the journal in, checkpoint and close the file (and every thread's cursor)."""
        self.settle()
        self._journal.close()
        self._con.execute("CHECKPOINT")
        with self._lock:
            for cur in self._cursors:
                cur.close()
            self._cursors.clear()
        self._con.close()

    def _cursor(self) -> Any:
        cur = getattr(self._local, "cursor", None)
        if cur is None:
            cur = self._local.cursor = self._con.cursor()
            with self._lock:
                self._cursors.append(cur)
        return cur

    @contextmanager
    def _transaction(self) -> Iterator[Any]:
        """This thread's cursor inside a transaction: committed when the block ends, rolled
        back when it raises."""
        import duckdb

        cur = self._cursor()
        cur.execute("BEGIN")
        try:
            yield cur
            cur.execute("COMMIT")
        except BaseException:
            with suppress(duckdb.TransactionException):  # a commit that failed has ended it
                cur.execute("ROLLBACK")
            raise

    @contextmanager
    def _settled(self) -> Iterator[Any]:
        """A transaction that first takes in the requests of the journal's sealed segments,
        which are removed once it commits."""
        with self._moving:
            with self._transaction() as cur:
                moved = self._move_journal(cur)
                yield cur
            for path in moved:
                path.unlink(missing_ok=True)

    def settle(self) -> None:
        """Move the requests journaled so far into ``ingest``."""
        with self._settled():
            pass

    def _move_journal(self, cur: Any) -> list[Path]:
        """Insert the requests of the sealed journal segments that ``ingest`` lacks (a crash
        may have come between the commit that took a segment in and its removal), with their
        state values; returns the segments."""
        paths = self._journal.sealed()
        requests: list[Request] = []
        for path in paths:
            records, torn = read_segment(path)
            if torn:
                self.torn.append((path, torn))
            requests.extend(records)
        if not requests:
            return paths
        have = {
            int(seq)
            for (seq,) in cur.execute(
                "SELECT first_seq FROM ingest WHERE first_seq >= ?",
                [min(r.first_seq for r in requests)],
            ).fetchall()
        }
        new = [r for r in requests if r.first_seq not in have]
        if new:
            rows = pa.table(
                {
                    "first_seq": [r.first_seq for r in new],
                    "spans": pa.array([r.spans for r in new], pa.int32()),
                    "received_ns": [r.received_ns for r in new],
                    "encoding": [r.encoding for r in new],
                    "body": pa.array([r.body for r in new], pa.binary()),
                }
            )
            cur.register("journal_in", rows)
            cur.execute("INSERT INTO ingest SELECT * FROM journal_in")
            cur.unregister("journal_in")
        state = {k: v for r in new for k, v in r.state.items()}  # the latest of each key
        if state:
            cur.executemany(_SET_STATE, list(state.items()))
        return paths

    # -- state -------------------------------------------------------------------------------
    def state(self, key: str, default: int) -> int:
        rows = self._cursor().execute("SELECT value FROM state WHERE key = ?", [key]).fetchall()
        return default if not rows else int(rows[0][0])

    def set_state(self, key: str, value: int) -> None:
        self._cursor().execute(_SET_STATE, [key, value])

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
    ) -> None:
        """Make a request durable, with the ``state`` values that go with it, before it is
        acknowledged: in the journal (:mod:`.journal`), which the next round of finished
        traces moves into ``ingest``."""
        self._journal.append(Request(first_seq, spans, received_ns, encoding, body, state or {}))

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
                cur.execute(_SET_STATE, [key, value])

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

    # -- latency series ----------------------------------------------------------------------
    def restart_pirate(self, source: str) -> None:
        """Forget what ``source`` gave (a capture file read again from its start)."""
        with self._transaction() as cur:
            for table in ("pirate_estimates", "pirate_packets"):
                cur.execute(f"DELETE FROM {table} WHERE source = ?", [source])

    def append_pirate(
        self,
        source: str,
        rows: Sequence[tuple[str, str, int, int, int, int]],
        packets: Sequence[tuple[str, str, int]],
    ) -> None:
        """Add ``source``'s closed estimates, (client, server, epoch start, epoch end,
        latency, samples) each, and its packets, (stage, bucket, packets) each, to the running
        totals; in one transaction."""
        with self._transaction() as cur:
            if rows:
                cur.executemany(
                    "INSERT INTO pirate_estimates VALUES (?, ?, ?, ?, ?, ?, ?)",
                    [(source, *r) for r in rows],
                )
            if packets:
                cur.executemany(
                    "INSERT INTO pirate_packets VALUES (?, ?, ?, ?) ON CONFLICT DO UPDATE "
                    "SET packets = packets + excluded.packets",
                    [(source, *p) for p in packets],
                )

    def pirate_estimates(
        self, server: str | None, start_ns: int | None, end_ns: int | None, limit: int
    ) -> list[tuple[str, str, str, int, int, int, int]]:
        """The latest ``limit`` estimates (of ``server``, of epochs starting in [``start_ns``,
        ``end_ns``]), by epoch then source, client."""
        rows = self._latest(
            "pirate_estimates", "epoch_start_ns", start_ns, end_ns, {"server": server}, limit,
            newest="epoch_start_ns DESC, source, client", order="epoch_start_ns, source, client",
        )  # fmt: skip
        return [
            (a, b, c, int(d), int(e), int(f), int(g)) for a, b, c, d, e, f, g in rows.fetchall()
        ]

    def pirate_packets(self) -> dict[str, dict[str, dict[str, int]]]:
        """Per source and stage, packets per bucket."""
        rows = self._cursor().execute("SELECT * FROM pirate_packets ORDER BY ALL").fetchall()
        out: dict[str, dict[str, dict[str, int]]] = {}
        for source, stage, bucket, n in rows:
            out.setdefault(source, {}).setdefault(stage, {})[bucket] = int(n)
        return out

    def append_rda(
        self,
        records: Sequence[Sequence[Any]],
        rejected: Sequence[tuple[str, int, str, int]],
        state: dict[str, int],
    ) -> None:
        """Store interval records (the columns of ``rda_intervals`` in order; one that repeats
        a source, role and interval replaces it), rejected lines (source, line, reason,
        received_ns) and ``state`` (how far a file was read), in one transaction."""
        with self._transaction() as cur:
            if records:
                cur.executemany(
                    f"INSERT OR REPLACE INTO rda_intervals VALUES ({', '.join('?' * 18)})",
                    [list(r) for r in records],
                )
            if rejected:  # as a table: executemany makes a statement a line, too slow for floods
                source, line, reason, received = zip(*rejected, strict=True)
                rows = pa.table(
                    {
                        "source": pa.array(source, pa.string()),
                        "line": pa.array(line, pa.int64()),
                        "reason": pa.array(reason, pa.string()),
                        "received_ns": pa.array(received, pa.int64()),
                    }
                )
                cur.register("rejected_in", rows)
                cur.execute("INSERT INTO rda_rejected SELECT * FROM rejected_in")
                cur.unregister("rejected_in")
            for key, value in state.items():
                cur.execute(_SET_STATE, [key, value])

    def rda_intervals(
        self, source: str | None, start_ns: int | None, end_ns: int | None, limit: int
    ) -> list[dict[str, Any]]:
        """The latest ``limit`` interval records (of ``source``, of intervals starting in
        [``start_ns``, ``end_ns``]), by source, role and interval."""
        cur = self._latest(
            "rda_intervals", "start_ns", start_ns, end_ns, {"source": source}, limit,
            newest="start_ns DESC, source, role", order="source, role, interval",
        )  # fmt: skip
        names = [d[0] for d in cur.description]
        return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]

    def _latest(
        self,
        table: str,
        at: str,
        start_ns: int | None,
        end_ns: int | None,
        equal: dict[str, Any],
        limit: int,
        newest: str,
        order: str,
    ) -> Any:
        """The cursor over the ``limit`` first rows of ``table`` by ``newest`` whose ``at``
        column is in [``start_ns``, ``end_ns``] and whose columns equal ``equal`` (None: any),
        in the order ``order``."""
        where, args = _range(at, start_ns, end_ns)
        for column, value in equal.items():
            if value is not None:
                where.append(f"{column} = ?")
                args.append(value)
        return self._cursor().execute(
            f"SELECT * FROM (SELECT * FROM {table} WHERE {' AND '.join(where)} "
            f"ORDER BY {newest} LIMIT ?) ORDER BY {order}",
            [*args, limit],
        )

    def rda_rejected(self) -> dict[str, int]:
        """Rejected lines per source."""
        rows = self._cursor().execute(
            "SELECT source, count(*) FROM rda_rejected GROUP BY source ORDER BY source"
        )
        return {s: int(n) for s, n in rows.fetchall()}

    def counts(self) -> dict[str, int]:
        """Rows per table, for readiness and the page (``spans``: the spans received, stored;
        ``drawn_spans``: those drawn for services that sent none); in one statement, since each
        costs DuckDB much the same CPU whatever it does, and status is polled."""
        tables = ("spans", "traces", "pirate_estimates", "rda_intervals")
        counts = ", ".join(f"(SELECT count(*) FROM {t})" for t in tables)
        drawn = f"(SELECT count(*) FROM spans WHERE link = '{VIRTUAL}')"
        row = self._cursor().execute(f"SELECT {counts}, {drawn}").fetchall()[0]
        out = dict(zip(tables, map(int, row), strict=False))
        out["drawn_spans"] = int(row[-1])
        out["spans"] -= out["drawn_spans"]  # received spans stored; the drawn apart
        return out


def _range(column: str, start: int | None, end: int | None) -> tuple[list[str], list[Any]]:
    """WHERE clauses (always at least one) and their arguments for ``column`` in [start, end]."""
    where, args = ["TRUE"], []
    for clause, value in ((f"{column} >= ?", start), (f"{column} <= ?", end)):
        if value is not None:
            where.append(clause)
            args.append(value)
    return where, args


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
