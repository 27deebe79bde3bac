"""Inputs of ``tacit serve``'s latency series for its tests: a capture of the request-stream
simulator for Pirate, and the interval records two real RDA agents publish for the two sides
of a simulated stream."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from oneway_agents import pair
from oneway_streams import agent_captures
from tacit.formats.pcap_write import write_packets
from tacit.response_latency import PirateParams
from tacit.simulate.request_streams import RequestStream, RequestStreamParams, simulate_requests

MS = 1_000_000
SIM = RequestStreamParams(clients=6, duration_ns=6_000 * MS, seed=3)
PIRATE = PirateParams(epoch_ns=1_000 * MS)
"""The paper's parameters with 1 s epochs: a few estimates per connection over the stream."""


def pirate_capture(directory: Path) -> tuple[Path, RequestStream]:
    """The simulated stream (with its truth) and its packets written as a pcap."""
    sim = simulate_requests(SIM)
    path = directory / "requests.pcap"
    write_packets(path, sim.packets)
    return path, sim


def rda_records(directory: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """What the receiver and the sender agent publish (interval records, then a summary) when
    they replay the two sides of the simulated stream."""
    sender, receiver = asyncio.run(pair(agent_captures(str(directory))))
    return receiver.records, sender.records


def json_lines(records: list[dict[str, Any]]) -> str:
    """Records as the agent's ``--output`` file has them."""
    return "".join(json.dumps(r) + "\n" for r in records)
