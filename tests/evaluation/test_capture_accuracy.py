"""A simulated app's RPCs as HTTP/1.1 and gRPC packets, read back into spans: every RPC is
found, labelled with the simulator's truth, and reconstructed better than FCFS."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tacit.evaluation.capture_accuracy import evaluate_capture, label_capture
from tacit.formats.capture_spans import ServiceMap, read_capture_spans
from tacit.formats.exchanges import ExchangeParams
from tacit.formats.pcap_write import write_pcap
from tacit.model.roles import infer_roles
from tacit.model.spans import CLIENT, SERVER
from tacit.simulate import load_app, simulate
from tacit.simulate.app_packets import GRPC, HTTP1, REQUEST_ID, app_packets


@pytest.fixture(scope="module")
def app():
    return load_app(None)


def write(spans, path: Path):
    packets = app_packets(spans)
    write_pcap(path, packets.frames, packets.times)
    return packets


def test_every_rpc_is_captured_with_its_truth(app, tmp_path: Path) -> None:
    spans = simulate(app, 100, n_requests=60, seed=2)
    packets = write(spans, tmp_path / "app.pcap")
    assert packets.grpc_services == frozenset(app.services) - {"frontend"}
    got = read_capture_spans(
        tmp_path / "app.pcap",
        ServiceMap(addresses=packets.service_map()),
        params=ExchangeParams(keep_headers=(REQUEST_ID,)),
    )
    rpcs = int((spans.kind == CLIENT).sum() + ((spans.kind == SERVER) & (spans.link < 0)).sum())
    assert got.accounting.as_dict() == {
        "exchanges": rpcs,
        "paired": rpcs,
        "spans": 2 * rpcs,
        "left_out": {},
    }
    assert got.exchanges.accounting.unparsed == {}
    protocols = got.exchanges.accounting.connections
    assert set(protocols) == {"http", "http2"}
    truth, acc = label_capture(got, REQUEST_ID, packets.parent_of())
    assert acc.labelled == rpcs and acc.parents_missing == 0

    # The same traces as the simulator's: per trace, the services of its server spans.
    def shapes(table):
        s = table.strings
        out = {}
        for t in np.unique(table.trace):
            rows = np.flatnonzero((table.trace == t) & (table.kind == SERVER))
            out.setdefault(len(rows), []).append(sorted(s[int(v)] for v in table.service[rows]))
        return {k: sorted(v) for k, v in out.items()}

    assert shapes(truth) == shapes(infer_roles(spans).spans)
    # Each captured span times the simulated client span of its RPC (or the root's server span).
    rows = np.array([int(truth.strings[c].split("/")[0]) for c in truth.span_id])
    assert (truth.start == spans.start[rows]).all() and (truth.end == spans.end[rows]).all()


def test_protocols_can_be_chosen(app, tmp_path: Path) -> None:
    spans = simulate(app, 50, n_requests=10, seed=4)
    packets = app_packets(spans, {s: HTTP1 for s in app.services})
    assert packets.grpc_services == frozenset()
    assert app_packets(spans, {"catalog": GRPC}).grpc_services >= {"catalog"}


def test_reconstruction_from_packets_beats_fcfs(app, tmp_path: Path) -> None:
    """One capture point gives a server span its caller's times (network delays included), and
    300 requests teach the delay distributions less than thousands: below the spans' own 98%
    here, but far above FCFS (bench_capture measures both paths side by side)."""
    write(simulate(app, 2, n_requests=60, seed=5), tmp_path / "test.pcap")
    prod = write(simulate(app, 200, n_requests=300, seed=7), tmp_path / "prod.pcap")
    names = ServiceMap(addresses=prod.service_map())
    doc = evaluate_capture(
        tmp_path / "prod.pcap", tmp_path / "test.pcap", REQUEST_ID, prod.parent_of(), names
    )
    acc = doc["accuracy"]
    assert doc["traces"] == 300 and acc["traceweaver"] > acc["fcfs"] + 0.15, acc
