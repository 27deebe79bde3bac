"""``tacit demo --serve``: the service with the simulated shop app sending it spans, live.

The call graph is learned from the app's test requests (TraceWeaver §5.2.1: one at a time);
then the app runs at ``rate`` requests/s, ten simulated seconds at a time, each sent by the
OpenTelemetry SDK's exporter as its spans end in real time (:mod:`tacit.experiment.otlp_load`).
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

from tacit.experiment.otlp_load import send_spans
from tacit.reconstruct.callgraph import learn_callgraph
from tacit.serve.config import ServeConfig
from tacit.serve.service import Service
from tacit.simulate import load_app, simulate

log = logging.getLogger("tacit.serve")

STRETCH_S = 10.0
"""Simulated seconds sent per round."""


class DemoLoad(threading.Thread):
    """Sends the shop app's spans to ``endpoint`` until :meth:`stop`."""

    def __init__(self, endpoint: str, rate: float) -> None:
        super().__init__(name="tacit-demo-load", daemon=True)
        self.endpoint = endpoint
        self.rate = rate
        self.sent = 0
        self._stop_event = threading.Event()

    def stop(self) -> None:
        """Stop sending (before the next batch)."""
        self._stop_event.set()
        self.join()

    def run(self) -> None:
        app = load_app()
        seed = 1
        while not self._stop_event.is_set():
            spans = simulate(app, self.rate, duration_s=STRETCH_S, seed=seed)
            shift = time.time_ns() - int(spans.start.min())
            sent = send_spans(
                spans, self.endpoint, paced=True, shift_ns=shift, stop=self._stop_event
            )
            self.sent += sent.acknowledged
            if sent.failed:
                log.warning("demo load: %d spans were not acknowledged", sent.failed)
            seed += 1


def demo_service(out_dir: Path, config: ServeConfig, rate: float) -> tuple[Service, DemoLoad]:
    """A started service storing into ``out_dir`` and the load that feeds it (started)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    callgraph = learn_callgraph(simulate(load_app(), 5, n_requests=200, seed=0))
    callgraph.save(out_dir / "callgraph.yaml")
    svc = Service(config.updated(database=out_dir / "tacit.duckdb"), callgraph).start()
    load = DemoLoad(f"http://127.0.0.1:{svc.http_port}/v1/traces", rate)
    load.start()
    return svc, load
