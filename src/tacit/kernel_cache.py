"""Whether numba has cached tacit's compiled kernels yet: the command line asks before every
command, to tell a first run (whose kernels compile before it starts) apart, so this module
imports nothing of numba's."""

from __future__ import annotations

import os
from pathlib import Path


def kernels_cached() -> bool:
    """Whether numba has cached any of tacit's compiled kernels (``cache=True`` writes an index
    file per kernel beside its module, or under ``NUMBA_CACHE_DIR``); if not, this is the first
    run and the kernels a command uses compile before it starts (tens of seconds, once)."""
    root = os.environ.get("NUMBA_CACHE_DIR") or Path(__file__).parent
    return next(Path(root).rglob("*.nbi"), None) is not None
