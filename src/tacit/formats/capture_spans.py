"""Spans from packets: a client span and a server span for every request/response exchange.

TraceWeaver (SIGCOMM '24, §5.1) takes its spans from eBPF hooks or sidecars: per request, the
caller, the callee, the endpoint, and the times of request and response. A packet capture holds
the same facts without any agent in the services: every exchange that
:func:`tacit.formats.exchanges.read_exchanges` finds (HTTP/1.1, HTTP/2 and gRPC, Redis,
memcached) becomes a *client* span at the caller's address and a *server* span at the callee's,
paired (``link``) as one RPC, as blind spans with no trace identity
(:mod:`tacit.formats.blind`) that reconstruction takes directly.

Times are those at the capture point: both spans run from the first byte of the request to the
last byte of the response. A capture taken at one point (a bridge, a node's interfaces) cannot
tell the time a request spent on the wire from the time the callee spent before answering;
nested calls still fall within their parent's span, which is what reconstruction uses.

Addresses name services through a :class:`ServiceMap` (:func:`read_service_map`): an exact
``ADDR:PORT``, then the address, then (for the server end) the port; unnamed server ends are
``ADDR:PORT`` and unnamed client ends their address (a client's port is ephemeral). The instance
of a span is the pod name a Kubernetes pod list gives, else its address, so that a service's
incoming and outgoing spans on one host share an instance. Every exchange is accounted for:
a span pair, or left out with a reason (no response captured, no response expected).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tacit.config_fields import read_yaml
from tacit.errors import ConfigError
from tacit.formats.exchanges import Connection, ExchangeParams, Exchanges, read_exchanges
from tacit.formats.pcap import read_packets
from tacit.model.captures import PacketRead
from tacit.model.columns import NONE, StringPool
from tacit.model.messages import MISSING
from tacit.model.packets import format_address, parse_endpoint
from tacit.model.span_details import STATUS_ERROR, STATUS_UNSET, SpanDetail
from tacit.model.spans import CLIENT, SERVER, SpanTable


@dataclass(frozen=True)
class ServiceMap:
    """Service and instance names of addresses.

    ``endpoints``: ``ADDR:PORT`` → service; ``addresses``: ``ADDR`` → service; ``ports``: a
    server port → service; ``instances``: ``ADDR`` → instance name. Addresses are written as
    :func:`~tacit.model.packets.format_address` writes them (IPv6 compressed, no brackets).
    """

    endpoints: Mapping[str, str] = field(default_factory=dict)
    addresses: Mapping[str, str] = field(default_factory=dict)
    ports: Mapping[int, str] = field(default_factory=dict)
    instances: Mapping[str, str] = field(default_factory=dict)

    def name(self, endpoint: str, server: bool) -> tuple[str, str]:
        """The (service, instance) of one end of a connection, written ``ADDR:PORT`` or
        ``[V6]:PORT``."""
        addr, _, port = endpoint.rpartition(":")
        addr = addr.strip("[]")
        instance = self.instances.get(addr, addr)
        service = self.endpoints.get(endpoint) or self.addresses.get(addr)
        if service is None and server:
            service = self.ports.get(int(port), endpoint)
        return service or addr, instance


def read_service_map(path: str | Path) -> ServiceMap:
    """The service names in a YAML or JSON file: either a mapping of ``ADDR``, ``ADDR:PORT``,
    ``[V6]:PORT`` or ``:PORT`` to a service name, or a Kubernetes pod list (``kubectl get pods
    -o json``), whose pods are named by their ``app.kubernetes.io/name`` or ``app`` label (else
    the pod's name) at their pod addresses, with the pod's name as instance."""
    doc = read_yaml(path)
    if isinstance(doc, Mapping) and isinstance(doc.get("items"), list):
        return _pod_list(doc["items"], str(path))
    if not isinstance(doc, Mapping):
        raise ConfigError(f"{path}: expected a mapping of addresses to services or a pod list")
    endpoints: dict[str, str] = {}
    addresses: dict[str, str] = {}
    ports: dict[int, str] = {}
    for key, service in doc.items():
        where = f"{path}: {key!r}"
        if not isinstance(service, str) or not service:
            raise ConfigError(f"{where}: the service must be a non-empty string")
        text = str(key).strip()
        if text.startswith(":"):
            if not text[1:].isdigit() or not 0 < int(text[1:]) < 65536:
                raise ConfigError(f"{where}: not a port (expected :PORT, 1 to 65535)")
            ports[int(text[1:])] = service
            continue
        try:
            hi, lo, port = parse_endpoint(text)
        except ConfigError as e:
            raise ConfigError(f"{where}: {e}") from None
        addr = format_address(hi, lo)
        if port is None:
            addresses[addr] = service
        else:
            endpoints[f"{addr}:{port}" if ":" not in addr else f"[{addr}]:{port}"] = service
    return ServiceMap(endpoints, addresses, ports)


def _pod_list(items: list, source: str) -> ServiceMap:
    addresses: dict[str, str] = {}
    instances: dict[str, str] = {}
    for i, pod in enumerate(items):
        where = f"{source}: items[{i}]"
        if not isinstance(pod, Mapping):
            raise ConfigError(f"{where}: expected a pod object")
        meta, status = pod.get("metadata") or {}, pod.get("status") or {}
        name = meta.get("name")
        if not isinstance(name, str) or not name:
            raise ConfigError(f"{where}: the pod has no metadata.name")
        labels = meta.get("labels") or {}
        service = labels.get("app.kubernetes.io/name") or labels.get("app") or name
        ips = [p.get("ip") for p in status.get("podIPs") or [] if isinstance(p, Mapping)]
        ips = [ip for ip in ips or [status.get("podIP")] if ip]
        for ip in ips:
            try:
                hi, lo, _ = parse_endpoint(str(ip))
            except ConfigError as e:
                raise ConfigError(f"{where} ({name}): {e}") from None
            addr = format_address(hi, lo)
            addresses[addr], instances[addr] = str(service), name
    return ServiceMap(addresses=addresses, instances=instances)


@dataclass
class CaptureAccounting:
    """What became of the exchanges: ``exchanges`` = ``paired`` + the values of ``left_out``
    (by reason); ``spans`` = 2 × ``paired``."""

    exchanges: int = 0
    paired: int = 0
    spans: int = 0
    left_out: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {
            "exchanges": self.exchanges,
            "paired": self.paired,
            "spans": self.spans,
            "left_out": dict(self.left_out),
        }


@dataclass
class CapturedSpans:
    """Spans from a capture: ``spans`` holds a client span (even rows) and its server span
    (the odd row after it) per exchange in ``exchange`` order; ``exchange`` gives each span's
    row in ``exchanges``."""

    spans: SpanTable
    exchange: np.ndarray
    exchanges: Exchanges
    accounting: CaptureAccounting


NO_RESPONSE = "no response in the capture"
NO_RESPONSE_EXPECTED = "no response expected (memcached noreply or quit)"


def read_capture_spans(
    path: str | Path,
    services: ServiceMap | None = None,
    protocol: str = "auto",
    params: ExchangeParams | None = None,
) -> CapturedSpans:
    """The spans of every exchange in the pcap or pcapng file ``path`` (gzip or not), and what
    became of every packet (``exchanges.accounting``) and exchange (``accounting``)."""
    return spans_from_read(read_packets(path, payloads=True), services, protocol, params)


def spans_from_read(
    read: PacketRead,
    services: ServiceMap | None = None,
    protocol: str = "auto",
    params: ExchangeParams | None = None,
) -> CapturedSpans:
    """The spans of every exchange in packets read with their payloads (a file, or a live
    capture: :func:`tacit.formats.live.capture_for`)."""
    ex = read_exchanges(read, protocol=protocol, params=params)
    source = read.packets.sources[0] if read.packets.sources else ""
    return spans_from_exchanges(ex, services, source)


def spans_from_exchanges(
    ex: Exchanges, services: ServiceMap | None = None, source: str = ""
) -> CapturedSpans:
    """A client and a server span for every exchange of ``ex`` with a complete response (see
    the module docstring); the rest is counted in the accounting by reason."""
    services = services or ServiceMap()
    acc = CaptureAccounting(exchanges=len(ex))
    for reason, mask in (
        (NO_RESPONSE_EXPECTED, ~ex.expects_response),
        (NO_RESPONSE, ex.expects_response & (ex.response_last == MISSING)),
    ):
        if mask.any():
            acc.left_out[reason] = int(mask.sum())
    rows = np.flatnonzero(ex.expects_response & (ex.response_last != MISSING))
    acc.paired, acc.spans = len(rows), 2 * len(rows)
    pool = StringPool()
    ends = np.array(
        [
            [
                pool.code(n)
                for n in (*services.name(c.client, False), *services.name(c.server, True))
            ]
            for c in ex.connections
        ]
        or np.zeros((0, 4)),
        dtype=np.int32,
    )
    names = _endpoint_names(ex, pool)
    conn = ex.connection[rows]
    n = 2 * len(rows)
    kind = np.tile(np.array([CLIENT, SERVER], np.int8), len(rows))
    side = np.where(kind == CLIENT, 0, 2)  # the client end's columns, or the server end's
    at = np.repeat(conn, 2)
    link = np.arange(n, dtype=np.int64) ^ 1  # each span's partner is its neighbour
    spans = SpanTable(
        pool,
        service=ends[at, side],
        instance=ends[at, side + 1],
        endpoint=np.repeat(names[rows], 2),
        kind=kind,
        start=np.repeat(ex.request_first[rows], 2),
        end=np.repeat(ex.response_last[rows], 2),
        peer=ends[at, 2 - side],
        thread=np.full(n, NONE, np.int64),
        trace=np.full(n, NONE, np.int32),
        span_id=np.full(n, NONE, np.int32),
        parent=np.full(n, NONE, np.int64),
        link=link,
        record=np.repeat(rows, 2).astype(np.int64),
        sources=[source] if source else [],
        details=np.repeat(_details(ex, rows), 2),
    )
    return CapturedSpans(spans, np.repeat(rows, 2), ex, acc)


def _details(ex: Exchanges, rows: np.ndarray) -> np.ndarray:
    """Per exchange of ``rows``, what the capture saw of it as OpenTelemetry semantic-convention
    attributes (HTTP: method, path, status; gRPC: service, method, status; both ends' addresses;
    the kept request headers as ``http.request.header.<name>``), shared by its two spans; the
    status is an error for an HTTP 5xx or a gRPC status other than OK. Exchanges that would
    get equal details share one (details are immutable)."""
    ends = [_connection_attributes(c) for c in ex.connections]
    kept = list(ex.kept.items())
    columns = [ex.connection, ex.command, ex.target, ex.status, ex.grpc, *(c for _, c in kept)]
    keys = np.stack([np.asarray(c, dtype=np.int64)[rows] for c in columns], axis=1)
    distinct, inverse = np.unique(keys, axis=0, return_inverse=True)
    made = np.empty(len(distinct), dtype=object)
    for k, (conn, command, target, status, grpc, *headers) in enumerate(distinct.tolist()):
        attrs, error = _exchange_attributes(ex, command, target, status, bool(grpc))
        for (name, _), code in zip(kept, headers, strict=True):
            if code != NONE:
                attrs[f"http.request.header.{name}"] = ex.strings[code]
        made[k] = SpanDetail(
            attributes=ends[conn] | attrs, status=STATUS_ERROR if error else STATUS_UNSET
        )
    return made[inverse.reshape(-1)]


def _connection_attributes(conn: Connection) -> dict[str, object]:
    server, _, port = conn.server.rpartition(":")
    client, _, client_port = conn.client.rpartition(":")
    return {
        "network.protocol.name": conn.protocol or "",
        "server.address": server.strip("[]"),
        "server.port": int(port),
        "client.address": client.strip("[]"),
        "client.port": int(client_port),
    }


def _exchange_attributes(
    ex: Exchanges, command: int, target_code: int, status: int, grpc: bool
) -> tuple[dict[str, object], bool]:
    """The attributes of one kind of exchange, and whether its status is an error."""
    s = ex.strings
    target = s[target_code]
    attrs: dict[str, object] = {}
    error = False
    if grpc:
        rpc_service, _, rpc_method = (target or "").strip("/").rpartition("/")
        attrs |= {"rpc.system": "grpc", "rpc.service": rpc_service, "rpc.method": rpc_method}
        if status >= 0:
            attrs["rpc.grpc.status_code"] = status
            error = status != 0
    elif target is not None:
        path, question, query = target.partition("?")
        attrs |= {"http.request.method": s[command] or "", "url.path": path}
        if question:
            attrs["url.query"] = query
        if status >= 0:
            attrs["http.response.status_code"] = status
            error = status >= 500
    else:
        attrs["db.operation.name"] = s[command] or ""
    return attrs, error


def _endpoint_names(ex: Exchanges, pool: StringPool) -> np.ndarray:
    """Per exchange, the code in ``pool`` of its endpoint: ``/package.Service/Method`` for gRPC,
    ``METHOD /path`` (without the query) for HTTP, the command for Redis and memcached."""
    s = ex.strings
    # One name per distinct (command, target, gRPC), interned in the order the rows first use it.
    key = (ex.command.astype(np.int64) + 1) * (len(s) + 1) + ex.target + 1
    distinct, first, inverse = np.unique(2 * key + ex.grpc, return_index=True, return_inverse=True)
    codes = np.empty(len(distinct), dtype=np.int32)
    for k in np.argsort(first).tolist():
        row = int(first[k])
        command, target = s[int(ex.command[row])], s[int(ex.target[row])]
        path = (target or "").split("?", 1)[0]
        if ex.grpc[row] and path:
            name = path
        elif path:
            name = f"{command} {path}"
        else:
            name = command or ""
        codes[k] = pool.code(name)
    return codes[inverse.reshape(-1)]
