"""``tacit reconstruct --dask ADDRESS`` against a local Dask cluster: the same summary and the
same traces as one process; one-line errors for what cannot run there."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from clirun import finish, ok, one_error_line, run_here, start
from tacit.formats.blind import write_blind
from tacit.model.roles import infer_roles
from tacit.reconstruct.callgraph import learn_callgraph
from tacit.simulate import load_app, simulate

distributed = pytest.importorskip("distributed")

COMMON = ("reconstruct", "blind.jsonl", "--callgraph", "cg.yaml", "--seed", "3", "--json")


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("dask-cli")
    app = load_app(None)
    learn_callgraph(infer_roles(simulate(app, 20, n_requests=300, seed=7)).spans).save(
        d / "cg.yaml"
    )
    blind = infer_roles(simulate(app, 200, duration_s=2.0, seed=8, record_threads=False))
    write_blind(d / "blind.jsonl", blind.without_truth())
    return d


@pytest.fixture(scope="module")
def runs(work: Path) -> dict:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        nobody = f"tcp://127.0.0.1:{s.getsockname()[1]}"
    # Threads of this process as workers, reached over TCP by the commands.
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=False, protocol="tcp", dashboard_address=None
    ) as cluster:
        address = cluster.scheduler_address
        # The commands that use no cluster, or fail before reaching it, run in this process
        # while the others run.
        res = finish(
            {
                "dask": start(*COMMON, "--out", "dask.json", "--dask", address, cwd=work),
                "wap5": start(
                    *COMMON, "--out", "w.json", "--algorithm", "wap5", "--dask", address, cwd=work
                ),
                "unreachable": start(
                    *COMMON,
                    "--out",
                    "u.json",
                    "--dask",
                    nobody,
                    cwd=work,
                    env={"DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT": "1s"},
                ),
                "one": run_here(*COMMON, "--out", "one.json", cwd=work),
                "malformed": run_here(*COMMON, "--out", "m.json", "--dask", "localhost", cwd=work),
                "window_alone": run_here(
                    *COMMON, "--out", "x.json", "--dask-window", "1s", cwd=work
                ),
                "window_zero": run_here(
                    *COMMON, "--out", "z.json", "--dask", address, "--dask-window", "0s", cwd=work
                ),
            }
        )
        # What the cluster ran: one task per part.
        res["executed"] = sum(w.state.executed_count for w in cluster.workers.values())
        return res


def test_the_cluster_gives_the_summary_and_traces_of_one_process(runs, work: Path) -> None:
    one = json.loads(ok(runs["one"]).stdout)
    dask = json.loads(ok(runs["dask"]).stdout)
    assert one.pop("out") == "one.json" and dask.pop("out") == "dask.json"
    assert dask == one
    assert one["mapped"] > 0 and one["confidence"]
    assert (work / "dask.json").read_bytes() == (work / "one.json").read_bytes()
    assert runs["executed"] >= 6  # a part per instance


def test_what_cannot_run_on_the_cluster_is_one_line(runs) -> None:
    one_error_line(runs["wap5"], "only the offline traceweaver runs on a Dask cluster")
    one_error_line(runs["unreachable"], "cannot reach the Dask scheduler at tcp://127.0.0.1:")
    one_error_line(runs["malformed"], "bad Dask scheduler address 'localhost'")
    one_error_line(runs["window_alone"], "--dask-window cuts the parts of a --dask run")
    one_error_line(runs["window_zero"], "a window must be longer than 0")
