"""Client and Internet path: split RPCs into server-, network- and client-bound (YTrace).

YTrace ("End-to-end Performance Diagnosis in Large Cloud and Content Providers", Kanuparthy et
al.) diagnoses a slow user session across the server, the Internet path and the client. Its
network view is the server's TCP connection statistics (``tcp_info``, here as ``ss -tin``
prints them): smoothed RTT, RTO and retransmissions; the paper uses them "to localize throughput
bottlenecks to sender (content generation), receiver and path-based limitations". It states no
decision rule; the rules below are tacit's, and marked as ours:

* network time of an RPC ≈ ``srtt + k × rto`` for ``k`` retransmissions during it: a response's
  first byte crosses the path once per round trip, and each retransmission waits about one RTO
  (RFC 6298 §5). Ours: the RTO as the cost of a retransmission.
* an RPC is **network-bound** when the network's share of ``network + server`` exceeds
  :attr:`PathSplitParams.network_share`, **server-bound** otherwise — the larger share names
  the layer, as YTrace's localization does; **client-bound** when even the lower bound on the
  client's stack latency exceeds ``server + network`` (ours: the client is named only when the
  bound proves it).
* the lower bound on the client stack latency is the paper's video case study: first-byte
  delay minus RTT minus server-side latency, with the RTO as a conservative (high) RTT. With
  ``k`` retransmissions the first byte may have waited for each of them, so we subtract the RTO
  with exponential backoff, ``rto × (2^(k+1) − 1)`` (RFC 6298 §5.5), to keep it a lower bound.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tacit.model.columns import NONE
from tacit.model.tcp_info import TcpInfoTable

BOUNDS = ("server", "network", "client")
"""Names of the :attr:`PathSplit.bound` codes (-1: undetermined, no connection statistics)."""
SERVER, NETWORK, CLIENT = range(3)

MAX_BACKOFFS = 16
"""Retransmissions counted in the backoff of the client bound (Linux gives up after 15)."""


@dataclass(frozen=True)
class PathSplitParams:
    """Parameters of :func:`split_rpcs`."""

    network_share: float = 0.5
    """Network-bound when network / (network + server) is above this: the larger share of the
    latency names the layer (YTrace's localization to the dominant layer)."""


@dataclass
class RpcTcpStats:
    """The connection statistics of each RPC (ns; -1 where its connection was not sampled)."""

    rtt: np.ndarray
    rttvar: np.ndarray
    minrtt: np.ndarray
    rto: np.ndarray
    retransmissions: np.ndarray
    """Segments retransmitted on the connection during the RPC."""
    matched: np.ndarray
    """True where a sample of the RPC's connection was found."""


def rpc_tcp_stats(
    table: TcpInfoTable, connections: Sequence[str], start: np.ndarray, end: np.ndarray
) -> RpcTcpStats:
    """The statistics of each RPC's connection (``LOCAL PEER`` as ``ss`` prints them, see
    :meth:`TcpInfoTable.connection_keys`) while it ran from ``start`` to ``end`` (ns).

    The RTT, RTO and minimum RTT are those of the latest sample at or before ``end``. The
    retransmissions are the growth of the connection's retransmission counter from the latest
    sample at or before ``start`` — or from 0 when there is none, which is exact for a
    connection opened for the RPC and otherwise errs towards the network. Without timestamps
    in the ``ss`` output, the connection's last sample stands for every RPC on it.
    """
    start = np.asarray(start, dtype=np.int64)
    end = np.asarray(end, dtype=np.int64)
    keys = table.connection_keys()
    codes_of: dict[str, int] = {}
    sample_code = np.array([codes_of.setdefault(k, len(codes_of)) for k in keys], dtype=np.int64)
    rpc_code = np.array([codes_of.get(k, NONE) for k in connections], dtype=np.int64)
    timed = table.time != NONE
    if timed.any():
        rows = np.flatnonzero(timed)
        at_end = _latest(sample_code[rows], table.time[rows], rpc_code, end)
        at_start = _latest(sample_code[rows], table.time[rows], rpc_code, start)
        at_end = np.where(at_end >= 0, rows[at_end], NONE)
        at_start = np.where(at_start >= 0, rows[at_start], NONE)
    else:
        last = np.full(len(codes_of), NONE, dtype=np.int64)
        last[sample_code] = np.arange(len(table))  # rows are in file order: the last wins
        at_end = np.full(len(rpc_code), NONE, dtype=np.int64)
        known = rpc_code >= 0
        at_end[known] = last[rpc_code[known]]
        at_start = np.full(len(rpc_code), NONE, dtype=np.int64)
    matched = at_end >= 0
    e = np.maximum(at_end, 0)

    def pick(col: np.ndarray) -> np.ndarray:
        out = np.full(len(e), NONE, dtype=col.dtype)
        out[matched] = col[e[matched]]
        return out

    total = np.maximum(table.retrans_total, 0)
    before = np.zeros(len(at_start), dtype=total.dtype)
    before[at_start >= 0] = total[at_start[at_start >= 0]]
    retrans = pick(total)
    retrans[matched] = np.maximum(retrans[matched] - before[matched], 0)
    return RpcTcpStats(
        rtt=pick(table.rtt),
        rttvar=pick(table.rttvar),
        minrtt=pick(table.minrtt),
        rto=pick(table.rto),
        retransmissions=retrans,
        matched=matched,
    )


def _latest(
    sample_code: np.ndarray, sample_time: np.ndarray, code: np.ndarray, at: np.ndarray
) -> np.ndarray:
    """Index (into the samples) of the latest sample with the same code at or before ``at``,
    -1 when there is none: one sorted search on (code, rank of time) keys."""
    _, rank = np.unique(np.r_[sample_time, at], return_inverse=True)
    width = len(rank) + 1
    s_key = sample_code * width + rank[: len(sample_time)]
    order = np.argsort(s_key, kind="stable")
    q_key = code * width + rank[len(sample_time) :]
    i = np.searchsorted(s_key[order], q_key, side="right") - 1
    found = (i >= 0) & (code >= 0)
    found[found] = sample_code[order[i[found]]] == code[found]
    return np.where(found, order[np.maximum(i, 0)], NONE)


@dataclass
class PathSplit:
    """Where each RPC's latency went (ns) and which layer it is bound by."""

    server: np.ndarray
    network: np.ndarray
    """Estimated network time: ``srtt + retransmissions × rto``; -1 when not sampled."""
    client_lower: np.ndarray
    """Lower bound on the client stack latency; -1 when the first byte or stats are unknown."""
    bound: np.ndarray
    """Codes into :data:`BOUNDS`; -1 when undetermined."""
    stats: RpcTcpStats
    first_byte: np.ndarray

    def __len__(self) -> int:
        return len(self.bound)

    def bound_names(self) -> list[str | None]:
        return [BOUNDS[b] if b >= 0 else None for b in self.bound.tolist()]

    def counts(self) -> dict[str, int]:
        """RPCs per bound, ``undetermined`` included: every RPC is counted once."""
        out = {name: int(np.count_nonzero(self.bound == code)) for code, name in enumerate(BOUNDS)}
        out["undetermined"] = int(np.count_nonzero(self.bound < 0))
        return out

    def features(self, i: int) -> dict[str, Any]:
        """The features of RPC ``i`` that the root-cause rules read (:mod:`.rules`): its
        bound as ``server_bound`` / ``network_bound`` / ``client_bound`` and the numbers."""
        s = self.stats
        b = int(self.bound[i])
        known = b >= 0
        feats: dict[str, Any] = {
            f"{name}_bound": (b == code) if known else None for code, name in enumerate(BOUNDS)
        }
        numbers = {
            "first_byte_ns": self.first_byte,
            "server_ns": self.server,
            "network_ns": self.network,
            "client_lower_ns": self.client_lower,
            "rtt_ns": s.rtt,
            "rttvar_ns": s.rttvar,
            "minrtt_ns": s.minrtt,
            "rto_ns": s.rto,
            "retransmissions": s.retransmissions,
        }
        for name, col in numbers.items():
            v = int(col[i])
            feats[name] = v if v >= 0 else None
        return feats


def split_rpcs(
    first_byte: np.ndarray,
    server: np.ndarray,
    stats: RpcTcpStats,
    params: PathSplitParams | None = None,
) -> PathSplit:
    """Split RPCs into server-, network- and client-bound (see the module docstring).

    ``first_byte``: the client's delay from sending the request to the first byte of the
    response (ns; -1 when unknown); ``server``: the server-side latency (ns).
    """
    p = params or PathSplitParams()
    first_byte = np.asarray(first_byte, dtype=np.int64)
    server = np.asarray(server, dtype=np.int64)
    ok = stats.matched & (server >= 0)
    k = np.maximum(stats.retransmissions, 0)
    network = np.where(ok, stats.rtt + k * stats.rto, NONE)
    backoff = (1 << (np.minimum(k, MAX_BACKOFFS) + 1)) - 1
    has_first = ok & (first_byte >= 0)
    client = np.where(has_first, np.maximum(first_byte - server - stats.rto * backoff, 0), NONE)
    total = np.maximum(network + server, 1)
    bound = np.where(network / total > p.network_share, NETWORK, SERVER)
    bound = np.where(has_first & (client > network + server), CLIENT, bound)
    bound = np.where(ok, bound, NONE).astype(np.int8)
    return PathSplit(server, network, client, bound, stats, first_byte)
