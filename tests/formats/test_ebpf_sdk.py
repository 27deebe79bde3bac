"""eBPF-style spans as the OpenTelemetry SDK and its OTLP exporter produce them (each span its
own trace, the connection in attributes, as Grafana Beyla reports): read by the eBPF reader,
every client span paired with the server span of its own RPC although the RPCs overlap."""

from __future__ import annotations

from pathlib import Path

from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.trace import SpanKind

from otel_sdk import collector_json_line, provider
from tacit.formats.ebpf_spans import read_ebpf_spans
from tacit.model.spans import CLIENT

T0 = 1_700_000_000_000_000_000
MS = 1_000_000
RPCS = 6


def test_sdk_made_agent_spans_pair_by_connection_and_time(tmp_path: Path) -> None:
    front, front_out = provider("frontend", "frontend-1")
    cart, cart_out = provider("cart", "cart-1")
    ft, ct = front.get_tracer("beyla"), cart.get_tracer("beyla")
    call = {"rpc.system": "grpc", "rpc.method": "/cart.Cart/Add"}
    ends = {"server.address": "10.0.0.2", "server.port": 7070}
    for i in range(RPCS):  # a call every 1 ms, each 2.6 ms long: three in flight at once
        start = T0 + i * MS
        client = ft.start_span(
            "/cart.Cart/Add", Context(), SpanKind.CLIENT, call | ends, start_time=start
        )
        server = ct.start_span(
            "/cart.Cart/Add",
            Context(),
            SpanKind.SERVER,
            call | ends | {"client.address": "10.0.0.1"},
            start_time=start + MS // 10,
        )
        server.end(end_time=start + 25 * MS // 10)
        client.end(end_time=start + 26 * MS // 10)
    spans = [*front_out.get_finished_spans(), *cart_out.get_finished_spans()]
    assert len({s.context.trace_id for s in spans}) == 2 * RPCS  # each span its own trace
    path = tmp_path / "beyla.jsonl"
    path.write_bytes(collector_json_line(encode_spans(spans)))
    got = read_ebpf_spans([path]).spans
    clients = [r for r in range(len(got)) if got.kind[r] == CLIENT]
    assert len(got) == 2 * RPCS and len(clients) == RPCS
    for c in clients:
        server = int(got.link[c])
        assert server >= 0 and got.start[server] - got.start[c] == MS // 10  # its own RPC
        assert got.name("service", server) == "cart" and got.name("peer", c) == "cart"
