"""The latency series in the store of ``tacit serve``: Pirate's estimates and the running
totals of its packets, RDA's interval records and the lines that were none. Apart from the
traces (:mod:`.store_traces`), with which they share only the connection (:mod:`.store_db`)
and retention (:meth:`.store_traces.TraceStore.expire`).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from tacit.serve.store_db import SET_STATE, Database

LATENCY_TABLES = ("pirate_estimates", "pirate_packets", "rda_intervals", "rda_rejected")


class LatencyStore(Database):
    """The latency series of the store: Pirate's response latency and RDA's one-way
    latency."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.latency_changed = threading.Event()
        """Set once each write of the latency series has committed (and by the retention
        pass that deleted some), for whoever copies them elsewhere
        (:meth:`.store_blocks.BlockWriter.export_latency`) to clear before it reads them: a
        write it may have missed sets it again. Set from the start."""
        self.latency_changed.set()
        super().__init__(*args, **kwargs)

    def restart_pirate(self, source: str) -> None:
        """Forget what ``source`` gave (a capture file read again from its start)."""
        with self._transaction() as cur:
            for table in ("pirate_estimates", "pirate_packets"):
                cur.execute(f"DELETE FROM {table} WHERE source = ?", [source])
        self.latency_changed.set()

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
        self.latency_changed.set()

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
                cur.execute(SET_STATE, [key, value])
        self.latency_changed.set()

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


def _range(column: str, start: int | None, end: int | None) -> tuple[list[str], list[Any]]:
    """WHERE clauses (always at least one) and their arguments for ``column`` in [start, end]."""
    where, args = ["TRUE"], []
    for clause, value in ((f"{column} >= ?", start), (f"{column} <= ?", end)):
        if value is not None:
            where.append(clause)
            args.append(value)
    return where, args
