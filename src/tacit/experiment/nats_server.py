"""A NATS server with JetStream for the shared log of ``tacit serve``'s roles
(:mod:`tacit.serve.span_log`), started for a test, a bench or the scale-out demo."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from tacit.errors import ConfigError
from tacit.experiment.capture import start_listening

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
    command = ["nats-server", "-a", host, "-p", str(port), "-js", "-sd", str(store_dir)]
    return start_listening(command, host, port, "nats-server", START_TIMEOUT_S)
