"""Scoring Pirate's estimates against the latencies clients saw (Pirate §5.1, "Definition of
accuracy": the relative error ``(latency_B − latency_T) / latency_B`` of a technique T against
the baseline B, the latency the client's application measured).

Two granularities: :func:`score_responses` is the paper's (§5.2: "across all responses"), one
error per response against the estimate of its connection's epoch; :func:`score_estimates`
and :func:`score_causal_pairs` give one error per (connection, epoch), against the mean of its
responses' latencies or of its causal pairs' gaps. tacit's sign is ``(estimate − truth) /
truth``, the paper's negated: positive when the estimate is high.

Matching, precisely: a true request (connection, request time ``t``, latency ``L``) belongs to
the epoch of its connection that contains its *completion* ``t + L``, the moment the client had
the whole response. That is where its causal gap ends: the request the response triggers
follows the completion, and the estimator files a gap under the epoch of the packet that ends
it. Each (connection, epoch) that has an estimate and at least one true request is scored by
``|estimate − mean(L)| / mean(L)``; estimates without requests and requests without estimates
are counted, not scored. Truth times must be on the capture's clock, or near it compared to an
epoch (a client's clock differs from a capture point's by the one-way delay and clock offset).

Truth rows name their connection by its index in ``estimates.connections``, or by the client's
endpoint: ``"ADDR:PORT"`` strings, or a tuple of arrays ``(address_hi, address_lo, port)`` in
:class:`~tacit.model.packets.PacketTable`'s address form.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from tacit.errors import ConfigError
from tacit.model.captures import PacketRead
from tacit.model.packets import parse_endpoint
from tacit.response_latency.estimator import ResponseEstimates
from tacit.response_latency.rtt_baselines import METHODS, rtt_samples
from tacit.response_latency.truth import RequestTruth, request_truth
from tacit.runs import distinct


@dataclass
class ErrorSummary:
    """Relative errors of the scored (connection, epoch) estimates.

    ``connections``: connections with at least one scored epoch; ``samples``: scored epochs
    (responses, for :func:`score_responses`); ``median/p5/p95_relative_error`` of
    ``|estimate − truth| / truth`` (NaN when nothing was scored); ``median/p5/p95_signed_error``
    of ``(estimate − truth) / truth`` (bias and tails); ``unscored_estimates``: estimates without
    a true request in their epoch; ``unmatched_requests``: true requests whose connection is
    unknown or whose epoch has no estimate. ``relative_errors``: the scored errors, by
    connection then epoch (then response); ``signed_errors`` likewise.
    """

    connections: int
    samples: int
    median_relative_error: float
    p5_relative_error: float
    p95_relative_error: float
    median_signed_error: float
    p5_signed_error: float
    p95_signed_error: float
    unscored_estimates: int
    unmatched_requests: int
    relative_errors: np.ndarray = field(repr=False)
    signed_errors: np.ndarray = field(repr=False)

    @classmethod
    def from_signed(
        cls, signed: np.ndarray, connections: int, unscored_estimates: int, unmatched: int
    ) -> ErrorSummary:
        """The summary of the signed relative errors ``signed``, with the counts given."""
        signed = np.asarray(signed, dtype=float)
        errors = np.abs(signed)

        def pct(values: np.ndarray, q: float) -> float:
            return float(np.percentile(values, q)) if len(values) else float("nan")

        return cls(
            connections=connections,
            samples=len(signed),
            median_relative_error=pct(errors, 50),
            p5_relative_error=pct(errors, 5),
            p95_relative_error=pct(errors, 95),
            median_signed_error=pct(signed, 50),
            p5_signed_error=pct(signed, 5),
            p95_signed_error=pct(signed, 95),
            unscored_estimates=unscored_estimates,
            unmatched_requests=unmatched,
            relative_errors=errors,
            signed_errors=signed,
        )

    def as_dict(self) -> dict:
        """The summary as a JSON-ready dict (without the per-epoch errors)."""
        return {
            "connections": self.connections,
            "samples": self.samples,
            "median_relative_error": self.median_relative_error,
            "p5_relative_error": self.p5_relative_error,
            "p95_relative_error": self.p95_relative_error,
            "median_signed_error": self.median_signed_error,
            "p5_signed_error": self.p5_signed_error,
            "p95_signed_error": self.p95_signed_error,
            "unscored_estimates": self.unscored_estimates,
            "unmatched_requests": self.unmatched_requests,
        }


def truth_connections(
    estimates: ResponseEstimates,
    truth_connection: np.ndarray | Sequence[str] | tuple[np.ndarray, np.ndarray, np.ndarray],
) -> np.ndarray:
    """Connection indices (-1: unknown) of truth rows named as :func:`score_estimates` takes."""
    table = estimates.connections
    if isinstance(truth_connection, tuple):
        hi, lo, port = (np.asarray(a) for a in truth_connection)
        return table.find_clients(hi.astype(np.uint64), lo.astype(np.uint64), port)
    arr = np.asarray(truth_connection)
    if arr.dtype.kind in "iu":
        return np.where((arr >= 0) & (arr < len(table)), arr, -1).astype(np.int64)
    if arr.dtype.kind not in "UO":
        raise ConfigError(f"truth connections must be indices or ADDR:PORT, got {arr.dtype}")
    names, inverse = np.unique(arr.astype(str), return_inverse=True)
    parsed = [parse_endpoint(n) for n in names]
    if any(p is None for *_, p in parsed):
        raise ConfigError("a truth client endpoint has no port (expected ADDR:PORT)")
    hi = np.array([h for h, _, _ in parsed], dtype=np.uint64)
    lo = np.array([lo for _, lo, _ in parsed], dtype=np.uint64)
    port = np.array([p for *_, p in parsed], dtype=np.int64)
    return table.find_clients(hi, lo, port)[inverse]


def score_estimates(
    estimates: ResponseEstimates,
    truth_connection: np.ndarray | Sequence[str] | tuple[np.ndarray, np.ndarray, np.ndarray],
    truth_time_ns: np.ndarray,
    truth_latency_ns: np.ndarray,
) -> ErrorSummary:
    """Score ``estimates`` against the mean response latency of the true requests completing in
    each (connection, epoch) (module docstring for the matching)."""
    t = np.asarray(truth_time_ns, dtype=np.int64)
    lat = np.asarray(truth_latency_ns, dtype=np.int64)
    if not len(t) == len(lat):
        raise ConfigError("truth columns differ in length")
    return _score(estimates, truth_connection, t + lat, lat)


def score_responses(
    estimates: ResponseEstimates,
    truth_connection: np.ndarray | Sequence[str] | tuple[np.ndarray, np.ndarray, np.ndarray],
    truth_time_ns: np.ndarray,
    truth_latency_ns: np.ndarray,
) -> ErrorSummary:
    """Score ``estimates`` per response, as Pirate §5.2 does ("across all responses"): each
    true request against the estimate of the (connection, epoch) its completion falls in."""
    t = np.asarray(truth_time_ns, dtype=np.int64)
    lat = np.asarray(truth_latency_ns, dtype=np.int64)
    if not len(t) == len(lat):
        raise ConfigError("truth columns differ in length")
    return _score(estimates, truth_connection, t + lat, lat, per_response=True)


def score_causal_pairs(
    estimates: ResponseEstimates,
    truth_connection: np.ndarray | Sequence[str] | tuple[np.ndarray, np.ndarray, np.ndarray],
    truth_time_ns: np.ndarray,
    trigger: np.ndarray,
) -> ErrorSummary:
    """Score ``estimates`` against what Pirate estimates (§3): the gap of each *causal pair*,
    from the first byte of the request whose response triggered a request to that request's
    first byte.

    ``trigger``: per request, the row of the request that triggered it, -1 for none
    (:func:`trigger_from_completions` makes it from a client log, :func:`trigger_from_triggered`
    from the capture truth's ``triggered``). A pair is filed under the epoch of the triggered
    request, as the estimator files the gap that request's packet ends; each scored
    (connection, epoch) compares the estimate with the mean gap of its pairs.
    ``unmatched_requests`` counts causal pairs here."""
    t = np.asarray(truth_time_ns, dtype=np.int64)
    by = np.asarray(trigger, dtype=np.int64)
    conn = truth_connections(estimates, truth_connection)
    if not len(conn) == len(t) == len(by):
        raise ConfigError("truth columns differ in length")
    if np.any(by >= len(t)):
        raise ConfigError("a trigger row is out of range")
    pair = np.flatnonzero(by >= 0)
    pair = pair[conn[pair] == conn[by[pair]]]
    return _score(estimates, conn[pair], t[pair], t[pair] - t[by[pair]])


def trigger_from_completions(
    connection: np.ndarray, sent_ns: np.ndarray, received_ns: np.ndarray
) -> np.ndarray:
    """Per request of a client log (``connection``, ``sent_ns``, ``received_ns`` on one clock),
    its trigger: the request of the same connection whose response was read last before it was
    sent (-1: none). A client that sends as soon as a response lets it (the one that names the
    request, or one that frees a pipeline slot) is triggered by exactly that response."""
    conn = np.asarray(connection, dtype=np.int64)
    sent = np.asarray(sent_ns, dtype=np.int64)
    done = np.asarray(received_ns, dtype=np.int64)
    out = np.full(len(conn), -1, dtype=np.int64)
    for c in distinct(conn):
        rows = np.flatnonzero(conn == c)
        by_done = rows[np.argsort(done[rows], kind="stable")]
        k = np.searchsorted(done[by_done], sent[rows], side="right") - 1
        out[rows] = np.where(k >= 0, by_done[np.maximum(k, 0)], -1)
    return out


def trigger_from_triggered(triggered: np.ndarray) -> np.ndarray:
    """The capture truth's ``triggered`` (per request, the first request sent after its response
    ended) as triggers: per request, the latest request whose response triggered it (responses
    come in request order, so that is the response read last before it was sent)."""
    triggered = np.asarray(triggered, dtype=np.int64)
    out = np.full(len(triggered), -1, dtype=np.int64)
    rows = np.flatnonzero(triggered >= 0)
    np.maximum.at(out, triggered[rows], rows)
    return out


def score_capture_truth(
    estimates: ResponseEstimates, truth: RequestTruth
) -> tuple[ErrorSummary, ErrorSummary]:
    """Score ``estimates`` against the truth parsed from both directions of their capture
    (:func:`~tacit.response_latency.truth.request_truth`): against the response latency of the
    answered requests completing in each epoch, and against the causal pairs' gaps."""
    clients = np.array([c.client for c in truth.connections] + [""], dtype=object)
    client = clients[truth.connection].astype(str)
    answered = truth.answered
    latency = score_estimates(
        estimates,
        client[answered],
        truth.request_first[answered],
        truth.response_latency[answered].astype(np.int64),
    )
    trigger = trigger_from_triggered(truth.triggered)
    return latency, score_causal_pairs(estimates, client, truth.request_first, trigger)


def score_capture(read: PacketRead, estimates: ResponseEstimates, server: str | None) -> dict:
    """``estimates`` of a capture scored against the truth parsed from its both directions
    (:func:`score_capture_truth`: the mean response latency per connection and epoch, and, as
    ``causal_pairs``, the request-to-triggered-request gaps that Pirate estimates), with the
    truth's summary and the RTT baselines' median (:mod:`.rtt_baselines`)."""
    t = request_truth(read, server=server)
    summary, causal = score_capture_truth(estimates, t)
    rtt = rtt_samples(read.packets, server=server)
    baselines = {}
    for i, name in enumerate(METHODS):
        sel = rtt.rtt[rtt.method == i]
        baselines[name] = {
            "samples": len(sel),
            "median_rtt_ns": float(np.median(sel)) if len(sel) else None,
        }
    latency = t.response_latency[t.answered]
    return {
        **{k: v for k, v in summary.as_dict().items() if k != "connections"},
        "scored_connections": summary.connections,
        "causal_pairs": causal.as_dict(),
        "truth": t.as_dict(),
        "median_true_latency_ns": float(np.median(latency)) if len(latency) else None,
        "rtt_baselines": baselines,
    }


def _score(
    estimates: ResponseEstimates,
    truth_connection: np.ndarray | Sequence[str] | tuple[np.ndarray, np.ndarray, np.ndarray],
    end_ns: np.ndarray,
    value_ns: np.ndarray,
    per_response: bool = False,
) -> ErrorSummary:
    """Score ``estimates`` against the true values (ns) whose ``end_ns`` falls in their
    (connection, epoch): against their mean per epoch, or each value on its own
    (``per_response``)."""
    conn = truth_connections(estimates, truth_connection)
    lat = np.asarray(value_ns, dtype=np.int64)
    if not len(conn) == len(end_ns) == len(lat):
        raise ConfigError("truth columns differ in length")
    epoch_ns = estimates.params.epoch_ns
    known = conn >= 0
    t_epoch = np.asarray(end_ns, dtype=np.int64)[known] // epoch_ns
    e_epoch = estimates.epoch_start // epoch_ns
    lo = min(int(t_epoch.min()) if len(t_epoch) else 0, int(e_epoch.min()) if len(e_epoch) else 0)
    hi = max(int(t_epoch.max()) if len(t_epoch) else 0, int(e_epoch.max()) if len(e_epoch) else 0)
    span = hi - lo + 1
    t_key = conn[known] * span + (t_epoch - lo)
    e_key = estimates.connection * span + (e_epoch - lo)
    keys, inverse = np.unique(t_key, return_inverse=True)
    requests = np.bincount(inverse, minlength=len(keys))
    at = np.minimum(np.searchsorted(keys, e_key), max(len(keys) - 1, 0))
    scored = keys[at] == e_key if len(keys) else np.zeros(len(e_key), dtype=bool)
    matched_keys = np.zeros(len(keys), dtype=bool)
    matched_keys[at[scored]] = True
    unmatched = int((~known).sum()) + int(requests[~matched_keys].sum())
    if per_response:
        # Each response against its epoch's estimate (estimates have one row per key).
        estimate_of_key = np.zeros(len(keys), dtype=np.int64)
        estimate_of_key[at[scored]] = estimates.latency_ns[scored]
        rows = matched_keys[inverse]
        truth = lat[known][rows].astype(float)
        estimate = estimate_of_key[inverse[rows]]
        order = np.lexsort((t_epoch[rows], conn[known][rows]))
        truth, estimate = truth[order], estimate[order]
    else:
        truth = (np.bincount(inverse, weights=lat[known]) / np.maximum(requests, 1))[at[scored]]
        estimate = estimates.latency_ns[scored]
    return ErrorSummary.from_signed(
        (estimate - truth) / truth,
        connections=len(distinct(estimates.connection[scored])),
        unscored_estimates=int((~scored).sum()),
        unmatched=unmatched,
    )
