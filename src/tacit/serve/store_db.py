"""The connection to the store's database file, and what every domain of the store needs of
it (:mod:`.store_traces`, :mod:`.store_latency`): cursors, transactions, the journal moved in,
the ``state`` table, the upgrade of a file of an earlier version, readiness. It is apart so
that each domain's queries are written against one base, which knows none of them.

Each thread uses its own cursor on the one connection (DuckDB's rule for threads). Results
are always fetched whole: a result left partly read keeps its cursor's transaction open, and
the checkpoint at :meth:`Database.close` refuses to run while one is.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import pyarrow as pa

from tacit.errors import ConfigError
from tacit.reconstruct.assemble import VIRTUAL
from tacit.serve.journal import Journal, Request, read_segment
from tacit.serve.store_schema import ADDED_COLUMNS, SCHEMA, TRACES_INDEX

CHECKPOINT_THRESHOLD = "256MB"
"""How much write-ahead log DuckDB gathers before the commit that crosses it checkpoints the
file (its default is 16 MB). A checkpoint blocks the committing thread for a time that grows
with the file, so small ones, made often, hold reconstruction back; larger ones take some
more memory (``bench/bench_serve.py sustained`` measures both). Commits stay durable either way
(the log is synced at each); the cost is a longer log to replay when a killed service restarts."""
SET_STATE = "INSERT OR REPLACE INTO state VALUES (?, ?)"


def cannot_write(error: BaseException) -> bool:
    """Whether ``error`` is the store failing to write its files (a full disk, a quota, a
    failing device), which space or time may mend, rather than a fault of the service. DuckDB
    names no errno: a commit whose log could not be written says so in its message."""
    import duckdb

    if isinstance(error, (OSError, duckdb.IOException)):
        return True
    return isinstance(error, duckdb.TransactionException) and "Could not write" in str(error)


class Database:
    """The connection to the database file at ``path`` (created with the schema when
    absent), which the domains of :class:`.store.Store` share."""

    def __init__(self, path: str | Path, memory_mib: int | None = None) -> None:
        """Open (or create) the store at ``path``; ``memory_mib``: DuckDB's memory limit
        (None: DuckDB's default)."""
        import duckdb

        self.path = Path(path)
        try:
            self._con = duckdb.connect(str(self.path))
        except (duckdb.Error, OSError) as e:
            raise ConfigError(f"{path}: cannot open the database: {e}") from None
        self._con.execute(SCHEMA)
        self._upgrade()
        self._con.execute(TRACES_INDEX)
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
        text (VARCHAR), kept as they are in the BLOB column (:func:`.store_traces.unpack_doc`
        reads both), and it lacks the :data:`ADDED_COLUMNS`, which its earlier rows have as
        NULL."""
        columns = dict(
            self._con.execute(
                "SELECT table_name || '.' || column_name, data_type "
                "FROM information_schema.columns WHERE table_name IN ?",
                [list(ADDED_COLUMNS)],
            ).fetchall()
        )
        alter = [
            f"ALTER TABLE {table} ADD COLUMN {name} {kind}"
            for table, added in ADDED_COLUMNS.items()
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
            cur.executemany(SET_STATE, list(state.items()))
        return paths

    # -- state -------------------------------------------------------------------------------
    def state(self, key: str, default: int) -> int:
        rows = self._cursor().execute("SELECT value FROM state WHERE key = ?", [key]).fetchall()
        return default if not rows else int(rows[0][0])

    def set_state(self, key: str, value: int) -> None:
        self._cursor().execute(SET_STATE, [key, value])

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
