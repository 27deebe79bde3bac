"""A memory budget, checked before an allocation whose size is a product of an input's
dimensions (requests × call slots, equations × hosts) rather than its length, so that a small
but pathological input gets a one-line error naming it instead of an allocation the machine
cannot satisfy (or one that swaps it to a halt).

The budget is the environment variable ``TACIT_MEMORY_BUDGET`` (bytes, with an optional
``K``/``M``/``G``/``T`` suffix, powers of 1024) or, by default, the memory the system reports
available: ``MemAvailable`` of ``/proc/meminfo`` (Linux), else the physical memory.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence

import numpy as np

from tacit.errors import ConfigError, InputError

ENV = "TACIT_MEMORY_BUDGET"
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def memory_budget() -> int:
    """The bytes one allocation may take (module docstring)."""
    text = os.environ.get(ENV, "").strip().upper().removesuffix("B")
    if text:
        unit = text[-1] if text[-1] in _UNITS else ""
        try:
            value = float(text[: len(text) - len(unit)])
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or value <= 0:
            raise ConfigError(f"{ENV} must be a positive size such as 8G, got {text!r}")
        return int(value * _UNITS[unit])
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def _size(n: float) -> str:
    units = ("B", "KiB", "MiB", "GiB", "TiB")
    k = 0
    while n >= 1024 and k < len(units) - 1:
        n /= 1024
        k += 1
    return f"{n:.1f} {units[k]}"


def check_allocation(
    shape: Sequence[int], dtype: np.dtype | type, what: str, sources: Sequence[str] = ()
) -> None:
    """Raise :class:`InputError` naming ``sources`` (the input files) when an array of
    ``shape`` and ``dtype`` (``what`` it holds, e.g. "3 requests × 2 call slots") would take
    more than :func:`memory_budget`."""
    need = math.prod(int(d) for d in shape) * np.dtype(dtype).itemsize
    budget = memory_budget()
    if need > budget:
        raise InputError(
            f"{what} would need {_size(need)}, more than the {_size(budget)} of memory available "
            f"(set {ENV} to change the budget)",
            path=", ".join(sources) or None,
        )
