"""RDA's one-way latency in ``tacit serve``: the interval records the two-point agents publish
(``tacit latency oneway agent --output FILE``, one JSON object a line:
:mod:`tacit.oneway_latency.agent`), taken from files followed as they grow (``tail -f``) or
from ``POST /api/tacit/latency/oneway``, stored (``rda_intervals``) and counted.

Every line is accounted for: an interval record is stored (one repeating a source, role and
interval replaces it: an agent resends a result after a reconnection), the agent's closing
summary line is counted as such, a blank line as blank, and anything else is rejected with its
reason (``rda_rejected``; the log names the file and line of the first few of each read, and
counts the rest); none stops the service.

A followed file is read up to its last complete line; how far is stored with the records it
gave, in one transaction, so a restart goes on where the last run stopped. A file that becomes
shorter than that (an agent restarted with ``--output`` truncates its file) is read again from
its start.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tacit.errors import InputError
from tacit.oneway_latency.agent import STATUSES
from tacit.serve.followed_file import FollowedFile, Follower
from tacit.serve.metrics import ServeMetrics
from tacit.serve.store import Store

log = logging.getLogger("tacit.serve")

COUNTS = (
    "packets_sender",
    "packets_receiver",
    "matched",
    "set_difference",
    "lost",
    "late",
    "foreign",
    "buckets_per_bank",
    "peel_rounds",
)
"""The count fields of a record, in the order of ``rda_intervals``; each may be null (an
interval without reconciliation has none of the last five)."""
ROLES = ("sender", "receiver")
LOGGED = 3
"""Rejected lines logged one by one per piece of input; the rest in one line (a file of
garbage would otherwise log a warning for each of its lines)."""
POLL_S = 0.2
NS = 1e9


@dataclass
class RdaLines:
    """What a piece of input gave: records as ``rda_intervals`` rows, rejected lines as
    ``rda_rejected`` rows, and the count of lines of each result."""

    records: list[tuple[Any, ...]] = field(default_factory=list)
    rejected: list[tuple[str, int, str, int]] = field(default_factory=list)
    results: dict[str, int] = field(
        default_factory=lambda: {"stored": 0, "summary": 0, "blank": 0, "malformed": 0}
    )


def interval_row(text: str, source: str, received_ns: int) -> tuple[Any, ...] | None:
    """The ``rda_intervals`` row of one line, or None for the agent's summary line; an
    :class:`~tacit.errors.InputError` saying why the line is not an interval record."""
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise InputError(f"not JSON: {e}") from None
    if not isinstance(doc, dict):
        raise InputError("not a JSON object")
    if doc.get("summary") is True:
        return None
    interval, start, end = (_integer(doc, k) for k in ("interval", "start_ns", "end_ns"))
    if end <= start:
        raise InputError(f"end_ns {end} is not after start_ns {start}")
    status, role = doc.get("status"), doc.get("role")
    if status not in STATUSES:
        raise InputError(f"status {status!r} is none of {', '.join(STATUSES)}")
    if role not in ROLES:
        raise InputError(f"role {role!r} is neither sender nor receiver")
    mean, std = _number(doc, "mean_ns"), _number(doc, "std_ns")
    if std is not None and std < 0:
        raise InputError(f"std_ns {std} is negative")
    counts = [_count(doc, k) for k in COUNTS]
    return (source, role, interval, start, end, status, mean, std, *counts, received_ns)


def _integer(doc: dict[str, Any], key: str) -> int:
    value = doc.get(key)
    if not isinstance(value, int) or isinstance(value, bool):
        raise InputError(f"{key} {value!r} is not an integer")
    return value


def _count(doc: dict[str, Any], key: str) -> int | None:
    if doc.get(key) is None:
        return None
    value = _integer(doc, key)
    if value < 0:
        raise InputError(f"{key} {value} is negative")
    return value


def _number(doc: dict[str, Any], key: str) -> float | None:
    value = doc.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InputError(f"{key} {value!r} is not a finite number")
    return float(value)


class RdaIngest:
    """Parses, stores and counts interval records from any input (files, POSTs)."""

    def __init__(self, store: Store, metrics: ServeMetrics) -> None:
        self.store = store
        self.metrics = metrics
        self._latest: dict[str, int] = {}  # source: the latest interval given to the gauges
        self._lock = threading.Lock()

    def take(
        self,
        lines: Iterable[tuple[int, str | InputError]],
        source: str,
        state: dict[str, int] | None = None,
    ) -> RdaLines:
        """Read numbered lines of ``source`` (or why the reader refused one); store their
        records, their rejections and ``state`` in one transaction; count them. Returns what
        they gave."""
        now = time.time_ns()
        got = RdaLines()
        for number, text in lines:
            if isinstance(text, str) and not text.strip():
                got.results["blank"] += 1
                continue
            try:
                if isinstance(text, InputError):
                    raise text
                row = interval_row(text, source, now)
            except InputError as e:
                got.results["malformed"] += 1
                got.rejected.append((source, number, str(e), now))
                if len(got.rejected) <= LOGGED:
                    log.warning("%s:%d: not an RDA interval record: %s", source, number, e)
                continue
            if row is None:
                got.results["summary"] += 1
            else:
                got.results["stored"] += 1
                got.records.append(row)
        if len(got.rejected) > LOGGED:
            log.warning(
                "%s: %d more lines are not RDA interval records (rda_rejected has each)",
                source,
                len(got.rejected) - LOGGED,
            )
        self.store.append_rda(got.records, got.rejected, state or {})
        self._count(got, source)
        return got

    def take_body(self, body: bytes, source: str) -> dict[str, Any]:
        """A POSTed body of JSON lines (what an agent writes to ``--output``): what became of
        each line, as the answer to send."""
        try:
            text = body.decode()
        except UnicodeDecodeError as e:
            raise InputError(f"the body is not UTF-8: {e}") from None
        got = self.take(enumerate(text.splitlines(), 1), source)
        return {
            "source": source,
            **got.results,
            "rejected": [{"line": n, "reason": why} for _, n, why, _ in got.rejected],
        }

    def _count(self, got: RdaLines, source: str) -> None:
        """Count the lines and intervals; the gauges take the latest interval with a mean."""
        m = self.metrics
        for result, n in got.results.items():
            if n:
                m.rda_lines.labels(result).inc(n)
        latest: tuple[int, float, float | None] | None = None  # interval, mean, std
        for _, _, interval, _, _, status, mean, std, *_ in got.records:
            m.rda_intervals.labels(status).inc()
            if mean is not None and (latest is None or interval > latest[0]):
                latest = (interval, mean, std)
        if latest is None:
            return
        interval, mean, std = latest
        with self._lock:
            if interval < self._latest.get(source, interval):
                return
            self._latest[source] = interval
        label = m.rda_source(source)
        m.rda_mean.labels(label).set(mean / NS)
        m.rda_std.labels(label).set(math.nan if std is None else std / NS)


class RdaFollower(Follower):
    """A results file followed as it grows (:class:`~.followed_file.FollowedFile`), in a
    thread of its own (module docstring). The file need not exist yet. Stopping reads what the
    file holds then."""

    def __init__(self, path: Path, ingest: RdaIngest) -> None:
        super().__init__("rda", str(path), POLL_S, last_poll=True)
        self.path = path
        self.ingest = ingest
        self.source = str(path)
        self._offset_key, self._line_key = f"rda_offset:{path}", f"rda_line:{path}"
        store = ingest.store
        self.file = FollowedFile(
            path, store.state(self._offset_key, 0), store.state(self._line_key, 0)
        )

    def status(self) -> dict[str, object]:
        return {
            "source": self.source,
            "bytes": self.file.offset,
            "lines": self.file.line,
            "error": self.error,
        }

    def poll(self) -> None:
        while self.read_more():
            pass

    def read_more(self) -> bool:
        """Take the lines completed since the last read, and store how far the file has been
        read with what they gave, in one transaction; whether there was anything."""
        read = self.file.read()
        if read is None:
            return False
        state = {self._offset_key: read.offset, self._line_key: read.line}
        self.ingest.take([(number, text) for number, _, text in read.lines], self.source, state)
        self.file.took(read)
        return True
