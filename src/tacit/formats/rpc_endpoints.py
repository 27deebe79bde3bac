"""The server end of an RPC as each side's span names it, from the OpenTelemetry semantic
conventions: what pairs a call with the request it made when no trace context crossed between
them (a propagator that carries nothing, a proxy that drops the headers).

A client span names the server it called: ``server.address`` and ``server.port`` (the stable
conventions), else the host and port of ``url.full`` (or the older ``http.url``), else
``net.peer.name`` and ``net.peer.port``. A server span names itself: ``server.address`` (or the
older ``net.host.name``, or the ``Host`` header, ``http.host``) and ``server.port`` (or
``net.host.port``; a port in the address, as the WSGI instrumentation writes the ``Host``
header there, wins). Both come from the same text, the host and port the client put in its
request (the ``Host`` header is its URL's), so a service reached by a DNS name, an IP address or
``localhost`` is named alike by both sides. A URL without a port has its scheme's (80, 443).

The key is ``HOST:PORT``, the host lower-cased; None when a span names no host and port.

Both sides also name the request's target, its path and query: a client span in its URL, a server
span as ``http.target`` (or ``url.path`` and ``url.query``). Calls to one server that overlap in
time are told apart by it where their targets differ (an id in the path or the query).

A message through a queue is named alike by its producer and its consumer span (read as a
client and a server span): the end is :data:`QUEUE` and the messaging system and destination
(``messaging.destination.name``, or the older ``messaging.destination``), the target the message
id (``messaging.message.id``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from tacit.model.spans import CLIENT, SERVER

_DEFAULT_PORTS = {"http": 80, "https": 443, "grpc": 80, "grpcs": 443}
QUEUE = "queue "
"""What the end of a producer or consumer span starts with: a message, not a request."""


def rpc_endpoint(kind: int, attributes: Mapping[str, Any]) -> str | None:
    """The ``HOST:PORT`` of the server end of a client or server span, or the queue of a
    producer or consumer span (None: not named)."""
    queue = _queue(attributes)
    if queue is not None:
        return queue
    if kind == CLIENT:
        return _client_end(attributes)
    if kind == SERVER:
        return _server_end(attributes)
    return None


def rpc_target(kind: int, attributes: Mapping[str, Any]) -> str | None:
    """The path and query of the request of a client or server span, or the id of a
    producer's or consumer's message (None: not named)."""
    if _queue(attributes) is not None:
        message = attributes.get("messaging.message.id")
        return None if message is None else str(message)
    if kind == CLIENT:
        url = attributes.get("url.full", attributes.get("http.url"))
        if not isinstance(url, str):
            return None
        parts = urlsplit(url)
        return (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    if kind == SERVER:
        target = attributes.get("http.target")
        if isinstance(target, str):
            return target
        path, query = attributes.get("url.path"), attributes.get("url.query")
        if isinstance(path, str):
            return path + (f"?{query}" if query else "")
    return None


def same_target(a: str | None, b: str | None) -> bool:
    """Whether two sides' targets can be one request's: either is not named, or their paths are
    equal and so are their queries where both name one (an eBPF agent records a server's path
    without its query)."""
    if a is None or b is None:
        return True
    path_a, has_a, query_a = a.partition("?")
    path_b, has_b, query_b = b.partition("?")
    return path_a == path_b and (not (has_a and has_b) or query_a == query_b)


def _queue(attrs: Mapping[str, Any]) -> str | None:
    destination = attrs.get("messaging.destination.name", attrs.get("messaging.destination"))
    if destination is None:
        return None
    return f"{QUEUE}{attrs.get('messaging.system', '')}/{destination}"


def _client_end(attrs: Mapping[str, Any]) -> str | None:
    host, port = attrs.get("server.address"), attrs.get("server.port")
    if host is not None and port is not None:
        return _key(host, port)
    url = attrs.get("url.full", attrs.get("http.url"))
    if isinstance(url, str):
        try:
            parts = urlsplit(url)
            port = parts.port or _DEFAULT_PORTS.get(parts.scheme.lower())
        except ValueError:  # a port that is not a number
            return None
        if parts.hostname and port:
            return _key(parts.hostname, port)
    host, port = attrs.get("net.peer.name"), attrs.get("net.peer.port")
    return _key(host, port) if host is not None and port is not None else None


def _server_end(attrs: Mapping[str, Any]) -> str | None:
    text = attrs.get("server.address", attrs.get("net.host.name", attrs.get("http.host")))
    if text is None:
        return None
    host, port = _split_host(str(text))
    if port is None:
        port = attrs.get("server.port", attrs.get("net.host.port"))
    return _key(host, port) if port is not None else None


def _split_host(text: str) -> tuple[str, str | None]:
    """``HOST[:PORT]`` (a ``Host`` header, which the WSGI instrumentation writes as the server's
    address) as its host and port; an IPv6 address has a port only in brackets."""
    name, colon, number = text.rpartition(":")
    if colon and number.isdigit() and (":" not in name or name.startswith("[")):
        return name, number
    return text, None


def _key(host: Any, port: Any) -> str | None:
    text = str(host).strip().lower()
    if text.startswith("[") and text.endswith("]"):  # an IPv6 literal as a URL writes it
        text = text[1:-1]
    try:
        number = int(port)
    except (TypeError, ValueError):
        return None
    return f"{text}:{number}" if text else None
