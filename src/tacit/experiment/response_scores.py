"""Scores of Pirate's live experiments beyond the estimator's own (:mod:`.asymmetric`):
§5.1's req-to-req reference, the per-epoch oracles that bound any one-estimate-per-epoch method,
and §5.3's RTT techniques on a capture of both directions."""

from __future__ import annotations

import numpy as np

from tacit.errors import ConfigError
from tacit.experiment.web_clients import ResponseLog
from tacit.model.packets import PacketTable
from tacit.response_latency import ErrorSummary
from tacit.response_latency.evaluate import trigger_from_completions
from tacit.response_latency.rtt_baselines import METHODS, SERVER, rtt_samples
from tacit.runs import distinct, split_at


def rtt_baselines(
    packets: PacketTable, server: str, log: ResponseLog, pirate: dict[str, ErrorSummary]
) -> dict[str, dict[str, float]]:
    """Pirate §5.3 (Fig. 5a): the RTT techniques on a capture of both directions at the client
    (:mod:`~tacit.response_latency.rtt_baselines`: tcptrace-style sequence/ACK, pping-style
    timestamp echo, the SYN-ACK handshake), each as the median of its samples of the round
    trip to the server, against the median response latency the client logged; Pirate's
    median per-response error beside them. The paper's finding: RTT techniques
    underestimate the response latency (they end at the first byte of a response)."""
    samples = rtt_samples(packets, server)
    truth = float(np.median(log.latency))
    out: dict[str, dict[str, float]] = {}
    for method in METHODS:
        rows = samples.select(method, SERVER)
        median = float(np.median(samples.rtt[rows])) if len(rows) else float("nan")
        out[method] = {"samples": len(rows), "median_vs_latency": median / truth - 1}
    for name, s in pirate.items():
        out[f"pirate {name}"] = {"samples": s.samples, "median_vs_latency": s.median_signed_error}
    return out


def req_to_req_errors(log: ResponseLog) -> ErrorSummary:
    """§5.1's req-to-req reference, per response: from the request to the first request its
    response triggered (:func:`trigger_from_completions`), against the response's req-to-res
    latency. Responses that triggered nothing are not scored."""
    trigger = trigger_from_completions(log.port, log.sent, log.received)
    first = np.full(len(log), -1, dtype=np.int64)
    rows = np.flatnonzero(trigger >= 0)
    rows = rows[np.argsort(log.sent[rows], kind="stable")[::-1]]  # the earliest one wins
    first[trigger[rows]] = rows
    has = first >= 0
    latency = log.latency[has].astype(float)
    return ErrorSummary.from_signed(
        (log.sent[first[has]] - log.sent[has] - latency) / latency,
        connections=len(distinct(log.port[has])),
        unscored_estimates=0,
        unmatched=int((~has).sum()),
    )


def epoch_oracle_errors(log: ResponseLog, epoch_ns: int, statistic: str) -> ErrorSummary:
    """The per-response error of an oracle that knows each (connection, epoch)'s true
    ``statistic`` ("mean" or "median") of the latencies completing in it: the best any one
    estimate per epoch can do on this metric, and so how much of an estimator's per-response
    error is the spread of the latencies within an epoch."""
    latency = log.latency.astype(float)
    key = log.port.astype(np.int64) * (1 << 40) + log.received // epoch_ns
    _, inverse = np.unique(key, return_inverse=True)
    if statistic == "mean":
        value = np.bincount(inverse, weights=latency) / np.bincount(inverse)
    elif statistic == "median":
        order = np.argsort(inverse, kind="stable")
        groups = split_at(latency[order], np.cumsum(np.bincount(inverse))[:-1])
        value = np.array([np.median(g) for g in groups])
    else:
        raise ConfigError(f"unknown statistic {statistic!r}: expected mean or median")
    return ErrorSummary.from_signed(
        (value[inverse] - latency) / latency,
        connections=len(distinct(log.port)),
        unscored_estimates=0,
        unmatched=0,
    )
