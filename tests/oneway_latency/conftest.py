"""The two sides of a simulated stream as pcap files, shared by the agents' tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from oneway_streams import agent_captures


@pytest.fixture(scope="module")
def pcaps(tmp_path_factory) -> tuple[Path, Path]:
    return agent_captures(str(tmp_path_factory.mktemp("agent")))
