"""Spans from eBPF agents (Beyla's OTLP export) as blind spans, RPCs paired by connection and
time, checked against the application's truth."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from agent_logs import SERVICE_MAP_YAML, T0, beyla_document, truth
from tacit.errors import ConfigError, InputError
from tacit.formats import observe, read_spans
from tacit.formats.capture_spans import read_service_map
from tacit.formats.ebpf_spans import read_ebpf_spans
from tacit.formats.rpc_pairing import NOTHING_OPPOSITE
from tacit.model.spans import CLIENT, SERVER, SpanTable

N, GAP_MS = 40, 2.0
INTERNAL = "internal spans left out (not one side of a request on the wire)"


@pytest.fixture()
def beyla(tmp_path: Path) -> Path:
    path = tmp_path / "beyla.json"
    path.write_text(json.dumps(beyla_document(truth(N, GAP_MS))))
    (tmp_path / "services.yaml").write_text(SERVICE_MAP_YAML)
    return path


def true_pairs() -> set[tuple[int, int]]:
    """(client start, server start) of every RPC whose both sides have an agent."""
    calls = truth(N, GAP_MS)
    server = {(c.request, c.role): c.start for c in calls if c.kind == "server"}
    return {
        (c.start, server[c.request, c.role])
        for c in calls
        if c.kind == "client" and (c.request, c.role) in server
    }


def found_pairs(spans: SpanTable) -> set[tuple[int, int]]:
    rows = np.flatnonzero((spans.kind == CLIENT) & (spans.link >= 0))
    assert (spans.kind[spans.link[rows]] == SERVER).all()
    assert (spans.link[spans.link[rows]] == rows).all()
    return {(int(spans.start[r]), int(spans.start[spans.link[r]])) for r in rows}


def test_rpcs_pair_by_connection_and_time_as_the_truth_has_them(beyla: Path) -> None:
    got = read_ebpf_spans(beyla, read_service_map(beyla.parent / "services.yaml"))
    assert found_pairs(got.spans) == true_pairs()
    assert got.accounting == {
        "spans_read": 12 * N,
        INTERNAL: 6 * N,  # Beyla's "in queue" and "processing" under each server span
        "client_spans": 3 * N,
        "server_spans": 3 * N,
        "rpcs_paired": 2 * N,
        f"client spans unpaired: {NOTHING_OPPOSITE}": N,  # to Redis, which has no agent
        f"server spans unpaired: {NOTHING_OPPOSITE}": N,  # from the load generator
    }
    s = got.spans
    rows = {(s.name("service", r), s.name("endpoint", r), int(s.kind[r]), s.name("peer", r))
            for r in range(len(s))}  # fmt: skip
    assert rows == {
        ("frontend", "GET /home", SERVER, "loadgen"),
        ("frontend", "/shop.Catalog/List", CLIENT, "catalog"),
        ("catalog", "/shop.Catalog/List", SERVER, "frontend"),
        ("catalog", "GET", CLIENT, "redis"),
        # the client only saw /cart/7?v=1: the paired server span names the route
        ("frontend", "GET /cart/{id}", CLIENT, "cart"),
        ("cart", "GET /cart/{id}", SERVER, "frontend"),
    }
    assert set(s.strings[i] for i in np.unique(s.instance)) == {
        "frontend-7d9f",
        "catalog-7d9f",
        "cart-7d9f",
    }
    assert (s.trace == -1).all() and (s.parent == -1).all()


def test_without_a_service_map_a_host_name_and_an_address_do_not_meet(beyla: Path) -> None:
    got = read_ebpf_spans(beyla)
    cart = {(c, s) for c, s in true_pairs() if (c - T0) % 2_000_000 == 1_000_000}
    assert cart and found_pairs(got.spans) == true_pairs() - cart
    assert got.accounting[f"client spans unpaired: {NOTHING_OPPOSITE}"] == 2 * N
    s = got.spans
    peers = {s.name("peer", r) for r in np.flatnonzero(s.link < 0)}
    assert peers == {"cart:8080", "10.0.0.7:6379", "10.0.0.9", "10.0.0.1"}


def test_one_export_per_line_reads_the_same(beyla: Path, tmp_path: Path) -> None:
    doc = beyla_document(truth(N, GAP_MS))
    lines = tmp_path / "lines.json"
    lines.write_text("\n".join(json.dumps({"resourceSpans": [rs]}) for rs in doc["resourceSpans"]))
    names = read_service_map(beyla.parent / "services.yaml")
    assert found_pairs(read_ebpf_spans(lines, names).spans) == true_pairs()


def test_read_by_name_through_the_facade_with_the_accounting(beyla: Path) -> None:
    names = read_service_map(beyla.parent / "services.yaml")
    assert len(read_spans(beyla, format="ebpf", services=names)) == 6 * N
    observed, _ = observe([beyla], "ebpf", names)
    assert observed.accounting["rpcs_paired"] == 2 * N
    assert observed.accounting["server"] == observed.accounting["client"] == 3 * N
    with pytest.raises(ConfigError, match="service map goes with the formats ebpf, envoy"):
        read_spans(beyla, format="otlp", services=names)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda s: s.pop("startTimeUnixNano"), "record 4: missing field 'startTimeUnixNano'"),
        (lambda s: s.update(kind=9), "record 4: unknown span kind 9"),
        (
            lambda s: s["attributes"].append(
                {"key": "server.port", "value": {"stringValue": "http"}}
            ),
            "record 4: attribute 'server.port' is not a port number: 'http'",
        ),
    ],
)
def test_a_bad_span_names_file_and_record(tmp_path: Path, change, message: str) -> None:
    doc = beyla_document(truth(1, GAP_MS))
    spans = doc["resourceSpans"][0]["scopeSpans"][0]["spans"]
    change(spans[3])  # the frontend's client span to catalog (after "in queue", "processing")
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(InputError) as e:
        read_ebpf_spans(path)
    assert str(e.value) == f"{path}: {message}"
