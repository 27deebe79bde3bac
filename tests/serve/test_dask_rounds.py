"""``tacit serve`` with ``dask``: each round's offline step on a Dask cluster, the same traces
stored as reconstructing here."""

from __future__ import annotations

import threading

import pytest

from serve_app import running, shop_spans
from tacit.experiment.otlp_load import encoded_requests, post_requests

_COLUMNS = "span_id, parent_span_id, score, probability, alternatives, unmapped, link"


def _stored(tmp_path, requests, read_ahead: list[bool] | None = None, **changes) -> list[tuple]:
    """What the service stores of ``requests``; with ``read_ahead``, its first push waits for
    them all to be acknowledged and then reads ahead every one it can, as it does while a
    round is solved on a cluster (each answer in ``read_ahead``)."""
    tmp_path.mkdir()
    with running(tmp_path, **changes) as svc:
        posted = threading.Event()
        if read_ahead is not None:
            push = svc.reconstructor.feed.push

            def first_reading_ahead(*args):
                svc.reconstructor.feed.push = push
                posted.wait(60)
                while True:
                    read_ahead.append(svc.reconstructor.read_ahead())
                    if not read_ahead[-1]:
                        break
                return push(*args)

            svc.reconstructor.feed.push = first_reading_ahead
        log = post_requests(requests, f"http://127.0.0.1:{svc.http_port}/v1/traces", connections=1)
        posted.set()
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


def test_requests_read_ahead_during_a_round_are_stored_as_those_read_in_turn(tmp_path):
    """The requests read while a round is solved elsewhere are pushed first and in their
    order: what is stored is what reading each in its turn stores."""
    requests = encoded_requests(shop_spans(3))
    answers: list[bool] = []
    ahead = _stored(tmp_path / "ahead", requests, answers)
    in_turn = _stored(tmp_path / "in_turn", requests)
    assert answers.count(True) >= 2 and answers[-1] is False
    assert ahead == in_turn
