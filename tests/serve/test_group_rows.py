"""The rows of finished traces built in a process of their own
(:mod:`tacit.serve.group_rows`): what comes back is what the writer's thread builds, a child
that ends is reported, and the service uses a child only where it has a core to spare."""

from __future__ import annotations

import os
import signal
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from serve_app import get, running, shop_callgraph, shop_spans, until
from tacit.experiment.otlp_load import encoded_requests, lost_context, post_requests
from tacit.formats.common import Traces
from tacit.formats.otlp_request import check_export_request
from tacit.serve import group_rows
from tacit.serve.config import SERVE_ONLINE
from tacit.serve.group_rows import RowBuilder, RowProcess, RowProcessEnded, cores, row_builder
from tacit.serve.online_feed import OnlineFeed
from tacit.serve.trace_metrics import Observed


@pytest.fixture(scope="module")
def groups():
    """Groups of finished traces as the service hands them to its writer: the shop app's
    spans with every call's context lost, pushed request by request."""
    feed = OnlineFeed(shop_callgraph(), SERVE_ONLINE)
    out, seq = [], 0
    for _, body in encoded_requests(lost_context(shop_spans(20))):
        spans, parent_ids = check_export_request(body, "protobuf", "test")[1]()
        fed = feed.push(spans, parent_ids, np.arange(seq, seq + len(spans)), np.inf)
        seq += len(spans)
        if fed.finished or fed.alone:
            out.append(([(f, *feed.release(f)) for f in fed.finished], fed.alone))
    out.append(([(f, *feed.release(f)) for f in feed.close_oldest()], []))
    assert sum(len(f.spans) for g, _ in out for f, _, _ in g) > 1000
    return out


def test_a_child_builds_what_the_writers_thread_builds(groups):
    """Table by table, count by count, observation by observation, group after group (the
    trace ids a group takes are known to those after it in the child as on the thread)."""
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
        with pytest.raises(RuntimeError, match="building rows failed in their process"):
            child.build([(finished[0][0], finished[0][1][:1], finished[0][2])], [], 1)
        os.kill(child._process.pid, signal.SIGKILL)
        with pytest.raises(RowProcessEnded, match=r"exit code -9"):
            child.build(finished, alone, 1)
    finally:
        child.close()


def test_the_service_stops_reconstructing_once_its_row_process_ends(tmp_path):
    """Killed, the child ends the writer as a failure of it does: readiness says so, and
    nothing is taken as stored."""
    spans = shop_spans(6)
    with running(tmp_path) as svc:
        url = f"http://127.0.0.1:{svc.http_port}/v1/traces"
        requests = encoded_requests(spans)
        assert post_requests(requests[:4], url).failed == 0
        assert until(lambda: svc.store.counts()["spans"] > 0, 60)
        builder = svc.reconstructor.writer.builder
        assert isinstance(builder, RowProcess)  # two cores here
        os.kill(builder._process.pid, signal.SIGKILL)
        post_requests(requests[4:], url)
        assert until(lambda: get(svc, "/readyz")[0] == 503, 60)
        assert isinstance(svc.reconstructor.failure, RowProcessEnded)
        assert b"process building rows ended" in get(svc, "/readyz")[1]


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
    assert isinstance(row_builder(1, forward=False), RowBuilder)
    for group in tmp_path.rglob("cpu.max"):
        group.write_text("max 100000\n")
    for group in tmp_path.rglob("cpu.cfs_quota_us"):
        group.write_text("-1\n")
    assert cores() == len(os.sched_getaffinity(0))
