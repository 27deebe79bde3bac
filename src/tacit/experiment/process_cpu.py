"""The CPU a process and the processes it started have taken, as the experiments and the
benchmarks count a service's cost (a service with a second core starts a process that builds
its rows: :mod:`tacit.serve.group_rows`)."""

from __future__ import annotations

from contextlib import suppress


def tree_cpu_s(pid: int) -> tuple[float, float]:
    """User and system CPU seconds process ``pid`` has taken itself, and those its descendants
    still running have taken (one that ended meanwhile counts nothing)."""
    import psutil

    process = psutil.Process(pid)
    own = sum(process.cpu_times()[:2])
    started = 0.0
    for child in process.children(recursive=True):
        with suppress(psutil.NoSuchProcess):
            started += sum(child.cpu_times()[:2])
    return own, started
