"""Ground truth for response latency, from both directions of a packet capture.

Pirate (Vannarth Shobhana et al., "Measuring Response Latencies Under Asymmetric Routing",
arXiv 2505.14358) sees only client → server packets and estimates, per connection, the time from
a request to the request its response triggered (§3, the *causal pair*), as a proxy for the
response latency the client sees (§2, Fig. 1: first byte of the request to last byte of the
response). This module computes what it is scored against from a capture that holds both
directions: every request and response on every TCP connection, with the capture time of its
first and last byte.

Every request and response of every TCP connection is read by
:func:`tacit.formats.exchanges.read_exchanges` (connections told client from server exactly as
the estimator does, streams reassembled, HTTP/1.1, HTTP/2 and gRPC, Redis and memcached parsed,
every packet and byte accounted for). On top of them this module finds, for each request, the
request its response triggered: the first later request on the connection whose first byte was
captured at or after the last byte of its response; the *causal pair* gap is the time between
the two first bytes (Pirate §3).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from tacit.formats.exchanges import ExchangeParams, Exchanges, read_exchanges
from tacit.model.captures import PacketRead
from tacit.model.messages import MISSING


@dataclass
class RequestTruth(Exchanges):
    """Every request of a capture (:class:`~tacit.formats.exchanges.Exchanges`) and
    ``triggered``: the row of the request this one's response triggered (module docstring), or
    -1."""

    triggered: np.ndarray

    @property
    def response_latency(self) -> np.ndarray:
        """Last byte of the response − first byte of the request (ns; NaN without one)."""
        return _gap(self.request_first, self.response_last)

    @property
    def triggered_gap(self) -> np.ndarray:
        """First byte of the triggered request − first byte of this one (ns; NaN without one):
        the causal pair gap Pirate estimates (§3)."""
        nxt = np.where(self.triggered >= 0, self.request_first[self.triggered], MISSING)
        return _gap(self.request_first, nxt)

    def as_dict(self) -> dict:
        """A JSON-ready summary: accounting, per-protocol latency quantiles, connections."""
        lat = self.response_latency
        out: dict = {"accounting": self.accounting.as_dict(), "latency_ms": {}}
        protocols = np.array([c.protocol or "" for c in self.connections] + [""])
        proto = protocols[self.connection] if len(self) else protocols[:0]
        for name in sorted(set(proto.tolist())):
            v = lat[(proto == name) & ~np.isnan(lat)] / 1e6
            if len(v):
                q = np.percentile(v, [50, 90, 99])
                out["latency_ms"][name] = {
                    "count": len(v),
                    "mean": round(float(v.mean()), 3),
                    **{
                        k: round(float(x), 3) for k, x in zip(("p50", "p90", "p99"), q, strict=True)
                    },
                }
        gaps = self.triggered_gap
        out["causal_pairs"] = int((~np.isnan(gaps)).sum())
        out["connections"] = [
            {k: getattr(c, k) for k in ("client", "server", "protocol", "how", "requests")}
            | ({"unparsed": c.unparsed} if c.unparsed else {})
            for c in self.connections
        ]
        return out


def _gap(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    ok = (start != MISSING) & (end != MISSING)
    return np.where(ok, (end - np.where(ok, start, 0)).astype(np.float64), np.nan)


def request_truth(
    read: PacketRead,
    server: str | None = None,
    protocol: str = "auto",
    params: ExchangeParams | None = None,
) -> RequestTruth:
    """Every request and response of every TCP connection in ``read`` (which must have been read
    with ``payloads=True``), with the request each response triggered. ``server``, ``protocol``
    and ``params`` as :func:`~tacit.formats.exchanges.read_exchanges` takes them."""
    ex = read_exchanges(read, server, protocol, params)
    triggered = _triggered(ex.connection, ex.request_first, ex.response_last)
    return RequestTruth(**vars(ex), triggered=triggered)


@njit(cache=True)
def _next_request(connection, first, last, out):
    n = connection.size
    for i in range(n):
        if last[i] == MISSING:
            continue
        j = i + 1
        while j < n and connection[j] == connection[i] and first[j] < last[i]:
            j += 1
        if j < n and connection[j] == connection[i]:
            out[i] = j


def _triggered(connection: np.ndarray, first: np.ndarray, last: np.ndarray) -> np.ndarray:
    out = np.full(len(connection), -1, dtype=np.int64)
    if len(out):
        _next_request(connection, first, last, out)
    return out
