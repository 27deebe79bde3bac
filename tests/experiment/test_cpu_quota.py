"""A CPU quota holds a busy process to its fraction of a core, and leaves no group behind."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil
import pytest

from tacit.errors import ConfigError
from tacit.experiment.cpu_quota import _hierarchy, cpu_quota, cpu_quota_unavailable


@pytest.fixture
def busy():
    proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    yield proc
    proc.kill()
    proc.wait()


def _cpu_s(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


def test_a_busy_process_gets_its_quota_and_the_group_goes(busy):
    reason = cpu_quota_unavailable()
    if reason:
        pytest.skip(f"no CPU quota here: {reason}")
    found = _hierarchy()
    assert found is not None
    group = found[0] / f"tacit-quota-{busy.pid}"
    with cpu_quota(busy.pid, 0.25):
        assert str(busy.pid) in (group / "cgroup.procs").read_text().split()
        cpu0, t0 = _cpu_s(busy.pid), time.monotonic()
        time.sleep(1.0)
        share = (_cpu_s(busy.pid) - cpu0) / (time.monotonic() - t0)
    assert share < 0.5  # a busy loop alone takes a whole core
    assert not group.exists()
    assert busy.poll() is None


@pytest.mark.parametrize("cores", [0, -1, 1000])
def test_a_quota_out_of_range_is_refused(cores):
    refused = pytest.raises(ConfigError, match="not between 0 and the CPU count")
    with refused, cpu_quota(os.getpid(), cores):
        pass
