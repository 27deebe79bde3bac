"""The rows of each group of finished traces, and what the metrics count of them, built on the
writer's thread or, while the service is behind, in a process of their own beside it.

Building a group's rows (each trace assembled with its evidence and its Jaeger parts:
:mod:`.finished_rows`) is most of what storing a span costs in Python, and a process runs one
thread of Python at a time: on the writer's thread (:mod:`.trace_writer`), building takes turns
with the reconstruction. Where the service has a second core (:func:`cores`), a child process
can build them instead (:class:`RowProcess`): the group goes there pickled and the tables come
back in Arrow's format. That takes less of the service's own time than building, and more CPU
in all (the pickling both ways, and the child's building), so the writer sends a group there
only while the service is behind (requests have waited to be reconstructed for a while:
:meth:`.trace_writer.TraceWriter._behind`), and builds it itself otherwise.
Building is the same either way: the trace ids a group keeps are chosen by the writer before
(:func:`~.finished_rows.kept_ids`), and the rest is made from the group alone.

A child that ends (killed, out of memory) is logged and the writer builds every group itself
from then on, the one it was building included.
"""

from __future__ import annotations

import logging
import math
import multiprocessing
import os
import pickle
import traceback
from contextlib import suppress
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection
from pathlib import Path

import numpy as np
import pyarrow as pa

from tacit.model.span_details import STATUS_ERROR
from tacit.model.spans import SERVER
from tacit.reconstruct.online import Finished
from tacit.serve.finished_rows import Rows
from tacit.serve.online_feed import Alone, Given
from tacit.serve.trace_metrics import Observed, observed

log = logging.getLogger("tacit.serve")

CGROUP = Path("/sys/fs/cgroup")
STOP_S = 5.0
"""How long a child is given to end once told to, before it is killed."""
START_S = 60.0
"""How long a child is given to start (the server of forks loads tacit first)."""
READY = "ready"
"""What a child sends once it is ready to build."""

Request = tuple[str, list[float], int]
"""A service's finished incoming requests: the service, their durations (s) and how many
failed."""


@dataclass
class Built:
    """A group's rows as the store's tables, and what the metrics count of them."""

    tables: dict[str, pa.Table]
    rows: Rows
    """The counts of the rows (their columns are in :attr:`tables`), and the traces to forward
    where the service forwards them."""
    span_count: int
    trace_count: int
    traces: list[Observed]
    """Per batch of finished traces, what the connectors' series count of it."""
    requests: list[list[Request]]
    """Per batch, its finished incoming requests by service."""


FinishedBatch = tuple[Finished, np.ndarray, Given, dict[int, str]]
"""A batch of finished traces, its spans' sequence numbers, what their senders gave, and the
trace ids its roots keep (:func:`~.finished_rows.kept_ids`)."""


class RowBuilder:
    """Builds the rows of each group here, on the caller's thread. ``seed``: the store's seed
    of trace ids; ``forward``: whether the built traces are kept to be forwarded."""

    def __init__(self, seed: int, forward: bool) -> None:
        self.seed = seed
        self.forward = forward

    def build(self, finished: list[FinishedBatch], alone: list[Alone], now_ns: int) -> Built:
        """The rows of the finished batches and of the spans finished alone, stored at
        ``now_ns``."""
        rows = Rows()
        traces, requests = [], []
        for f, seq, given, kept in finished:
            stored = rows.add_finished(f, seq, given, self.seed, now_ns, kept)
            traces.append(observed(stored))
            requests.append(_requests(f))
        for a in alone:
            rows.add_alone(a)
        tables = rows.tables(now_ns)
        counts = replace(
            rows,
            spans={},
            traces={},
            operations={},
            processes={},
            forward=rows.forward if self.forward else [],
        )
        return Built(tables, counts, rows.span_count, rows.trace_count, traces, requests)


class RowProcessEnded(Exception):
    """The child process that builds rows ended."""


class RowProcess:
    """Builds the rows of each group in a child process (see the module docstring), as
    :class:`RowBuilder` would. The process is forked from a server of forks, which has loaded
    this module once, so that a child starts in a fraction of a second, and not from the
    service's process, whose threads a fork would copy in whatever state they are in."""

    def __init__(self, seed: int, forward: bool) -> None:
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload([__name__])
        self._conn, child = context.Pipe()
        self._process = context.Process(
            target=_serve, args=(child, seed, forward), name="tacit-rows", daemon=True
        )
        self._process.start()
        child.close()
        try:
            started = self._conn.poll(START_S) and pickle.loads(self._conn.recv_bytes()) == READY
        except (EOFError, OSError):
            started = False
        if not started:
            self.close()
            raise RowProcessEnded(
                f"the process building rows did not start (exit code {self._process.exitcode})"
            )

    def build(self, finished: list[FinishedBatch], alone: list[Alone], now_ns: int) -> Built:
        """As :meth:`RowBuilder.build`, in the child; raises :class:`RowProcessEnded` when it
        has ended, and a :class:`RuntimeError` with its traceback when building failed there."""
        try:
            self._conn.send_bytes(pickle.dumps((finished, alone, now_ns), pickle.HIGHEST_PROTOCOL))
            ok, made = pickle.loads(self._conn.recv_bytes())
        except (EOFError, OSError) as e:
            self._process.join(STOP_S)
            raise RowProcessEnded(
                f"the process building rows ended (exit code {self._process.exitcode})"
            ) from e
        if not ok:
            raise RuntimeError(f"building rows failed in their process:\n{made}")
        return made

    def close(self) -> None:
        """Tell the child to end, and wait for it (killed if it does not end)."""
        with suppress(OSError):  # ended already
            self._conn.send_bytes(pickle.dumps(None))
        self._process.join(STOP_S)
        if self._process.is_alive():
            self._process.kill()
            self._process.join()
        self._conn.close()


def row_process(seed: int, forward: bool) -> RowProcess | None:
    """A :class:`RowProcess` where this process has two cores or more (:func:`cores`), else
    None: on one core a child would only add the cost of sending each group. A child that
    cannot be started (a temporary directory without room for the socket of the server of
    forks, a main module that starts the service again when imported) is logged, and None."""
    n = cores()
    if n < 2:
        return None
    try:
        process = RowProcess(seed, forward)
    except (OSError, multiprocessing.ProcessError, RowProcessEnded) as e:
        log.warning("rows of finished traces built on the writer's thread only: %s", e)
        return None
    log.info("rows of finished traces built in a process of their own while behind (%g cores)", n)
    return process


def cores() -> float:
    """The cores this process may use: the CPUs it may run on, bounded by its cgroup's CPU
    quota where one is set (a container's ``--cpus``, a Kubernetes CPU limit)."""
    n = float(len(os.sched_getaffinity(0)))
    return min(n, _quota() or math.inf)


def _quota() -> float | None:
    """The CPU quota of this process's cgroup in cores (version 2's ``cpu.max``, or version
    1's ``cpu.cfs_quota_us`` over its period); None where none is set or none can be read."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        group = path.lstrip("/")
        try:
            if controllers == "":  # version 2: one hierarchy, every controller
                quota, period = (CGROUP / group / "cpu.max").read_text().split()
                return None if quota == "max" else int(quota) / int(period)
            if "cpu" in controllers.split(","):
                v1 = CGROUP / "cpu" / group
                quota = (v1 / "cpu.cfs_quota_us").read_text()
                period = (v1 / "cpu.cfs_period_us").read_text()
                return None if int(quota) < 0 else int(quota) / int(period)
        except (OSError, ValueError):  # a hierarchy without the cpu controller: the next
            continue
    return None


def _requests(f: Finished) -> list[Request]:
    """The finished incoming requests of ``f`` by service: their durations and failures."""
    spans = f.spans
    server = np.flatnonzero(spans.kind == SERVER)
    seconds = ((spans.end[server] - spans.start[server]) / 1e9).tolist()
    by_service: dict[int, tuple[list[float], list[int]]] = {}
    for r, code, sec in zip(server.tolist(), spans.service[server].tolist(), seconds, strict=True):
        mine = by_service.setdefault(code, ([], []))
        mine[0].append(sec)
        mine[1].append(r)
    out = []
    for code, (secs, rows) in by_service.items():
        errors = sum((d := spans.detail(r)) is not None and d.status == STATUS_ERROR for r in rows)
        out.append((spans.strings.values[code], secs, errors))  # every span has a service
    return out


def _serve(conn: Connection, seed: int, forward: bool) -> None:
    """The child's loop: build each group it is sent until told to end (None) or its parent
    has gone."""
    builder = RowBuilder(seed, forward)
    conn.send_bytes(pickle.dumps(READY))
    while True:
        try:
            work = pickle.loads(conn.recv_bytes())
        except (EOFError, OSError):  # the service ended
            return
        if work is None:
            return
        made: tuple[bool, Built | str]
        try:
            made = (True, builder.build(*work))
        except Exception:
            made = (False, traceback.format_exc())
        conn.send_bytes(pickle.dumps(made, pickle.HIGHEST_PROTOCOL))
