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
