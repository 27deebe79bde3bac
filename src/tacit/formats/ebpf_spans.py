"""Spans from eBPF agents (Grafana Beyla and the like), as blind spans with their RPCs paired.

TraceWeaver (SIGCOMM '24, §5.1) takes its spans from eBPF hooks or sidecars. An eBPF agent
exports every request a process serves as a *server* span and every request it sends as a
*client* span, in OTLP (:mod:`tacit.formats.otlp`), but without context propagation it cannot
relate them: each span is its own trace (Beyla adds two in-process children, "in queue" and
"processing", to a server span). Read as traces, they are hundreds of separate roots. This
reader reads them as what they are: blind spans (:mod:`tacit.formats.blind`), trace and parent
identifiers dropped, with the two sides of each RPC paired by the connection both agents saw
(:func:`tacit.formats.rpc_pairing.pair_rpcs`).

What a span says about its connection comes from the OpenTelemetry semantic conventions
(general, HTTP and RPC attributes): ``server.address`` and ``server.port`` name the server end
on both sides; a server span's client end is ``network.peer.address``/``network.peer.port``
(the socket's peer) or else ``client.address``/``client.port``; a client span's own end is
``client.address``/``client.port`` when the agent records it (Beyla does not). The key of a
span is its server end, named through a :class:`~tacit.formats.capture_spans.ServiceMap` when
the map names it (so that a client that reports the server's host name and a server that reports
its own address meet when the map names both), else as ``ADDR:PORT``; the client end, when both
spans record it, must agree. Times come from the agents' clocks: with agents on several hosts,
give the clock offset between them as :attr:`PairingParams.tolerance_ns`.

The service is the resource's ``service.name``, the instance its ``k8s.pod.name``,
``host.name`` or ``service.instance.id`` (as :mod:`tacit.formats.otlp` reads them). The
endpoint is ``/SERVICE/METHOD`` for RPCs (``rpc.service`` and ``rpc.method``, or Beyla's
``rpc.method`` holding the whole gRPC path), ``METHOD ROUTE`` for HTTP (``http.route``, else
``url.path`` or the path of ``url.full``, without the query), else the span's name; a paired
client span takes its server span's endpoint. The peer of an unpaired span is the service map's
name of the other end, else its address. Spans of other kinds (in-process, messaging producers
and consumers) are left out and counted.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from tacit.errors import ConfigError
from tacit.formats.capture_spans import ServiceMap
from tacit.formats.common import Paths, first_tag, input_files
from tacit.formats.fields import RecordReader
from tacit.formats.otlp import (
    INSTANCE_ATTRS,
    SERVICE_ATTR,
    SUFFIXES,
    attributes,
    is_json_lines,
    kind_name,
    resource_spans,
)
from tacit.formats.rpc_pairing import AgentSpans, PairingParams, pair_rpcs
from tacit.formats.textio import iter_json_lines, load_json
from tacit.model.packets import format_address, parse_endpoint
from tacit.model.spans import CLIENT, SERVER, SpanTable, SpanTableBuilder, concat

_PEER_ADDRESS = ("network.peer.address", "client.address")
_PEER_PORT = ("network.peer.port", "client.port")


@dataclass
class _Ends:
    """Per span, the connection facts the pairing uses (see :func:`pair_rpcs`)."""

    key: list[str | None] = field(default_factory=list)
    client: list[str | None] = field(default_factory=list)
    client_port: list[str | None] = field(default_factory=list)


def read_ebpf_spans(
    paths: Paths, services: ServiceMap | None = None, params: PairingParams | None = None
) -> AgentSpans:
    """Read OTLP JSON exports of eBPF agents (files or directories of .json/.json.gz files,
    one export per file or per line) into blind spans with their RPCs paired."""
    services = services or ServiceMap()
    tables, ends = [], _Ends()
    accounting: dict[str, int] = {"spans_read": 0}
    for f in input_files(paths, SUFFIXES):
        tables.append(_read_file(f, services, ends, accounting))
    spans = concat(tables)
    accounting |= pair_rpcs(spans, ends.key, [ends.client, ends.client_port], params)
    return AgentSpans(spans, accounting)


def _endpoint_text(address: str, port: int | None) -> str:
    """``ADDR:PORT`` (``[V6]:PORT``) with an IP address written as
    :func:`~tacit.model.packets.format_address` writes it and a host name in lower case;
    ``ADDR`` alone without a port."""
    try:
        hi, lo, _ = parse_endpoint(address)
        address = format_address(hi, lo)
    except ConfigError:
        address = address.strip().lower()
    if port is None:
        return address
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


def _read_file(
    path: Path, services: ServiceMap, ends: _Ends, accounting: dict[str, int]
) -> SpanTable:
    src = str(path)
    builder = SpanTableBuilder(src)
    docs: Iterable[tuple[str, Any]]
    if is_json_lines(path):
        docs = ((f"line {n}", d) for n, d in iter_json_lines(path))
    else:
        docs = [("", load_json(path))]
    record = 0
    for where, doc in docs:
        for _, resource, spans in resource_spans(src, where, doc):
            for span in spans:
                record += 1
                r = RecordReader(src, f"{record} ({where})" if where else record)
                _add_record(builder, r, record, span, resource, services, ends, accounting)
    return builder.build()


def _add_record(
    builder: SpanTableBuilder,
    r: RecordReader,
    record: int,
    span: Any,
    resource: dict[str, Any],
    services: ServiceMap,
    ends: _Ends,
    accounting: dict[str, int],
) -> None:
    """Add one span, if it is one side of a request on the wire (else count it)."""
    span = r.obj(span, "span")
    accounting["spans_read"] += 1
    kind = kind_name(r, span)
    if kind not in ("server", "client"):
        reason = f"{kind} spans left out (not one side of a request on the wire)"
        accounting[reason] = accounting.get(reason, 0) + 1
        return
    attrs = attributes(r, span.get("attributes"))
    service = resource.get(SERVICE_ATTR)
    if not isinstance(service, str):
        raise r.fail(f"resource has no string {SERVICE_ATTR!r} attribute")
    _add_span(builder, r, record, span, attrs, service, resource, kind, services, ends)


def _add_span(
    builder: SpanTableBuilder,
    r: RecordReader,
    record: int,
    span: dict,
    attrs: dict[str, Any],
    service: str,
    resource: dict[str, Any],
    kind: str,
    services: ServiceMap,
    ends: _Ends,
) -> None:
    server_addr = first_tag(attrs, ("server.address",))
    server_port = _port(r, attrs, ("server.port",))
    if kind == "server":
        client_addr = first_tag(attrs, _PEER_ADDRESS)
        client_port = _port(r, attrs, _PEER_PORT)
    else:
        if server_addr is None:
            server_addr = first_tag(attrs, ("network.peer.address",))
            server_port = server_port or _port(r, attrs, ("network.peer.port",))
        client_addr = first_tag(attrs, ("client.address",))
        client_port = _port(r, attrs, ("client.port",))
    server_end = None if server_addr is None else _endpoint_text(server_addr, server_port)
    client_end = None if client_addr is None else _endpoint_text(client_addr, client_port)
    key = None
    if server_end is not None and server_port is not None:
        key = services.name(server_end, True)[0]
    if kind == "server":
        peer = None if client_end is None else _name(services, client_end, client_port, False)
    else:
        peer = None if server_end is None else _name(services, server_end, server_port, True)
    builder.add(
        service=service,
        instance=first_tag(resource, INSTANCE_ATTRS) or service,
        endpoint=_endpoint(r, span, attrs),
        kind=SERVER if kind == "server" else CLIENT,
        start=r.integer(span, "startTimeUnixNano"),
        end=r.integer(span, "endTimeUnixNano"),
        record=record,
        peer=peer,
    )
    ends.key.append(key)
    ends.client.append(None if client_addr is None else _endpoint_text(client_addr, None))
    ends.client_port.append(None if client_port is None else str(client_port))


def _name(services: ServiceMap, end: str, port: int | None, server: bool) -> str:
    """The service map's name of one end (``end`` as :func:`_endpoint_text` writes it)."""
    return services.name(end if port is not None else f"{end}:0", server)[0]


def _endpoint(r: RecordReader, span: dict, attrs: dict[str, Any]) -> str:
    """The endpoint name (see the module docstring)."""
    rpc_service, rpc_method = attrs.get("rpc.service"), attrs.get("rpc.method")
    if isinstance(rpc_method, str) and rpc_method:
        if isinstance(rpc_service, str) and rpc_service:
            return f"/{rpc_service}/{rpc_method}"
        if rpc_method.startswith("/"):
            return rpc_method
    method = first_tag(attrs, ("http.request.method", "http.method"))
    if method:
        target = first_tag(attrs, ("http.route", "url.path", "http.target"))
        if target is None:
            url = first_tag(attrs, ("url.full", "http.url"))
            target = (urlsplit(url).path or "/") if url else None
        if target:
            return f"{method} {target.split('?', 1)[0]}"
    return r.string(span, "name")


def _port(r: RecordReader, attrs: dict[str, Any], keys: tuple[str, ...]) -> int | None:
    value = first_tag(attrs, keys)
    if value is None:
        return None
    if not value.isdigit() or not 0 <= int(value) <= 0xFFFF:
        raise r.fail(f"attribute {keys[0]!r} is not a port number: {value!r}")
    return int(value)
