"""``tacit serve`` with ``dask``: each round's offline step on a Dask cluster, the same traces
stored as reconstructing here."""

from __future__ import annotations

import pytest

from serve_app import running, shop_spans
from tacit.experiment.otlp_load import encoded_requests, post_requests

_COLUMNS = "span_id, parent_span_id, score, probability, alternatives, unmapped, link"


def _stored(tmp_path, requests, **changes) -> list[tuple]:
    tmp_path.mkdir()
    with running(tmp_path, **changes) as svc:
        log = post_requests(requests, f"http://127.0.0.1:{svc.http_port}/v1/traces", connections=1)
        assert log.acknowledged == sum(n for n, _ in requests) and log.failed == 0
        assert svc.wait_idle(60)
        cur = svc.store._cursor()
        return cur.execute(f"SELECT {_COLUMNS} FROM spans ORDER BY span_id").fetchall()


def test_rounds_on_a_dask_cluster_store_what_rounds_here_store(tmp_path):
    distributed = pytest.importorskip("distributed")
    requests = encoded_requests(shop_spans(3))
    here = _stored(tmp_path / "here", requests)
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    ) as cluster:
        there = _stored(tmp_path / "there", requests, dask=cluster.scheduler_address)
        assert "reconstruct_part" in cluster.scheduler.task_prefixes  # the rounds ran there
    assert len(here) == sum(n for n, _ in requests)
    assert there == here
