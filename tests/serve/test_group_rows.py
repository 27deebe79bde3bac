"""The rows of finished traces built in a process of their own while the service is behind
(:mod:`tacit.serve.group_rows`): what comes back is what the writer's thread builds, a child
that ends leaves the rows to the writer, and a child is used only where there is a second core."""

from __future__ import annotations

import os
import signal
import threading
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from serve_app import get_json, running, shop_callgraph, shop_spans, until
from tacit.experiment.otlp_load import encoded_requests, lost_context, post_requests
from tacit.formats.common import Traces
from tacit.formats.otlp_request import check_export_request
from tacit.serve import group_rows, reconstructor, trace_writer
from tacit.serve.config import SERVE_ONLINE
from tacit.serve.finished_rows import TakenIds, kept_ids
from tacit.serve.group_rows import RowBuilder, RowProcess, RowProcessEnded, cores, row_process
from tacit.serve.online_feed import OnlineFeed
from tacit.serve.trace_metrics import Observed


@pytest.fixture(scope="module")
def groups():
    """Groups of finished traces as the service's writer takes them: the shop app's spans with
    every call's context lost, pushed request by request, the trace ids kept chosen in order."""
    feed, taken = OnlineFeed(shop_callgraph(), SERVE_ONLINE), TakenIds()
    out, seq = [], 0

    def batches(finished):
        return [(f, *feed.release(f)) for f in finished]

    for _, body in encoded_requests(lost_context(shop_spans(20))):
        spans, parent_ids = check_export_request(body, "protobuf", "test")[1]()
        fed = feed.push(spans, parent_ids, np.arange(seq, seq + len(spans)), np.inf)
        seq += len(spans)
        if fed.finished or fed.alone:
            out.append((batches(fed.finished), fed.alone))
    out.append((batches(feed.close_oldest()), []))
    assert sum(len(f.spans) for g, _ in out for f, _, _ in g) > 1000
    return [([(f, s, g, kept_ids(f, g, taken)) for f, s, g in b], alone) for b, alone in out]


def test_a_child_builds_what_the_writers_thread_builds(groups):
    """Table by table, count by count, observation by observation, group after group."""
    here, child = RowBuilder(7, forward=True), RowProcess(7, forward=True)
    try:
        for finished, alone in groups:
            a = here.build(finished, alone, 1_000)
            b = child.build(finished, alone, 1_000)
            assert a.tables.keys() == b.tables.keys() and a.tables
            for name, table in a.tables.items():
                assert table.equals(b.tables[name]), name
            assert (a.span_count, a.trace_count) == (b.span_count, b.trace_count) > (0, 0)
            assert replace(a.rows, forward=[]) == replace(b.rows, forward=[])  # the counts
            assert list(map(_forwarded, a.rows.forward)) == list(map(_forwarded, b.rows.forward))
            assert a.requests == b.requests
            assert list(map(_plain, a.traces)) == list(map(_plain, b.traces))
    finally:
        child.close()
    assert not child._process.is_alive()


def _forwarded(traces: Traces) -> tuple[list, list, list, list]:
    spans, evidence = traces
    names = spans.strings.names
    return names(spans.trace), names(spans.span_id), spans.parent.tolist(), evidence.score


def _plain(seen: Observed) -> tuple[list, list]:
    """What the series count of a batch, as lists (numpy's arrays compare element-wise)."""
    return (
        [(labels, s.tolist()) for labels, s in seen.spans],
        [(edge, n, s.tolist(), c.tolist()) for edge, n, s, c in seen.edges],
    )


def test_a_child_that_ends_is_reported_and_so_is_a_failure_in_it(groups):
    finished, alone = groups[0]
    child = RowProcess(7, forward=False)
    try:
        assert child.build(finished, alone, 1).rows.forward == []  # not kept: not forwarded
        f, seq, given, kept = finished[0]
        with pytest.raises(RuntimeError, match="building rows failed in their process"):
            child.build([(f, seq[:1], given, kept)], [], 1)
        os.kill(child._process.pid, signal.SIGKILL)
        with pytest.raises(RowProcessEnded, match=r"exit code -9"):
            child.build(finished, alone, 1)
    finally:
        child.close()


def test_behind_the_service_builds_rows_in_its_child_and_without_it_once_it_ends(
    tmp_path, monkeypatch
):
    """Requests that queue while a write is held are built in the child (groups of a few
    requests, so that many wait); killed, the child leaves the next groups to the writer's
    thread, and every span is stored once."""
    monkeypatch.setattr(reconstructor, "GROUP_SPANS", 1000)
    monkeypatch.setattr(trace_writer, "BEHIND_S", 0.0)  # what waits while a write is held
    spans = lost_context(shop_spans(12))
    requests = encoded_requests(spans)
    with running(tmp_path) as svc:
        writer = svc.reconstructor.writer
        assert until(lambda: writer.child is not None, 60)  # two cores here
        built = []
        build = writer.child.build

        def counted(*args):
            built.append(1)
            return build(*args)

        writer.child.build = counted
        url = f"http://127.0.0.1:{svc.http_port}/v1/traces"
        half = len(requests) // 2
        with _held_write(svc):
            assert post_requests(requests[:half], url, connections=2).failed == 0
        assert svc.wait_idle(60)
        in_child = len(built)
        os.kill(writer.child._process.pid, signal.SIGKILL)
        with _held_write(svc):
            assert post_requests(requests[half:], url, connections=2).failed == 0
        assert svc.wait_idle(60)
        status = get_json(svc, "/api/tacit/status")
        child = writer.child
    assert in_child > 0, "no group was built in the child"
    assert child is None and len(built) == in_child + 1  # tried once more, then here
    assert status["received"] == status["stored"]["spans"] == len(spans)


@contextmanager
def _held_write(svc):
    """The service's next write of finished traces held until the block ends (once one is),
    so that requests sent meanwhile wait to be reconstructed."""
    write = svc.store.write_finished
    writing, release = threading.Event(), threading.Event()

    def held(*args, **kwargs):
        writing.set()
        release.wait(60)
        return write(*args, **kwargs)

    svc.store.write_finished = held
    try:
        yield
        assert writing.wait(60)
    finally:
        release.set()
        svc.store.write_finished = write


def test_one_core_builds_on_the_writers_thread_two_in_a_child(monkeypatch, tmp_path):
    """A cgroup's CPU quota bounds the cores as much as the CPUs the process may run on."""
    monkeypatch.setattr(group_rows, "CGROUP", tmp_path)
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            group = tmp_path / path.lstrip("/")
            group.mkdir(parents=True, exist_ok=True)
            (group / "cpu.max").write_text("50000 100000\n")
        elif "cpu" in controllers.split(","):
            group = tmp_path / "cpu" / path.lstrip("/")
            group.mkdir(parents=True, exist_ok=True)
            (group / "cpu.cfs_quota_us").write_text("50000\n")
            (group / "cpu.cfs_period_us").write_text("100000\n")
    assert cores() == 0.5
    assert row_process(1, forward=False) is None
    for group in tmp_path.rglob("cpu.max"):
        group.write_text("max 100000\n")
    for group in tmp_path.rglob("cpu.cfs_quota_us"):
        group.write_text("-1\n")
    assert cores() == len(os.sched_getaffinity(0))


def test_a_child_that_cannot_start_leaves_the_rows_to_the_writers_thread(monkeypatch, caplog):
    def no_room(*args: object) -> RowProcess:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(group_rows, "cores", lambda: 2.0)
    started = row_process(1, forward=False)
    try:
        assert isinstance(started, RowProcess)
    finally:
        assert started is not None
        started.close()
    monkeypatch.setattr(group_rows, "RowProcess", no_room)
    assert row_process(1, forward=False) is None
    assert "on the writer's thread only: [Errno 28] No space left on device" in caplog.text
