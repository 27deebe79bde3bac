"""The finished traces as Parquet blocks on a shared filesystem, which query replicas read
(``role: query``), as Tempo's queriers read its blocks: DuckDB has one writer and no reader
beside it, and a block is a file written once. With a retention time, blocks go as the
store's rows do (:meth:`BlockWriter.expire`).

The reconstruct role writes each round of finished traces (the rows one
:meth:`~.store_traces.TraceStore.write_finished` adds) as one block: a Parquet file per table,
``DIR/<table>/<n>.parquet``. So that a block is there exactly when its round is in the store,
whatever moment the process is killed at, the files are written first under
``DIR/.pending/<n>/``, the store's transaction commits the round with ``block_seq`` = n + 1,
and then the files are moved into place (a rename each). A restart moves in the pending blocks
below the committed ``block_seq`` and deletes the others: a round not committed is done again,
as a new block.

Every :data:`COMPACT_ROUNDS` rounds the blocks of the rounds no merged block holds yet are
merged, a file per table, as Tempo's compactor merges its blocks: a query reads a file per
merged block rather than one per round (:mod:`.block_files` names them). Merged blocks are
merged again :data:`MERGE_AGAIN` at a time, once that many of fewer than ``MERGE_AGAIN``
compactions' rounds each lie side by side (as Tempo's compactor takes blocks of one level
together), so that a long-running store is read from a file per thousand rounds; no further,
so that a file does not outlive the retention time by much. The merged file is written aside
and moved into place, and from then on readers take those rounds from it; the files it holds
are deleted at the next compaction (or the next start), by when a reader that listed them just
before is done. A merged file is dated as its newest round's, so retention treats it as that
round.

The latency series (Pirate's and RDA's tables) are not append-only (a running total, a capture
file read again), so they are copied whole instead, a file per table under ``DIR/latency/``,
each time they changed, at most every :data:`LATENCY_EXPORT_S`
(:meth:`BlockWriter.export_latency`): a query replica answers them as the store answered a
few seconds before.

A query replica (:class:`BlockStore`) opens an in-memory database whose tables of finished
traces and latency series are views over the blocks, and the rest of the schema empty; the
store's own queries (:mod:`.store_traces`, :mod:`.store_latency`) run on it as they do on the
file. The views are made again whenever a table's files changed, checked at each query, so new
blocks show at once. It reads one reconstruct role's blocks, or those of several, each in a
directory of its own under the one it is given (one per application, each application's spans
reconstructed by a role of its own): trace ids do not collide, as each store draws the seed of
its own.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
from pathlib import Path
from typing import Any

from tacit.errors import ConfigError
from tacit.serve.block_files import SCHEMA_BLOCK, TableFiles, merged_name
from tacit.serve.store import Store
from tacit.serve.store_db import Database
from tacit.serve.store_latency import LATENCY_TABLES
from tacit.serve.store_schema import SCHEMA
from tacit.serve.store_traces import FINISHED_TABLES

log = logging.getLogger("tacit.serve")

PENDING = ".pending"
STATE_KEY = "block_seq"
COMPACT_ROUNDS = 100
"""Rounds (writes of finished traces) between two compactions: a merged block per table holds
that many, so a query reads a hundredth of the files, and a merge reads one at a time."""
MERGE_AGAIN = 10
"""Merged blocks merged again into one, each of fewer than this many compactions' rounds."""
LATENCY = "latency"
LATENCY_EXPORT_S = 5.0
"""The longest the latency series of the blocks are behind the store's, while they change."""
_KEYED = {"processes": "process"}
"""Tables whose rows a later block may repeat (stored once, the first time): the key."""


class BlockWriter:
    """Writes the rounds of ``store`` as blocks under ``root`` (module docstring)."""

    def __init__(self, root: Path, store: Database, compact_rounds: int = COMPACT_ROUNDS) -> None:
        import pyarrow.parquet as pq

        self.root = root
        self.compact_rounds = compact_rounds
        self.merge_again = MERGE_AGAIN
        self._published = 0
        """Rounds moved into place since the last compaction."""
        cur = store._cursor()
        empty = {t: cur.sql(f"SELECT * FROM {t} LIMIT 0").to_arrow_table() for t in FINISHED_TABLES}
        self._names = {table: rows.column_names for table, rows in empty.items()}
        """The store's columns of each table, which a round's rows are written under."""
        try:
            (root / PENDING).mkdir(parents=True, exist_ok=True)
            for table, rows in empty.items():
                (root / table).mkdir(exist_ok=True)
                if not (root / table / SCHEMA_BLOCK).exists():
                    _write(pq, rows, root / table / SCHEMA_BLOCK)
        except OSError as e:
            raise ConfigError(f"blocks: cannot write to {root}: {e.strerror}") from None
        self.next = store.state(STATE_KEY, 0)
        self._recover()

    def _recover(self) -> None:
        """Move in the pending blocks the store committed; delete the others, and a merge
        that was not moved into place, and the rounds a merged block holds."""
        for pending in sorted((self.root / PENDING).iterdir()):
            if pending.name.isdigit() and int(pending.name) < self.next:
                self._publish(pending)
            else:
                shutil.rmtree(pending)
        for table in FINISHED_TABLES:
            for path in TableFiles.of(self.root / table).covered():
                path.unlink(missing_ok=True)

    def stage(self, tables: dict[str, Any]) -> dict[str, int]:
        """Write a round's ``tables`` (as :meth:`.store_traces.TraceStore.write_finished`
        takes them) as a pending block; the state that commits it with the round."""
        import pyarrow.parquet as pq

        pending = self.root / PENDING / f"{self.next:012d}"
        pending.mkdir(exist_ok=True)
        for table, rows in tables.items():
            names = self._names[table][: rows.num_columns]
            _write(pq, rows.rename_columns(names), pending / f"{table}.parquet")
        self.next += 1
        return {STATE_KEY: self.next}

    def publish(self) -> str | None:
        """Move the block the last commit stored into place; every :attr:`compact_rounds`
        rounds, :meth:`compact`: ``"merged"``, or ``"failed"`` (logged; the rounds stay, read
        as they are, and the merge is tried again at the next); None when none was due."""
        self._publish(self.root / PENDING / f"{self.next - 1:012d}")
        self._published += 1
        if self._published < self.compact_rounds:
            return None
        import pyarrow as pa

        try:
            self.compact()
        except (OSError, pa.ArrowException) as e:
            log.warning("blocks could not be merged, to be tried again: %s", e)
            return "failed"
        return "merged"

    def compact(self) -> int:
        """Delete the files an earlier merge holds, merge the rounds no merged block holds,
        and merged blocks again where they are due, per table (module docstring); how many
        rounds were merged."""
        self._published = 0
        merged = 0
        # A merged block holds every round of its range: none may be left to come into it,
        # as a round stored but not moved into place would at the next start.
        waiting = [int(p.name) for p in (self.root / PENDING).iterdir() if p.name.isdigit()]
        below = min(waiting, default=self.next)
        for table in FINISHED_TABLES:
            files = TableFiles.of(self.root / table)
            for path in files.covered():
                path.unlink(missing_ok=True)
            rounds = [(n, path) for n, path in files.uncovered() if n < below]
            if len(rounds) >= 2:
                self._merge(table, rounds[0][0], rounds[-1][0], [p for _, p in rounds])
                merged = max(merged, len(rounds))
            files = TableFiles.of(self.root / table)
            again = files.mergeable(self.compact_rounds * self.merge_again, self.merge_again)
            if again:
                self._merge(table, again[0][0], again[-1][1], [files.merged[r] for r in again])
        return merged

    def _merge(self, table: str, first: int, last: int, paths: list[Path]) -> None:
        """The blocks ``paths`` of ``table`` merged into the block of rounds ``first`` to
        ``last``, written aside and moved into place, dated as the newest of them."""
        import pyarrow.parquet as pq

        aside = self.root / PENDING / f"merge-{first:012d}-{last:012d}"
        aside.mkdir(exist_ok=True)
        part = aside / f"{table}.parquet"
        try:
            _merge(pq, paths, part)
            newest = max(path.stat().st_mtime_ns for path in paths)
            os.utime(part, ns=(newest, newest))
            os.replace(part, self.root / table / merged_name(first, last))
        finally:
            shutil.rmtree(aside, ignore_errors=True)

    def export_latency(self, store: Database) -> None:
        """Copy the latency series of ``store`` whole, a file per table under ``latency/``,
        each written aside and moved into place (module docstring)."""
        import pyarrow.parquet as pq

        (self.root / LATENCY).mkdir(exist_ok=True)
        cur = store._cursor()
        for table in LATENCY_TABLES:
            _write(pq, cur.sql(f"SELECT * FROM {table}").to_arrow_table(),
                   self.root / LATENCY / f"{table}.parquet")  # fmt: skip

    def _publish(self, pending: Path) -> None:
        for path in sorted(pending.glob("*.parquet")):
            os.replace(path, self.root / path.stem / f"{pending.name}.parquet")
        pending.rmdir()

    def expire(self, before_ns: int) -> int:
        """Delete the blocks written before ``before_ns``; how many files. A block holds
        traces finished by when it was written, and a trace is taken in before it finishes,
        so such a block holds only what the store's retention deletes too
        (:meth:`.store_traces.TraceStore.expire`); a trace taken in before the cut and
        finished after it goes with its block, a window or so later."""
        gone = 0
        for table in FINISHED_TABLES:
            for path in (self.root / table).glob("0*.parquet"):
                if path.stat().st_mtime_ns < before_ns:
                    path.unlink(missing_ok=True)
                    gone += 1
        return gone


def _merge(pq: Any, paths: list[Path], path: Path) -> None:
    """The rows of the Parquet files ``paths``, one after another, as the file ``path`` (on
    the disk), read and written a file at a time, under the columns of them all: a file
    without one gives it as null."""
    import pyarrow as pa

    schema = pa.unify_schemas([pq.read_schema(p) for p in paths])
    with pq.ParquetWriter(path, schema) as out:
        for p in paths:
            rows = pq.read_table(p)
            for name in schema.names:
                if name not in rows.column_names:
                    rows = rows.append_column(name, pa.nulls(len(rows), schema.field(name).type))
            out.write_table(rows.select(schema.names).cast(schema))
    with path.open("rb") as f:
        os.fsync(f.fileno())


def _write(pq: Any, rows: Any, path: Path) -> None:
    """``rows`` as the Parquet file ``path``, whole or not at all, and on the disk."""
    part = path.with_suffix(".part")
    pq.write_table(rows, part)
    with part.open("rb") as f:
        os.fsync(f.fileno())
    os.replace(part, path)


class BlockStore(Store):
    """The finished traces and latency series of the blocks under ``root``, read as the store
    reads its file (the latency series empty until a role has copied them). Only for reading:
    it has no file, journal or transactions of its own (the store's
    :meth:`~.store_db.Database.__init__`, which opens them, is not run)."""

    def __init__(self, root: Path) -> None:
        import duckdb

        self.roots = block_roots(root)
        if not self.roots:
            raise ConfigError(
                f"blocks: {root} holds no blocks a reconstruct role wrote, in itself or in a "
                "directory of its own"
            )
        self.path = root
        self._con = duckdb.connect(":memory:")
        self._con.execute(SCHEMA)
        self._upgrade()
        for table in FINISHED_TABLES:
            self._con.execute(f"DROP TABLE {table}")
        self._files: dict[str, list[Path]] = {}
        self._views = threading.Lock()
        self._refresh()
        self._local = threading.local()
        self._cursors: list[Any] = []
        self._lock = threading.Lock()
        self.torn: list[tuple[Path, int]] = []

    def _cursor(self) -> Any:
        self._refresh()
        return super()._cursor()

    def _refresh(self) -> None:
        """Make again the view of each table whose files changed since it was made."""
        with self._views:
            self.roots = block_roots(self.path) or self.roots
            for table in FINISHED_TABLES:
                files = [self.roots[0] / table / SCHEMA_BLOCK]
                for root in self.roots:
                    files += TableFiles.of(root / table).read()[1:]
                if files != self._files.get(table):
                    self._con.execute(f"CREATE OR REPLACE VIEW {table} AS {_view(table, files)}")
                    self._files[table] = files
            for table in LATENCY_TABLES:
                files = [p for r in self.roots if (p := r / LATENCY / f"{table}.parquet").exists()]
                if files and files != self._files.get(table):
                    if table not in self._files:  # the empty table of the schema, until now
                        self._con.execute(f"DROP TABLE {table}")
                    self._con.execute(f"CREATE OR REPLACE VIEW {table} AS {_view(table, files)}")
                    self._files[table] = files

    def close(self) -> None:
        with self._lock:
            for cur in self._cursors:
                cur.close()
            self._cursors.clear()
        self._con.close()


def block_roots(root: Path) -> list[Path]:
    """The directories of blocks a query replica given ``root`` reads: ``root`` itself where a
    reconstruct role writes there, else each directory in it where one does (looked for at
    each query, so a role started later shows once it has written its first)."""

    def written(path: Path) -> bool:
        return all((path / table / SCHEMA_BLOCK).exists() for table in FINISHED_TABLES)

    if written(root):
        return [root]
    if not root.is_dir():
        return []
    return [path for path in sorted(root.iterdir()) if path.is_dir() and written(path)]


def _view(table: str, files: list[Path]) -> str:
    """The query of a view over the blocks ``files`` of ``table``."""
    listed = ", ".join("'" + str(f).replace("'", "''") + "'" for f in files)
    rows = f"SELECT * FROM read_parquet([{listed}], union_by_name = true)"
    key = _KEYED.get(table)
    return f"{rows} QUALIFY row_number() OVER (PARTITION BY {key}) = 1" if key else rows
