"""A process held to a fraction of a core by the kernel's CFS bandwidth control, in a cgroup of
its own: the limit a container runtime sets for ``--cpus`` and Kubernetes for
``resources.limits.cpu``. The scale-out bench uses it to check the capacity model below one
core, as operators size a role's pods.

Both cgroup hierarchies are supported: version 2 (``cpu.max`` in a group under
``/sys/fs/cgroup``) and version 1 (``cpu.cfs_quota_us`` under ``/sys/fs/cgroup/cpu``). Making a
group needs root or a delegated hierarchy; :func:`cpu_quota_unavailable` says why not.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from tacit.errors import ConfigError

ROOT = Path("/sys/fs/cgroup")
PERIOD_US = 100_000
"""The scheduler's accounting period: the group runs at most ``cores × PERIOD_US`` in each."""


def _hierarchy() -> tuple[Path, bool] | None:
    """The directory new groups go in and whether it is cgroup version 2, or None."""
    if (ROOT / "cgroup.controllers").exists():
        return ROOT, True
    if (ROOT / "cpu" / "cpu.cfs_quota_us").exists():
        return ROOT / "cpu", False
    return None


def cpu_quota_unavailable() -> str | None:
    """Why a CPU quota cannot be set here, or None."""
    found = _hierarchy()
    if found is None:
        return f"no cgroup CPU controller under {ROOT}"
    parent, v2 = found
    if v2 and "cpu" not in (parent / "cgroup.subtree_control").read_text().split():
        return f"the cpu controller is not enabled for groups under {parent}"
    if not os.access(parent, os.W_OK):
        return f"{parent} is not writable (needs root or a delegated cgroup)"
    return None


@contextmanager
def cpu_quota(pid: int, cores: float) -> Iterator[None]:
    """Hold process ``pid`` (every thread, and children it starts) to ``cores`` of CPU time
    while the block runs; then put it back in the root group and remove the group."""
    if not 0 < cores <= (os.cpu_count() or 1):
        raise ConfigError(f"a CPU quota of {cores} cores is not between 0 and the CPU count")
    reason, found = cpu_quota_unavailable(), _hierarchy()
    if reason or found is None:
        raise ConfigError(reason or "no cgroup CPU controller")
    parent, v2 = found
    group = parent / f"tacit-quota-{pid}"
    group.mkdir()
    quota = round(cores * PERIOD_US)
    try:
        if v2:
            (group / "cpu.max").write_text(f"{quota} {PERIOD_US}\n")
        else:
            (group / "cpu.cfs_period_us").write_text(f"{PERIOD_US}\n")
            (group / "cpu.cfs_quota_us").write_text(f"{quota}\n")
        (group / "cgroup.procs").write_text(f"{pid}\n")
        yield
    finally:
        for left in (group / "cgroup.procs").read_text().split():
            with suppress(ProcessLookupError):  # it ended meanwhile
                (parent / "cgroup.procs").write_text(f"{left}\n")
        group.rmdir()
