"""The first-run notice: whether numba has cached tacit's kernels yet."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tacit.compiled import grown
from tacit.kernel_cache import kernels_cached


def test_kernels_count_as_cached_once_numba_wrote_an_index(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    assert not kernels_cached()
    (tmp_path / "tacit" / "formats").mkdir(parents=True)
    (tmp_path / "tacit" / "formats" / "pcap._decode-704.py311.nbi").write_bytes(b"")
    assert kernels_cached()


@pytest.mark.parametrize("cache_dir", ["", None])
def test_without_a_cache_dir_the_package_is_searched(monkeypatch, cache_dir) -> None:
    """The suite has run compiled kernels by now, so their index files are beside them."""
    if cache_dir is None:
        monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    else:
        monkeypatch.setenv("NUMBA_CACHE_DIR", cache_dir)
    grown(np.zeros(1), 2)  # compiled (and cached beside its module) at the latest now
    assert kernels_cached()
