"""A three-service application as eBPF agents and sidecars would record it, with its truth.

A load generator without an agent calls ``frontend`` (``GET /home``); each request calls
``catalog`` over gRPC (``/shop.Catalog/List``), which reads a Redis key (no agent at Redis),
and then ``cart`` over HTTP (``GET /cart/{id}``). Requests start every ``gap_ms`` and last
longer than that, so several are in flight at once.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

T0 = 1_700_000_000_000_000_000
MS = 1_000_000
US = 1_000
ADDRESSES = {"loadgen": "10.0.0.9", "frontend": "10.0.0.1", "catalog": "10.0.0.2"}
ADDRESSES |= {"cart": "10.0.0.3", "redis": "10.0.0.7"}
PORTS = {"frontend": 80, "catalog": 9090, "cart": 8080, "redis": 6379}
SERVICE_MAP_YAML = '"10.0.0.9": loadgen\n":9090": catalog\n":8080": cart\n"10.0.0.7": redis\n'
"""Names the cart's host name (``cart:8080``, as its callers' agent reports it) and address
alike (by port), and the address of Redis."""
CALLGRAPH_YAML = """\
frontend:
  GET /home:
    calls:
    - {id: 0, service: catalog, endpoint: /shop.Catalog/List, after: []}
    - {id: 1, service: cart, endpoint: "GET /cart/{id}", after: [0]}
catalog:
  /shop.Catalog/List:
    calls:
    - {id: 0, service: redis, endpoint: GET, after: []}
cart:
  GET /cart/{id}: {calls: []}
"""
CALLGRAPH_SIDECARS_YAML = """\
frontend:
  GET /home:
    calls:
    - {id: 0, service: catalog, endpoint: POST /shop.Catalog/List, after: []}
    - {id: 1, service: cart, endpoint: GET /cart, after: [0]}
"""
"""The same application as its sidecars name the endpoints (``METHOD PATH``, no query); they
do not see catalog's call to Redis, a plain TCP connection."""


@dataclass(frozen=True)
class Call:
    """One span's place in the truth: request ``request``, its ``role``, times in ns."""

    request: int
    role: str  # front (the frontend's server span), catalog, redis or cart
    kind: str
    start: int
    end: int


def truth(n: int, gap_ms: float) -> list[Call]:
    """Every span the agents record, per request: the frontend's server span, its client span
    to catalog and catalog's server span, catalog's client span to Redis, the frontend's client
    span to cart and cart's server span (times in µs after the request's start)."""
    out = []
    for i in range(n):
        t = T0 + round(i * gap_ms * MS)
        for role, kind, a, b in (
            ("front", "server", 0, 9000),
            ("catalog", "client", 500, 4500),
            ("catalog", "server", 700, 4300),
            ("redis", "client", 1000, 2000),
            ("cart", "client", 5000, 8500),
            ("cart", "server", 5200, 8300),
        ):
            out.append(Call(i, role, kind, t + a * US, t + b * US))
    return out


def _attr(key: str, value: str | int) -> dict:
    v = {"intValue": str(value)} if isinstance(value, int) else {"stringValue": value}
    return {"key": key, "value": v}


def beyla_document(calls: list[Call]) -> dict:
    """The calls as Beyla exports them: one resource per service, each span its own trace,
    server spans with their "in queue" and "processing" children, attributes as Beyla sets
    them (a client knows the cart by its host name, the cart knows its own address)."""
    per: dict[str, list[dict]] = {}
    for k, c in enumerate(calls):
        owner = {
            ("front", "server"): "frontend",
            ("catalog", "client"): "frontend",
            ("catalog", "server"): "catalog",
            ("redis", "client"): "catalog",
            ("cart", "client"): "frontend",
            ("cart", "server"): "cart",
        }[(c.role, c.kind)]
        trace, span_id = f"{k + 1:032x}", f"{k + 1:016x}"
        if c.role == "front":
            name, attrs = (
                "GET /home",
                [
                    _attr("http.request.method", "GET"),
                    _attr("http.route", "/home"),
                    _attr("url.path", "/home"),
                    _attr("client.address", ADDRESSES["loadgen"]),
                    _attr("server.address", ADDRESSES["frontend"]),
                    _attr("server.port", 80),
                ],
            )
        elif c.role == "catalog":
            name = "/shop.Catalog/List"
            attrs = [
                _attr("rpc.method", "/shop.Catalog/List"),
                _attr("rpc.system", "grpc"),
                _attr("server.address", ADDRESSES["catalog"]),
                _attr("server.port", 9090),
            ]
            if c.kind == "server":
                attrs.append(_attr("client.address", ADDRESSES["frontend"]))
        elif c.role == "redis":
            name, attrs = (
                "GET",
                [
                    _attr("db.system", "redis"),
                    _attr("db.operation.name", "GET"),
                    _attr("server.address", ADDRESSES["redis"]),
                    _attr("server.port", 6379),
                ],
            )
        elif c.kind == "client":
            name, attrs = (
                "GET",
                [
                    _attr("http.request.method", "GET"),
                    _attr("url.full", f"http://cart:8080/cart/{c.request}?v=1"),
                    _attr("server.address", "cart"),
                    _attr("server.port", 8080),
                ],
            )
        else:
            name, attrs = (
                "GET /cart/{id}",
                [
                    _attr("http.request.method", "GET"),
                    _attr("http.route", "/cart/{id}"),
                    _attr("url.path", f"/cart/{c.request}"),
                    _attr("client.address", ADDRESSES["frontend"]),
                    _attr("server.address", ADDRESSES["cart"]),
                    _attr("server.port", 8080),
                ],
            )
        span = {
            "traceId": trace,
            "spanId": span_id,
            "parentSpanId": "",
            "name": name,
            "kind": 2 if c.kind == "server" else 3,
            "startTimeUnixNano": str(c.start),
            "endTimeUnixNano": str(c.end),
            "attributes": attrs,
        }
        spans = per.setdefault(owner, [])
        spans.append(span)
        if c.kind == "server":
            middle = c.start + 100 * US
            for j, (sub, a, b) in enumerate(
                (("in queue", c.start, middle), ("processing", middle, c.end))
            ):
                spans.append(
                    {
                        "traceId": trace,
                        "spanId": f"{k + 1:012x}{j + 1:04x}",
                        "parentSpanId": span_id,
                        "name": sub,
                        "kind": "SPAN_KIND_INTERNAL",
                        "startTimeUnixNano": str(a),
                        "endTimeUnixNano": str(b),
                    }
                )
    return {
        "resourceSpans": [
            {
                "resource": {
                    "attributes": [
                        _attr("service.name", svc),
                        _attr("k8s.pod.name", f"{svc}-7d9f"),
                        _attr("telemetry.sdk.name", "beyla"),
                    ]
                },
                "scopeSpans": [{"scope": {"name": "github.com/grafana/beyla"}, "spans": spans}],
            }
            for svc, spans in per.items()
        ]
    }


def _time(ns: int) -> str:
    t = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=ns // 1000)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


def _duration_ms(c: Call) -> int:
    """Envoy's DURATION: whole milliseconds, from the millisecond START_TIME."""
    return (c.end - c.start) // MS


def sidecar_entries(calls: list[Call]) -> dict[str, list[dict]]:
    """Per sidecar, its entries (Istio's JSON keys): the frontend's inbound requests and its
    outbound ones to catalog and cart, catalog's inbound requests (its Redis call is plain TCP
    to Redis here: a TCP proxy entry without a request), and cart's inbound requests. The
    frontend copies the request id it received onto its calls, as Istio asks applications to.
    The cart is asked for ``/cart?id=N``."""
    out: dict[str, list[dict]] = {"frontend": [], "catalog": [], "cart": []}
    for c in calls:
        rid = f"req-{c.request:04d}-{'abcd'[c.request % 4]}"
        port = 40000 + c.request
        entry = {
            "start_time": _time(c.start),
            "protocol": "HTTP/1.1",
            "response_code": 200,
            "response_flags": "-",
            "bytes_received": 0,
            "bytes_sent": 120,
            "duration": _duration_ms(c),
            "upstream_service_time": str(max(_duration_ms(c) - 1, 0)),
            "x_forwarded_for": None,
            "user_agent": "python-requests/2.31",
            "request_id": rid,
        }
        if c.role == "front":
            out["frontend"].append(
                entry
                | {
                    "method": "GET",
                    "path": "/home?user=3",
                    "authority": "frontend.shop.example",
                    "upstream_host": "10.0.0.1:80",
                    "upstream_cluster": "inbound|80||",
                    "upstream_local_address": "127.0.0.6:51000",
                    "downstream_local_address": "10.0.0.1:80",
                    "downstream_remote_address": f"10.0.0.9:{port}",
                }
            )
        elif c.role == "redis":
            out["catalog"].append(
                entry
                | {
                    "method": None,
                    "path": None,
                    "protocol": None,
                    "authority": None,
                    "upstream_host": "10.0.0.7:6379",
                    "upstream_cluster": "outbound|6379||redis.shop.svc.cluster.local",
                    "upstream_local_address": f"10.0.0.2:{port}",
                    "downstream_local_address": "10.0.0.7:6379",
                    "downstream_remote_address": f"10.0.0.2:{port}",
                }
            )
        else:
            callee = c.role
            fqdn = f"{callee}.shop.svc.cluster.local"
            path = "/shop.Catalog/List" if callee == "catalog" else f"/cart?id={c.request}"
            method = "POST" if callee == "catalog" else "GET"
            where = f"{ADDRESSES[callee]}:{PORTS[callee]}"
            fields = entry | {
                "method": method,
                "path": path,
                "protocol": "HTTP/2" if callee == "catalog" else "HTTP/1.1",
                "authority": f"{callee}:{PORTS[callee]}",
                "upstream_host": where,
            }
            if c.kind == "client":
                out["frontend"].append(
                    fields
                    | {
                        "upstream_cluster": f"outbound|{PORTS[callee]}||{fqdn}",
                        "upstream_local_address": f"10.0.0.1:{port + 1000 * len(callee)}",
                        "downstream_local_address": where,
                        "downstream_remote_address": f"10.0.0.1:{port + 2000}",
                    }
                )
            else:
                out[callee].append(
                    fields
                    | {
                        "upstream_cluster": f"inbound|{PORTS[callee]}||",
                        "upstream_local_address": "127.0.0.6:52000",
                        "downstream_local_address": where,
                        "downstream_remote_address": f"10.0.0.1:{port + 1000 * len(callee)}",
                    }
                )
    return out


def envoy_line(e: dict) -> str:
    """An entry in Envoy's default format."""
    request = f"{e['method']} {e['path']} {e['protocol']}" if e["method"] else "- - -"

    def q(key: str) -> str:
        return f'"{e[key] if e[key] is not None else "-"}"'

    return (
        f'[{e["start_time"]}] "{request}" {e["response_code"]} {e["response_flags"]} '
        f"{e['bytes_received']} {e['bytes_sent']} {e['duration']} {e['upstream_service_time']} "
        f"{q('x_forwarded_for')} {q('user_agent')} {q('request_id')} {q('authority')} "
        f"{q('upstream_host')}"
    )


def write_sidecar_logs(d: Path, calls: list[Call], fmt: str) -> dict[str, Path]:
    """One log per sidecar in ``d``: ``fmt`` is ``envoy`` (Envoy's default format; frontend's
    log also holds a line of the proxy's own) or ``istio-json``."""
    files = {}
    for svc, entries in sidecar_entries(calls).items():
        entries = sorted(entries, key=lambda e: e["start_time"])
        if fmt == "envoy":
            lines = [envoy_line(e) for e in entries]
            if svc == "frontend":
                lines.insert(1, "2023-11-14T22:13:20.000000Z\tinfo\tEnvoy proxy is ready")
            path = d / f"{svc}.log"
        else:
            lines = [json.dumps(e) for e in entries]
            path = d / f"{svc}.jsonl"
        path.write_text("\n".join(lines) + "\n")
        files[svc] = path
    return files
