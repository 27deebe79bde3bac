"""``tacit demo --serve``: the service with the simulated shop app sending it spans, live.

The call graph is learned from the app's test requests (TraceWeaver §5.2.1: one at a time);
then the app runs at ``rate`` requests/s, ten simulated seconds at a time, each sent by the
OpenTelemetry SDK's exporter as its spans end in real time (:mod:`tacit.experiment.otlp_load`),
every call without its parent (:func:`~tacit.experiment.otlp_load.lost_context`): the service
keeps a parent its sender gives, and the demo shows what it infers.

The latency charts get simulated inputs too: the request-stream simulator's packets as a
capture file for Pirate, and two RDA agents on loopback replaying the two sides of a simulated
stream, the receiver's records written as its ``--output`` file, which the service follows.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import threading
import time
from pathlib import Path
from typing import Any

from tacit.experiment.otlp_load import lost_context, send_spans
from tacit.formats.pcap_write import write_packets
from tacit.oneway_latency.agent import Agent
from tacit.oneway_latency.capture_sources import PcapSource
from tacit.oneway_latency.simulate import StreamParams, simulate_stream, write_captures
from tacit.reconstruct.callgraph import learn_callgraph
from tacit.response_latency import PirateParams
from tacit.serve.config import ServeConfig
from tacit.serve.service import Service
from tacit.simulate import load_app, simulate
from tacit.simulate.request_streams import RequestStreamParams, simulate_requests

log = logging.getLogger("tacit.serve")

STRETCH_S = 10.0
"""Simulated seconds sent per round."""
NS = 10**9
REQUESTS = RequestStreamParams(clients=8, duration_ns=10 * NS, seed=1)
"""The Pirate capture: 8 clients of one server for 10 s, one estimate per second."""
ONEWAY = StreamParams(rate_pps=100_000, duration_ns=NS // 5, loss_rate=1e-3, reorder_rate=0.2)
"""The RDA stream: 20 intervals of 10 ms."""
AGENTS_S = 60.0
"""How long stopping the demo waits for the RDA agents (about a second's work when idle)."""


class DemoLoad(threading.Thread):
    """Sends the shop app's spans to ``endpoint`` until :meth:`stop`; ``agents`` is the thread
    of the RDA agents, whose stream is finite."""

    def __init__(self, endpoint: str, rate: float, agents: threading.Thread) -> None:
        super().__init__(name="tacit-demo-load", daemon=True)
        self.endpoint = endpoint
        self.rate = rate
        self.agents = agents
        self.sent = 0
        self._stop_event = threading.Event()

    def stop(self) -> None:
        """Stop sending (before the next batch), and wait up to ``AGENTS_S`` for the RDA agents
        to publish their last record, so that a run of a few seconds on a busy machine still
        stores all of them (the service reads the results file once more as it stops)."""
        self._stop_event.set()
        self.join()
        self.agents.join(AGENTS_S)
        if self.agents.is_alive():
            log.warning("demo: the RDA agents had not finished after %g s more", AGENTS_S)

    def run(self) -> None:
        app = load_app()
        seed = 1
        while not self._stop_event.is_set():
            # every call's context lost, so that each is reconstructed, as the demo shows
            spans = lost_context(simulate(app, self.rate, duration_s=STRETCH_S, seed=seed))
            shift = time.time_ns() - int(spans.start.min())
            sent = send_spans(
                spans, self.endpoint, paced=True, shift_ns=shift, stop=self._stop_event
            )
            self.sent += sent.acknowledged
            if sent.failed:
                log.warning("demo load: %d spans were not acknowledged", sent.failed)
            seed += 1


def _rda_agents(out_dir: Path, results: Path) -> None:
    """Two RDA agents on loopback replaying the two sides of a simulated stream; the receiver's
    records appended to ``results`` as it publishes them."""
    sender_pcap, receiver_pcap = out_dir / "rda-sender.pcap", out_dir / "rda-receiver.pcap"
    write_captures(simulate_stream(ONEWAY), sender_pcap, receiver_pcap)
    key = secrets.token_bytes(32)
    with results.open("w") as sink:

        def publish(record: dict[str, Any]) -> None:
            sink.write(json.dumps(record) + "\n")
            sink.flush()

        async def run() -> None:
            source = PcapSource(receiver_pcap)
            receiver = Agent("receiver", ("127.0.0.1", 0), key, source, publish=publish)
            port = await receiver.listen()
            sender = Agent("sender", ("127.0.0.1", port), key, PcapSource(sender_pcap))
            await asyncio.gather(receiver.run(), sender.run())

        asyncio.run(run())


def demo_service(out_dir: Path, config: ServeConfig, rate: float) -> tuple[Service, DemoLoad]:
    """A started service storing into ``out_dir`` and the load that feeds it (started), with
    the latency inputs of the module docstring."""
    out_dir.mkdir(parents=True, exist_ok=True)
    callgraph = learn_callgraph(simulate(load_app(), 5, n_requests=200, seed=0))
    callgraph.save(out_dir / "callgraph.yaml")
    capture, results = out_dir / "requests.pcap", out_dir / "rda.jsonl"
    write_packets(capture, simulate_requests(REQUESTS).packets)
    results.write_text("")  # the agents append to it once they publish
    config = config.updated(
        database=out_dir / "tacit.duckdb",
        pirate_pcap=capture,
        pirate=PirateParams(epoch_ns=NS),
        rda_results=(results,),
    )
    svc = Service(config, callgraph).start()
    agents = threading.Thread(
        target=_rda_agents, args=(out_dir, results), name="tacit-demo-rda", daemon=True
    )
    agents.start()
    load = DemoLoad(f"http://127.0.0.1:{svc.http_port}/v1/traces", rate, agents)
    load.start()
    return svc, load
