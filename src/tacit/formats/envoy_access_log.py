"""Spans from Envoy and Istio sidecar access logs, as blind spans with their RPCs paired.

TraceWeaver (SIGCOMM '24, §5.1) takes its spans from eBPF hooks or from service-mesh sidecars.
A sidecar proxy logs every HTTP request that passes through it, once: requests coming into its
workload (*inbound*: the workload's server spans) and requests the workload sends (*outbound*:
its client spans). One file holds one sidecar's log; its name without suffixes names the
sidecar's instance and service, unless the :class:`~tacit.formats.capture_spans.ServiceMap` is
a Kubernetes pod list naming that pod (``kubectl logs POD -c istio-proxy > POD.log``), which
then gives the service.

Three line formats are read, in any mix:

* Envoy's default format (Envoy documentation, "Access logging", default format string)::

    [%START_TIME%] "%REQ(:METHOD)% %REQ(X-ENVOY-ORIGINAL-PATH?:PATH)% %PROTOCOL%"
    %RESPONSE_CODE% %RESPONSE_FLAGS% %BYTES_RECEIVED% %BYTES_SENT% %DURATION%
    %RESP(X-ENVOY-UPSTREAM-SERVICE-TIME)% "%REQ(X-FORWARDED-FOR)%" "%REQ(USER-AGENT)%"
    "%REQ(X-REQUEST-ID)%" "%REQ(:AUTHORITY)%" "%UPSTREAM_HOST%"

* Istio's default TEXT format, which adds ``%RESPONSE_CODE_DETAILS%
  %CONNECTION_TERMINATION_DETAILS% "%UPSTREAM_TRANSPORT_FAILURE_REASON%"`` after the flags and
  ``%UPSTREAM_CLUSTER% %UPSTREAM_LOCAL_ADDRESS% %DOWNSTREAM_LOCAL_ADDRESS%
  %DOWNSTREAM_REMOTE_ADDRESS% %REQUESTED_SERVER_NAME% %ROUTE_NAME%`` at the end;
* Istio's JSON encoding: one object per line with the keys ``start_time``, ``method``,
  ``path``, ``protocol``, ``duration``, ``request_id``, ``authority``, ``upstream_host``,
  ``upstream_cluster``, ``upstream_local_address``, ``downstream_local_address``,
  ``downstream_remote_address`` (and others, not used).

The proxy's own log messages (``TIMESTAMP<TAB>info<TAB>...``), which ``kubectl logs`` mixes
into the access log, are counted and skipped; any other line is an error naming file and line.

Direction: Istio's upstream cluster says it (``inbound|9080||`` for requests into the workload,
``outbound|9080||reviews.default.svc.cluster.local`` or a passthrough cluster for requests out
of it). Envoy's default format has no cluster: a request is inbound when its ``:authority``
names the sidecar's own service (the host's first DNS label) or its upstream host is a loopback
address, and outbound otherwise.

Times are coarse: ``START_TIME`` has millisecond precision and ``DURATION`` counts whole
milliseconds, so a span is known to within a millisecond or two, and its server span may seem to
end up to a millisecond after its client span (:data:`TOLERANCE_NS`). Under load, requests a
millisecond apart become indistinguishable in time, and reconstruction accuracy suffers.

Pairing (:func:`tacit.formats.rpc_pairing.pair_rpcs`): the client and server sides of one RPC
share ``x-request-id``. Envoy generates the header on a request that has none and forwards it
to the upstream, so the callee's sidecar logs the id the caller's sidecar logged: it identifies
the request on the wire, as ``rpc`` does in blind spans, and pairing the two sides by it is
what a sidecar legitimately knows. It must never relate a server span to the calls its handler
made: an application may copy the id onto its outgoing requests (Istio asks applications to
propagate it with the trace headers), and then one id marks a whole trace. That relation is
what reconstruction infers; the id goes no further than the pairing, and blind spans do not
carry it. Within one id, the Istio formats' addresses must agree when both sides have them
(the client's upstream host with the server's downstream local address, the client's upstream
local address with the server's downstream remote address), and the closest nesting in time
decides, so that the outermost server span of a propagated id goes with its direct caller.
Lines without a request id are keyed by the server's address, when the Istio fields give it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tacit.errors import ConfigError, InputError
from tacit.formats.capture_spans import ServiceMap
from tacit.formats.common import Paths, input_files
from tacit.formats.fields import RecordReader
from tacit.formats.rpc_pairing import AgentSpans, PairingParams, pair_rpcs
from tacit.formats.textio import parse_json, read_text
from tacit.model.packets import format_address, format_endpoint, parse_endpoint
from tacit.model.spans import CLIENT, SERVER, SpanTable, SpanTableBuilder, concat

SUFFIXES = (".log", ".log.gz", ".txt", ".txt.gz", ".jsonl", ".jsonl.gz", ".json", ".json.gz")
"""The files :func:`read_envoy_logs` takes from a directory."""
TOLERANCE_NS = 1_000_000
"""Millisecond times: a server span's rounded end may pass its client span's by 1 ms."""
MS = 1_000_000

ENVOY_FIELDS = (
    "start_time",
    "request",
    "response_code",
    "response_flags",
    "bytes_received",
    "bytes_sent",
    "duration",
    "upstream_service_time",
    "x_forwarded_for",
    "user_agent",
    "request_id",
    "authority",
    "upstream_host",
)
"""Envoy's default format, field by field, named as Istio's JSON encoding names them."""
ISTIO_FIELDS = (
    *ENVOY_FIELDS[:4],
    "response_code_details",
    "connection_termination_details",
    "upstream_transport_failure_reason",
    *ENVOY_FIELDS[4:],
    "upstream_cluster",
    "upstream_local_address",
    "downstream_local_address",
    "downstream_remote_address",
    "requested_server_name",
    "route_name",
)
"""Istio's default TEXT format."""
_FORMATS = {len(ENVOY_FIELDS): ENVOY_FIELDS, len(ISTIO_FIELDS): ISTIO_FIELDS}
_TOKEN = re.compile(r'\[[^\]]*\]|"[^"]*"|\S+')
_PROXY_LOG = re.compile(
    r"^\d{4}-\d\d-\d\dT\S+\s+(trace|debug|info|warn|warning|error|critical)\s", re.IGNORECASE
)
_INBOUND_CLUSTERS = ("inbound|", "InboundPassthroughCluster")

PROXY_LINES = "lines of the proxy's own log (not access log entries)"
NO_HTTP = "entries of TCP connections (no HTTP request) left out"
NO_DURATION = "entries without a duration (request not finished) left out"


def read_envoy_logs(
    paths: Paths, services: ServiceMap | None = None, params: PairingParams | None = None
) -> AgentSpans:
    """Read sidecar access logs (files, or directories of .log, .txt, .jsonl or .json files;
    gzip or not), one file per sidecar, into blind spans with their RPCs paired (see the module
    docstring). ``params`` defaults to a tolerance of :data:`TOLERANCE_NS`."""
    services = services or ServiceMap()
    tables: list[SpanTable] = []
    ends: list[tuple[str | None, str | None, str | None]] = []
    accounting: dict[str, int] = {"lines_read": 0}
    for f in input_files(paths, SUFFIXES):
        instance, service = sidecar(f, services)
        builder = SpanTableBuilder(str(f))
        for lineno, entry in _entries(f, accounting):
            r = RecordReader(str(f), f"line {lineno}")
            span = entry_span(r, entry, service, instance, services, accounting)
            if span is None:
                continue
            fields, span_ends = span
            builder.add(**fields, record=lineno)
            ends.append(span_ends)
        if not len(builder):
            raise InputError("no access log entries", path=str(f))
        tables.append(builder.build())
    spans = concat(tables)
    accounting |= pair_sidecar_spans(spans, ends, params)
    return AgentSpans(spans, accounting)


def sidecar(path: Path, services: ServiceMap) -> tuple[str, str]:
    """The instance and the service of the sidecar whose log ``path`` is: the file's name
    without its suffix, and the service a pod list names for it (else the same name)."""
    stem = _stem(path)
    pods = {pod: services.addresses.get(a, pod) for a, pod in services.instances.items()}
    return stem, pods.get(stem, stem)


def pair_sidecar_spans(
    spans: SpanTable,
    ends: list[tuple[str | None, str | None, str | None]],
    params: PairingParams | None = None,
) -> dict[str, int]:
    """Pair the sides of each RPC in ``spans`` (see the module docstring), given each span's
    (request id, server end, client end) as :func:`entry_span` gives them; ``params`` defaults
    to a tolerance of :data:`TOLERANCE_NS`. Returns the accounting of
    :func:`~tacit.formats.rpc_pairing.pair_rpcs`."""
    key = [
        rid if rid is not None or server is None else f"server {server}" for rid, server, _ in ends
    ]
    servers = [server for _, server, _ in ends]
    clients = [client for _, _, client in ends]
    return pair_rpcs(spans, key, [servers, clients], params or PairingParams(TOLERANCE_NS))


def _stem(path: Path) -> str:
    """The file's name without its suffix (one of :data:`SUFFIXES`)."""
    name = path.name
    for suffix in sorted(SUFFIXES, key=len, reverse=True):
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)]
    return path.stem


def _entries(path: Path, accounting: dict[str, int]) -> list[tuple[int, dict[str, Any]]]:
    """(line, fields named as in Istio's JSON encoding) of every access log entry."""
    src = str(path)
    out = []
    for lineno, line in enumerate(read_text(path).split("\n"), start=1):
        entry = access_log_entry(RecordReader(src, f"line {lineno}"), line, accounting)
        if entry is not None:
            out.append((lineno, entry))
    return out


def access_log_entry(
    r: RecordReader, line: str, accounting: dict[str, int]
) -> dict[str, Any] | None:
    """The fields of one line (named as in Istio's JSON encoding); None for a blank line or a
    line of the proxy's own log (counted). An error naming the line for anything else."""
    text = line.strip()
    if not text:
        return None
    accounting["lines_read"] = accounting.get("lines_read", 0) + 1
    if text.startswith("{"):
        try:
            entry = parse_json(text)
        except ValueError as e:
            raise r.fail(f"malformed JSON: {e}") from None
        return r.obj(entry, "access log entry")
    if text.startswith("["):
        return _text_entry(r, text)
    if _PROXY_LOG.match(text):
        accounting[PROXY_LINES] = accounting.get(PROXY_LINES, 0) + 1
        return None
    raise r.fail("not an access log entry: expected '[START_TIME] ...' or a JSON object")


def _text_entry(r: RecordReader, text: str) -> dict[str, Any]:
    """A line of Envoy's or Istio's default TEXT format as named fields ('-' as None)."""
    tokens = _TOKEN.findall(text)
    names = _FORMATS.get(len(tokens))
    if names is None or not tokens[0].startswith("["):
        raise r.fail(
            f"expected Envoy's default access log format ({len(ENVOY_FIELDS)} fields) or "
            f"Istio's ({len(ISTIO_FIELDS)}), got {len(tokens)} fields"
        )
    values = [t[1:-1] if t[:1] in '["' else t for t in tokens]
    entry: dict[str, Any] = {k: None if v == "-" else v for k, v in zip(names, values, strict=True)}
    request = entry.pop("request")
    parts = request.split(" ") if request else []
    if request and len(parts) != 3:
        raise r.fail(f"request line must be 'METHOD PATH PROTOCOL', got {request!r}")
    entry["method"], entry["path"], entry["protocol"] = parts or (None, None, None)
    return entry


def entry_span(
    r: RecordReader,
    entry: dict[str, Any],
    service: str,
    instance: str,
    services: ServiceMap,
    accounting: dict[str, int],
) -> tuple[dict[str, Any], tuple[str | None, str | None, str | None]] | None:
    """The span of one entry (keyword arguments of :meth:`SpanTableBuilder.add`) and its
    request id, server end and client end; None (counted) for an entry that is no request."""
    method, path = _text(r, entry, "method"), _text(r, entry, "path")
    if method is None or path is None:
        accounting[NO_HTTP] = accounting.get(NO_HTTP, 0) + 1
        return None
    duration = _text(r, entry, "duration")
    if duration is None:
        accounting[NO_DURATION] = accounting.get(NO_DURATION, 0) + 1
        return None
    if not duration.isdigit():
        raise r.fail(f"duration must be whole milliseconds, got {duration!r}")
    start = _start_ns(r, _text(r, entry, "start_time"))
    upstream = _address(r, entry, "upstream_host")
    cluster = _text(r, entry, "upstream_cluster")
    authority = _text(r, entry, "authority")
    host = None if authority is None else _first_label(authority)
    if cluster is not None:
        inbound = cluster.startswith(_INBOUND_CLUSTERS)
    else:
        inbound = host == service or (upstream is not None and _loopback(upstream))
    if inbound:
        server = _address(r, entry, "downstream_local_address")
        client = _address(r, entry, "downstream_remote_address")
        peer = None if client is None else services.name(client, False)[0]
    else:
        server = upstream
        client = _address(r, entry, "upstream_local_address")
        peer = _callee(cluster, server, host, services)
    fields = {
        "service": service,
        "instance": instance,
        "endpoint": f"{method} {path.split('?', 1)[0]}",
        "kind": SERVER if inbound else CLIENT,
        "start": start,
        "end": start + int(duration) * MS,
        "peer": peer,
    }
    return fields, (_text(r, entry, "request_id"), server, client)


def _callee(
    cluster: str | None, upstream: str | None, host: str | None, services: ServiceMap
) -> str | None:
    """The service a client span calls: the service map's name of the upstream host when the
    map names it, else the first label of an outbound cluster's host name
    (``outbound|9080||reviews.default.svc.cluster.local``: reviews), else the ``:authority``
    host's first label, else the upstream host's address."""
    if upstream is not None:
        named, _ = services.name(upstream, True)
        if named != upstream:
            return named
    if cluster is not None and cluster.startswith("outbound|") and cluster.split("|")[-1]:
        return _first_label(cluster.split("|")[-1])
    return host or upstream


def _first_label(authority: str) -> str:
    """The first DNS label of a host name, port removed (``reviews.default.svc:9080``:
    reviews); an IP address as :func:`_address` writes it."""
    try:
        hi, lo, _ = parse_endpoint(authority)
        return format_address(hi, lo)
    except ConfigError:
        return authority.rsplit(":", 1)[0].split(".", 1)[0].lower()


def _text(r: RecordReader, entry: Mapping[str, Any], key: str) -> str | None:
    """A field as text; absent, null, empty and '-' are None (numbers of the JSON encoding
    become their digits)."""
    value = entry.get(key)
    if value is None or value in ("", "-"):
        return None
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise r.fail(f"field {key!r} must be a string or an integer, got {type(value).__name__}")
    return str(value)


def _address(r: RecordReader, entry: Mapping[str, Any], key: str) -> str | None:
    """An ``ADDR:PORT`` field as :func:`~tacit.model.packets.format_endpoint` writes it; an
    ``envoy://`` or other non-IP value (an internal listener, a Unix socket) is None."""
    value = _text(r, entry, key)
    if value is None:
        return None
    try:
        hi, lo, port = parse_endpoint(value.removeprefix("tcp://"))
    except ConfigError:
        return None
    return format_address(hi, lo) if port is None else format_endpoint(hi, lo, port)


def _loopback(end: str) -> bool:
    return end.startswith(("127.", "[::1]"))


def _start_ns(r: RecordReader, text: str | None) -> int:
    """``START_TIME`` (ISO 8601, UTC unless an offset is given) in ns since the epoch."""
    if text is None:
        raise r.fail("missing start_time")
    try:
        t = datetime.fromisoformat(text)
    except ValueError:
        raise r.fail(f"start_time is not an ISO 8601 time: {text!r}") from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=UTC)
    delta = t - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1000
