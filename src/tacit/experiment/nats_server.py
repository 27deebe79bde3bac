"""A NATS server with JetStream for the shared log of ``tacit serve``'s roles
(:mod:`tacit.serve.span_log`), started for a test, a bench or the scale-out demo."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path

from tacit.errors import ConfigError
from tacit.experiment.capture import stop_process

START_TIMEOUT_S = 10.0


def nats_unavailable() -> str | None:
    """Why a NATS server cannot be started here, or None."""
    if shutil.which("nats-server") is None:
        return "nats-server is not installed (Debian: apt install nats-server)"
    return None


def start_nats(port: int, store_dir: Path, host: str = "127.0.0.1") -> subprocess.Popen:
    """Start ``nats-server`` with JetStream storing in ``store_dir`` on ``host:port``, in its
    own process group, and wait until it accepts connections; stop it with
    :func:`.capture.stop_process` (a kill -9 keeps what it acknowledged: it writes each message
    before it acknowledges it)."""
    reason = nats_unavailable()
    if reason:
        raise ConfigError(reason)
    proc = subprocess.Popen(
        ["nats-server", "-a", host, "-p", str(port), "-js", "-sd", str(store_dir)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        try:
            socket.create_connection((host, port), timeout=1).close()
            return proc
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                stop_process(proc)
                said = proc.stderr.read().decode(errors="replace").strip() if proc.stderr else ""
                raise ConfigError(f"nats-server did not start on {host}:{port}: {said}") from None
            time.sleep(0.02)
