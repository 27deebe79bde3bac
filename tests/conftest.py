"""Shared fixtures: the real data in ../shared/data, skipped with a reason when absent."""

from __future__ import annotations

from pathlib import Path

import pytest

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """``../shared/data`` beside the checkout; tests using it skip when it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real data absent: {SHARED_DATA} not found (clone with ../shared beside it)")
    return SHARED_DATA


def pytest_sessionstart(session: pytest.Session) -> None:
    """In the controlling process of a parallel run (``-n``) of a checkout where no kernel is
    cached yet, compile the kernels once before the workers start (:mod:`kernel_warmup`)."""
    config = session.config
    if hasattr(config, "workerinput") or not config.getoption("numprocesses", None):
        return
    from kernel_warmup import compile_kernels

    compile_kernels()
