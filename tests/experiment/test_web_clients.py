"""The clients' driver (:func:`tacit.experiment.web_clients.run_clients`) against a server that
answers every line after a fixed delay, with a protocol whose every tree is one request."""

from __future__ import annotations

import asyncio
import socketserver
import threading
import time
from dataclasses import dataclass

import numpy as np

from tacit.experiment.web_clients import ClientParams, run_clients

SERVER_DELAY = 0.02
ROOT_COST = 0.01


class _SlowAnswers(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        for line in self.rfile:
            time.sleep(SERVER_DELAY)
            self.wfile.write(b"ok " + line)


@dataclass
class _SlowRoots:
    """Draws each root in ``ROOT_COST`` seconds, blocking, as an interpreter's slow draw would."""

    drawn: int = 0

    def root(self, rng: np.random.Generator, now: float) -> str:
        time.sleep(ROOT_COST)
        self.drawn += 1
        return f"r{self.drawn}"

    def request(self, target: str) -> bytes:
        return target.encode() + b"\n"

    async def response(self, reader: asyncio.StreamReader, target: str) -> tuple[int, list[str]]:
        line = await reader.readline()
        assert line == b"ok " + target.encode() + b"\n"
        return len(line), []


def test_the_next_root_is_drawn_while_the_last_response_is_awaited():
    """The time to draw and encode a root falls inside the wait for the previous tree's last
    response, not between that response and the next request, where Pirate would count it
    as response latency (§3.1). Drawn after the response, each turnaround would be at least
    ``ROOT_COST``."""
    with socketserver.ThreadingTCPServer(("127.0.0.1", 0), _SlowAnswers) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        protocol = _SlowRoots()
        log = run_clients(protocol, server.server_address, 0.5, ClientParams(1, 1))
        server.shutdown()
    assert len(log) >= 10
    assert [log.strings[int(t)] for t in log.target] == [f"r{i + 1}" for i in range(len(log))]
    assert protocol.drawn == len(log) + 1  # one drawn ahead that the run's end left unsent
    turnaround = (log.sent[1:] - log.received[:-1]) / 1e9
    assert np.median(turnaround) < ROOT_COST / 2, turnaround
    assert np.all(log.latency / 1e9 >= SERVER_DELAY)
