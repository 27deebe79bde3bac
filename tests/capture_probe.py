"""Whether this machine can capture packets, asked of the system rather than of tacit: a
capture that tacit fails to start is then a test failure, not a skip."""

from __future__ import annotations

import shutil
import socket

import pytest


def capture_refused(tool: bool = True) -> str | None:
    """Why this process cannot capture packets (None: it can): the kernel refuses it a packet
    socket, or (``tool``) tcpdump is not installed."""
    if tool and shutil.which("tcpdump") is None:
        return "tcpdump is not installed"
    try:
        socket.socket(socket.AF_PACKET, socket.SOCK_RAW).close()
    except PermissionError as e:
        return f"packet capture not permitted here: {e}"
    return None


def needs_capture(tool: bool = True) -> pytest.MarkDecorator:
    """Skips a test that captures packets (through tcpdump when ``tool``) where it cannot."""
    reason = capture_refused(tool)
    return pytest.mark.skipif(reason is not None, reason=str(reason))
