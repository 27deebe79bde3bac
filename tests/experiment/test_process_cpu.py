import subprocess
import sys

from tacit.experiment.process_cpu import tree_cpu_s

BUSY = """
import sys, time
while time.process_time() < 0.3:
    pass
print("busy", flush=True)
sys.stdin.read()
"""
WAITING = """
import subprocess, sys
child = subprocess.Popen([sys.executable, sys.argv[1]], stdout=subprocess.PIPE, text=True)
print(child.stdout.readline().strip(), flush=True)
sys.stdin.read()
"""


def test_a_process_trees_cpu_is_its_own_and_that_of_what_it_started(tmp_path):
    """A parent that waits while the child it started spins for 0.3 s of CPU: the spin is
    counted as started, not as the parent's own."""
    (tmp_path / "busy.py").write_text(BUSY)
    (tmp_path / "waiting.py").write_text(WAITING)
    parent = subprocess.Popen(
        [sys.executable, str(tmp_path / "waiting.py"), str(tmp_path / "busy.py")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert parent.stdout.readline().strip() == "busy"
        own, started = tree_cpu_s(parent.pid)
    finally:
        parent.stdin.close()  # both read it to its end, and then end
        parent.wait()
    assert started >= 0.25 and own < started  # counted in clock ticks of 10 ms
