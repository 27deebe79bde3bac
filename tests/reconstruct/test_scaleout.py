"""TraceWeaver in independent parts (§6.5, §6.6): the merge of the parts is the one-run result,
on a simulated shop and on an app with a join; the parts run on a local Dask cluster."""

from __future__ import annotations

import dataclasses
import itertools
import logging
import os
import signal
import sys

import numpy as np
import pytest

from reviews_app import reviews_app
from tacit.errors import ConfigError
from tacit.evaluation.trace_accuracy import score_reconstruction
from tacit.experiment.memcached import free_port
from tacit.model.roles import infer_roles, process_key
from tacit.model.span_details import SpanDetail, detail_column
from tacit.model.spans import SERVER
from tacit.reconstruct.callgraph import learn_callgraph
from tacit.reconstruct.online import OnlineParams, reconstruct_streamed
from tacit.reconstruct.pipeline import run_algorithm
from tacit.reconstruct.result import Reconstruction
from tacit.reconstruct.scaleout import DaskRounds, merge, partition, reconstruct_dask, solve_parts
from tacit.reconstruct.traceweaver import TraceWeaverParams, reconstruct_traceweaver
from tacit.simulate import load_app, simulate

FAST = TraceWeaverParams(max_components=2, max_iterations=4)
FIELDS = (
    "unmapped",
    "alternatives",
    "top_candidates",
    "fallback",
    "confidence",
    "service_report",
    "info",
)


@pytest.fixture(scope="module")
def shop():
    app = load_app(None)
    graph = learn_callgraph(infer_roles(simulate(app, 20, n_requests=400, seed=7)).spans)
    obs = infer_roles(simulate(app, 300, duration_s=2.0, seed=11, record_threads=False))
    blind = obs.without_truth()
    return obs, blind, graph, reconstruct_traceweaver(blind, graph, FAST)


@pytest.fixture(scope="module")
def reviews():
    obs = infer_roles(simulate(reviews_app(), 120, n_requests=300, seed=5, record_threads=False))
    graph = learn_callgraph(obs.spans)
    blind = obs.without_truth()
    return blind, graph, reconstruct_traceweaver(blind, graph, FAST)


def assert_same(a: Reconstruction, b: Reconstruction) -> None:
    assert np.array_equal(a.parent, b.parent)
    assert np.array_equal(a.score, b.score, equal_nan=True)
    for f in FIELDS:
        assert getattr(a, f) == getattr(b, f), f


def in_parts(blind, graph, parts, params=FAST) -> Reconstruction:
    return merge(
        blind, parts, [reconstruct_traceweaver(blind.take(r), graph, params) for r in parts]
    )


def check_cover(blind, parts) -> None:
    rows = np.concatenate(parts)
    assert len(rows) == len(blind)
    assert np.array_equal(np.sort(rows), np.arange(len(blind)))
    assert all(np.array_equal(p, np.sort(p)) for p in parts)


def test_parts_are_whole_instances_and_their_merge_is_the_one_run_result(shop):
    _, blind, graph, whole = shop
    parts = partition(blind, graph, FAST)
    check_cover(blind, parts)
    proc = process_key(blind)
    assert len(parts) == len(np.unique(proc)) >= 6  # no join: one part per instance
    assert all(len(np.unique(proc[p])) == 1 for p in parts)
    assert [len(p) for p in parts] == sorted((len(p) for p in parts), reverse=True)
    assert whole.alternatives and whole.confidence  # the fields compared below are not empty
    assert_same(in_parts(blind, graph, parts), whole)


def test_a_join_shares_its_part_with_the_instances_upstream_of_it(reviews):
    blind, graph, whole = reviews
    parts = partition(blind, graph, FAST)
    check_cover(blind, parts)
    s = blind.strings
    services = [{s[int(c)] for c in np.unique(blind.service[p])} for p in parts]
    assert {"compose", "gateway", "text", "user", "movie"} in services
    assert_same(in_parts(blind, graph, parts), whole)
    # One part per instance would lose the requests' groups at the join: scores differ.
    proc = process_key(blind)
    single = [np.flatnonzero(proc == k) for k in np.unique(proc)]
    apart = in_parts(blind, graph, single)
    assert not np.array_equal(apart.score, whole.score, equal_nan=True)
    # Without the join's grouping, every instance is a part, and exact.
    alone = TraceWeaverParams(max_components=2, max_iterations=4, joins=False)
    parts = partition(blind, graph, alone)
    assert len(parts) == len(single)
    assert_same(in_parts(blind, graph, parts, alone), reconstruct_traceweaver(blind, graph, alone))


def test_windows_cut_where_no_request_is_open(shop):
    obs, blind, graph, whole = shop
    window = 400_000_000
    by_instance = partition(blind, graph, FAST)
    parts = partition(blind, graph, FAST, window_ns=window)
    check_cover(blind, parts)
    assert len(parts) >= 3 * len(by_instance)
    proc = process_key(blind)
    for instance in by_instance:
        mine = [p for p in parts if proc[p[0]] == proc[instance[0]]]
        servers = [p[blind.kind[p] == SERVER] for p in mine]
        servers.sort(key=lambda rows: blind.start[rows].min())
        for before, after in itertools.pairwise(servers):
            assert blind.end[before].max() <= blind.start[after].min()
            assert blind.start[after].min() - blind.start[before].min() >= window
    # Each window learns its own timing: not the same mapping, about as accurate.
    windowed = score_reconstruction(obs.spans, in_parts(blind, graph, parts)).accuracy
    assert windowed >= score_reconstruction(obs.spans, whole).accuracy - 0.03


def test_a_window_is_longer_than_zero(shop):
    _, blind, graph, _ = shop
    with pytest.raises(ConfigError, match="longer than 0"):
        partition(blind, graph, window_ns=0)


@pytest.fixture(scope="module")
def cluster():
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None
    ) as c:
        yield c


def test_the_parts_on_a_dask_cluster_give_the_one_run_result(shop, reviews, cluster):
    seen: list[int] = []
    _, blind, graph, whole = shop
    address = cluster.scheduler_address
    assert_same(run_algorithm("traceweaver", blind, graph, FAST, seen.append, address), whole)
    assert sorted(seen) == sorted(len(p) for p in partition(blind, graph, FAST))
    blind, graph, whole = reviews
    with pytest.importorskip("distributed").Client(cluster, set_as_default=False) as client:
        assert_same(reconstruct_dask(blind, graph, client, FAST), whole)
        assert client.status == "running"  # a client given is left open


@pytest.fixture(scope="module")
def passed_on():
    """The shop under a load timing alone maps badly, each span's target naming its request's
    order id: values passed on from a request to its calls (:mod:`.shared_values`)."""
    app = load_app(None)
    graph = learn_callgraph(infer_roles(simulate(app, 20, n_requests=300, seed=7)).spans)
    obs = infer_roles(simulate(app, 1000, n_requests=100, seed=3, record_threads=False))
    order = obs.spans.trace
    details = detail_column(
        [SpanDetail(attributes={"http.target": f"/op?order={1000 + int(order[r])}"})
         for r in range(len(obs.spans))]
    )  # fmt: skip
    truth = dataclasses.replace(obs.spans, details=details)
    return truth, dataclasses.replace(obs.without_truth(), details=details), graph


def test_on_dask_a_call_sees_the_values_below_it_in_other_parts(passed_on, cluster):
    """Transaction fields pass from a request to its calls' callees, which are other
    instances, so other parts: on the cluster the values still tell apart what timing cannot,
    and the result is the one run's."""
    truth, blind, graph = passed_on
    whole = reconstruct_traceweaver(blind, graph, FAST)
    on_dask = reconstruct_dask(blind, graph, cluster.scheduler_address, FAST)
    assert_same(on_dask, whole)
    timing = reconstruct_traceweaver(blind, graph, dataclasses.replace(FAST, shared_values=False))
    assert (
        score_reconstruction(truth, on_dask).accuracy > score_reconstruction(truth, timing).accuracy
    )


def test_online_rounds_on_dask_give_the_rounds_here(reviews, passed_on, cluster):
    """The service's rounds (online TraceWeaver, §5.3) with their offline step on the
    cluster: the same parents, scores, probabilities and alternatives, round by round; the
    caller's own work goes on while each round is solved (``meanwhile``)."""
    distributed = pytest.importorskip("distributed")
    calls: list[int] = []

    def meanwhile() -> bool:  # some work, then none left
        calls.append(1)
        return len(calls) % 3 != 0

    with distributed.Client(cluster, set_as_default=False) as client:
        for blind, graph in (reviews[:2], passed_on[1:]):
            length = int(blind.end.max() - blind.start.min())  # a few rounds over the stream
            online = OnlineParams(
                window_ns=length // 4, lookahead_ns=length // 8, lateness_ns=length // 16
            )
            here = reconstruct_streamed(blind, graph, FAST, online)
            there = reconstruct_streamed(
                blind, graph, FAST, online, solve=DaskRounds(client, meanwhile)
            )
            assert here.info["rounds"] >= 3
            assert_same(there, here)
            assert np.array_equal(there.probability, here.probability, equal_nan=True)
    assert calls


def test_a_scheduler_out_of_reach_is_a_config_error(shop):
    pytest.importorskip("distributed")  # which adds its settings to dask's configuration
    dask = pytest.importorskip("dask")
    _, blind, graph, _ = shop
    with (
        dask.config.set({"distributed.comm.timeouts.connect": "1s"}),
        pytest.raises(ConfigError, match="cannot reach the Dask scheduler"),
    ):
        reconstruct_dask(blind, graph, f"tcp://127.0.0.1:{free_port()}")
    for bad in ("localhost", "tls://127.0.0.1:8786"):
        with pytest.raises(ConfigError, match="bad Dask scheduler address"):
            reconstruct_dask(blind, graph, bad)


def test_without_dask_installed_the_error_says_what_to_install(shop, monkeypatch):
    _, blind, graph, _ = shop
    monkeypatch.setitem(sys.modules, "distributed", None)
    wanted = r"pip install 'tacit-traces\[dask\]' \(not installed: distributed\)"
    with pytest.raises(ConfigError, match=wanted):
        reconstruct_dask(blind, graph, "tcp://127.0.0.1:8786")


def test_only_the_offline_traceweaver_runs_on_dask(shop):
    _, blind, graph, _ = shop
    with pytest.raises(ConfigError, match="only the offline traceweaver"):
        run_algorithm("wap5", blind, graph, dask="tcp://127.0.0.1:8786")
    with pytest.raises(ConfigError, match="give its scheduler"):
        run_algorithm("traceweaver", blind, graph, window_ns=10**9)


def test_a_worker_killed_mid_round_loses_nothing(reviews, caplog):
    """A worker process killed (``kill -9``) while the parts are solved takes the tables it
    was sent: the parts it held are sent again to the worker left, and the round's result is
    the one-run result."""
    distributed = pytest.importorskip("distributed")
    blind, graph, whole = reviews
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        distributed.Client(cluster, set_as_default=False) as client,
    ):
        killed: list[str] = []

        def kill_a_holder() -> bool:
            if not killed:
                holder = next(w for held in client.who_has().values() for w in held)
                os.kill(client.run(os.getpid, workers=[holder])[holder], signal.SIGKILL)
                killed.append(holder)
            return False

        with caplog.at_level(logging.WARNING, "tacit.reconstruct"):
            there = solve_parts(client, blind, graph, FAST, meanwhile=kill_a_holder)
    assert killed and "sending them again" in caplog.text
    assert_same(there, whole)
