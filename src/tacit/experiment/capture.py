"""Packet capture with tcpdump for the live experiments, and the process handling they share.

The live experiments (Pirate's web and memcached runs on loopback) need a vantage point that
records packets while clients and servers run. tcpdump (Debian's package) does it: ``-U`` and
``--immediate-mode`` write every packet as it arrives, ``-s 0`` keeps whole packets, and the
kernel's drop count, printed on exit, says whether the capture is complete. A capture counts
as started once tcpdump prints "listening on" (the socket is bound and the filter installed),
so nothing sent afterwards is missed.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from tacit.errors import ConfigError

START_TIMEOUT = 10.0
"""Seconds to wait for tcpdump's "listening on" before giving up."""
STOP_TIMEOUT = 10.0
"""Seconds to wait for a process to exit after it was asked to."""

BUFFER_KIB = 131_072
"""tcpdump's kernel buffer (``-B``, KiB). In immediate mode libpcap gives each packet a ring
slot as large as the snap length (up to the interface MTU, 64 KiB on loopback), so the 2 MiB
default holds a few dozen packets and drops bursts when tcpdump is not scheduled in time. 128
MiB holds about 2,000, room for the bursts of the loopback experiments (smaller buffers drop
packets when tcpdump waits for a core)."""

_COUNT = re.compile(r"^(\d+) packets? (captured|received by filter|dropped by kernel)")


@dataclass(frozen=True)
class CaptureStats:
    """tcpdump's closing counts: packets written, seen by the filter, dropped by the kernel."""

    captured: int
    received: int
    dropped: int

    def as_dict(self) -> dict:
        return {"captured": self.captured, "received": self.received, "dropped": self.dropped}


def stop_process(
    proc: subprocess.Popen, sig: int = signal.SIGTERM, timeout: float = STOP_TIMEOUT
) -> int:
    """Send ``sig`` to ``proc``'s process group (it must have been started with
    ``start_new_session=True``), wait up to ``timeout`` seconds, then kill what is left of the
    group. Returns the exit code; safe to call on a process that has already exited.
    """
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    return proc.wait()


def start_listening(
    command: list[str], host: str, port: int, name: str, timeout_s: float
) -> subprocess.Popen:
    """Start ``command`` (a server that will listen on ``host:port``) in its own process group
    and wait until it accepts connections; a server that exits or does not listen within
    ``timeout_s`` is stopped and a :class:`ConfigError` gives what it said. Stop it with
    :func:`stop_process`."""
    proc = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
    )
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            socket.create_connection((host, port), timeout=1).close()
            return proc
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                stop_process(proc)
                said = proc.stderr.read().decode(errors="replace").strip() if proc.stderr else ""
                raise ConfigError(f"{name} did not start on {host}:{port}: {said}") from None
            time.sleep(0.02)


class Capture:
    """tcpdump writing the packets matching ``bpf`` on ``interface`` (of network namespace
    ``namespace``, when given) to ``path``, with a kernel buffer of ``buffer_kib``, and
    timestamps in nanoseconds when ``nanoseconds`` (microseconds otherwise, libpcap's default).

    Use as a context manager, or call :meth:`start` and :meth:`stop`; :meth:`stop` is
    idempotent and always leaves no tcpdump behind. Raises :class:`ConfigError` when tcpdump is
    missing or may not capture (with tcpdump's own message).
    """

    def __init__(
        self,
        path: str | Path,
        bpf: str,
        interface: str = "lo",
        buffer_kib: int = BUFFER_KIB,
        namespace: str | None = None,
        nanoseconds: bool = False,
    ) -> None:
        self.path = Path(path)
        self.nanoseconds = nanoseconds
        self.namespace = namespace
        self.buffer_kib = buffer_kib
        self.bpf = bpf
        self.interface = interface
        self.stats: CaptureStats | None = None
        self._proc: subprocess.Popen | None = None
        self._stderr: list[str] = []
        self._listening = threading.Event()
        self._reader: threading.Thread | None = None

    def command(self) -> list[str]:
        tcpdump = shutil.which("tcpdump")
        if tcpdump is None:
            raise ConfigError("packet capture needs tcpdump, which is not installed (PATH)")
        cmd = [tcpdump, "-i", self.interface, "-U", "-s", "0", "--immediate-mode", "-n"]
        cmd += ["-B", str(self.buffer_kib)]
        if self.nanoseconds:
            cmd.append("--time-stamp-precision=nano")
        if os.geteuid() == 0:
            # As root, Debian's tcpdump drops to user "tcpdump" before opening the file, which
            # then may not write to a private directory; keep the identity we were started with.
            cmd += ["-Z", "root"]
        cmd = [*cmd, "-w", str(self.path), self.bpf]
        return ["ip", "netns", "exec", self.namespace, *cmd] if self.namespace else cmd

    def start(self) -> Capture:
        """Start tcpdump and return once it is listening."""
        self._proc = subprocess.Popen(
            self.command(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self._reader = threading.Thread(target=self._read_stderr, daemon=True)
        self._reader.start()
        deadline = time.monotonic() + START_TIMEOUT
        while not self._listening.wait(0.02):
            if self._proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                said = " ".join(line.strip() for line in self._stderr) or "no message"
                raise ConfigError(f"tcpdump could not capture on {self.interface}: {said}")
        return self

    def _read_stderr(self) -> None:
        assert self._proc is not None and self._proc.stderr is not None
        for line in self._proc.stderr:
            self._stderr.append(line)
            if "listening on" in line:
                self._listening.set()

    def stop(self) -> CaptureStats | None:
        """Stop tcpdump with SIGINT (so that it flushes the file and prints its counts) and
        return those counts; None when it never started listening."""
        if self._proc is None:
            return self.stats
        stop_process(self._proc, signal.SIGINT)
        if self._reader is not None:
            self._reader.join(STOP_TIMEOUT)
        self._proc = None
        counts = {}
        for line in self._stderr:
            m = _COUNT.match(line.strip())
            if m:
                counts[m.group(2)] = int(m.group(1))
        if len(counts) == 3:
            self.stats = CaptureStats(
                counts["captured"], counts["received by filter"], counts["dropped by kernel"]
            )
        return self.stats

    def __enter__(self) -> Capture:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


@functools.cache
def capture_unavailable(interface: str = "lo") -> str | None:
    """Why packets cannot be captured on ``interface`` here (None when they can): tcpdump is
    missing, or starting a capture failed (no permission, no such interface). For tests to skip
    with that reason."""
    try:
        with tempfile.TemporaryDirectory() as d, Capture(Path(d) / "probe.pcap", "tcp", interface):
            pass
    except ConfigError as e:
        return str(e)
    return None
