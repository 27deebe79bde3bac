"""Shared fixtures (the real data in ../shared/data, skipped with a reason when absent) and the
settings of every property test."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import settings

# Hypothesis fails an example that takes over 200 ms by default: on a loaded machine that is a
# slow example, not a wrong one, so no property test has a deadline.
settings.register_profile("tacit", deadline=None)
settings.load_profile("tacit")

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """``../shared/data`` beside the checkout; tests using it skip when it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real data absent: {SHARED_DATA} not found (clone with ../shared beside it)")
    return SHARED_DATA


SLOWEST_FIRST = [
    "serve/test_ingest_reconstruct.py",
    "fuzz/test_fuzz_commands.py",
    "realdata/test_traceweaver_real.py",
    "test_docs_commands.py",
    "serve/test_scale_out.py",
    "serve/test_durability.py",
    "serve/test_web_page.py",
    "serve/test_query_api.py",
    "formats/test_capture_stream.py",
    "reconstruct/test_online.py",
    "reconstruct/test_scaleout.py",
    "serve/test_dask_rounds.py",
    "cli/test_terminal.py",
    "serve/test_callgraph_learning.py",
    "formats/test_roundtrip.py",
    "formats/test_hpack_decoder.py",
    "serve/test_store_docs.py",
    "formats/test_otlp_json_fast.py",
    "cli/test_cli.py",
    "oneway_latency/test_protocol_roundtrip.py",
    "reconstruct/test_trace_stream.py",
    "cli/test_standard_streams.py",
    "cli/test_split_files_cli.py",
    "serve/test_capture_source.py",
    "experiment/test_otel_app.py",
    "test_wheel.py",
    "formats/test_otlp_wire.py",
    "reconstruct/test_traceweaver_sim.py",
    "serve/test_envoy_feed.py",
    "formats/test_pcap.py",
    "response_latency/test_estimator.py",
    "serve/test_online_feed.py",
    "cli/test_reconstruct_stream_cli.py",
    "serve/test_latency.py",
    "oneway_latency/test_agent_security.py",
    "response_latency/test_mode_sum.py",
    "serve/test_probability.py",
    "causal_paths/test_linking.py",
    "serve/test_retention.py",
    "serve/test_receivers.py",
    "cli/test_common.py",
    "reconstruct/test_assign.py",
    "cli/test_diagnose_traces_cli.py",
    "cli/test_reconstruct_dask_cli.py",
    "cli/test_diagnose_subsets_cli.py",
    "reconstruct/test_blind_callgraph.py",
    "realdata/test_trace_stream_real.py",
    "cli/test_diagnose_syslog_cli.py",
    "cli/test_oneway_agent_cli.py",
    "simulate/test_microservices.py",
    "cli/test_latency_cli.py",
    "diagnosis/test_syslog_causality.py",
    "oneway_latency/test_agent.py",
    "reconstruct/test_stream_pipeline.py",
    "cli/test_paths_cli.py",
]
"""The test files that take longest, longest first (8–45 s down to 5 s of one worker's time
under ``make test``, measured 2026-11-29, and the scale-out files 2026-11-30; the other ~100
files take under 5 s each)."""


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In a parallel run's workers (``make test``: ``-n 3 --dist loadfile
    --no-loadscope-reorder``, which hands out whole files in this order, each when a worker is
    about to run out), the slowest files come first and the many short ones after them in
    their usual order: the short ones then even out the workers' ends. In collection order the
    slow serve tests and the wheel's build came last, and one worker idled for up to 40 s
    while the others finished them. Only the order changes, and only under xdist."""
    if not hasattr(config, "workerinput"):
        return
    rank = {name: k for k, name in enumerate(SLOWEST_FIRST)}
    here = Path(__file__).parent

    def slowness(item: pytest.Item) -> int:
        try:
            return rank.get(item.path.relative_to(here).as_posix(), len(rank))
        except ValueError:
            return len(rank)

    items.sort(key=slowness)  # stable: within a file, and among the rest, the order stays


def pytest_sessionstart(session: pytest.Session) -> None:
    """In the controlling process of a parallel run (``-n``) of a checkout where no kernel is
    cached yet, compile the kernels once before the workers start (:mod:`kernel_warmup`)."""
    config = session.config
    if hasattr(config, "workerinput") or not config.getoption("numprocesses", None):
        return
    from kernel_warmup import compile_kernels

    compile_kernels()
