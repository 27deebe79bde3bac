"""WAP5 message linking (Reynolds et al., WWW '06, §5.1): which received message caused each send.

For a message *i* sent by node B to node C, every message *j* that B received from some node A
within ``window_s`` before sending *i* is a possible cause, at the causal delay
``d = send_i − recv_j`` (both on B's clock, so clock offsets never enter). WAP5 models the
causal delay of each (A, B, C) triple as exponential with the triple's mean delay, estimated from
the trace itself: over the B→C messages whose latest preceding receipt (within the window) came
from A, the mean delay from that receipt (a triple never seen so gets the window as its mean,
the flattest weight). A cause's weight is the exponential density at its delay,
``w = λ·exp(−λ·d)`` with ``λ = 1/mean``. The message may also be spontaneous (sent on B's own
initiative); that alternative weighs as a cause at ``spontaneous_factor`` times the mean delay,
in the triple of the heaviest candidate: spontaneity wins over a lone candidate exactly when the
candidate is later than ``y`` of its triple's mean delays. Weights are normalized into the
probabilities of each possible cause and of spontaneity.

Untraced nodes (§5.1): a node that left no log is visible only through its peers. Only the
pattern A→B→A is inferred there: a message from an untraced B to A can be caused only by a
message from A to B, at the delay ``recv_i − send_j`` (both on A's clock). Where the connection
(``flow``) is known, the cause must be the previous message of the same connection, and a
message that opens a connection from an untraced node (a client's request) is spontaneous.

Everything is vectorized over candidate pairs; candidates per message are capped at the
``max_causes`` most recent (a guard: with exponential weights, older candidates carry
negligible probability).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tacit.model.messages import MISSING, MessageTable

NS = 1_000_000_000


@dataclass(frozen=True)
class LinkParams:
    """Parameters of message linking.

    The WAP5 paper names these parameters (x, y, and the thresholds and k of path building in
    :mod:`.patterns`); the values here are tacit's, chosen for traces of RPC systems and stated
    with their reasons, because the paper's text was not available to check its defaults.
    """

    window_s: float = 1.0
    """x: how long before a send a received message can still have caused it (s). A second
    covers node processing delays of RPC servers and wide-area proxies alike."""
    spontaneous_factor: float = 5.0
    """y: spontaneity weighs as a cause ``y`` mean delays back. Under the exponential model a
    true cause is that late with probability exp(−5) < 1%."""
    max_causes: int = 64
    """Most recent candidate causes kept per message (a guard; see the module docstring)."""
    min_mean_delay_ns: int = 1_000
    """Floor of a mean causal delay (1 µs), so that coarse timestamps (many zero delays) still
    give a finite rate."""


@dataclass
class Links:
    """Possible causes of every message, with probabilities.

    Pairs ``cause[k] → effect[k]`` with ``prob[k]`` and ``delay[k]`` (ns), sorted by effect.
    ``spontaneous[i]`` is the probability that message ``i`` had no cause among the traced
    messages; ``best[i]`` the most likely cause (-1: spontaneous).
    """

    cause: np.ndarray
    effect: np.ndarray
    prob: np.ndarray
    delay: np.ndarray
    spontaneous: np.ndarray
    best: np.ndarray
    mean_delay: dict[tuple[str, str, str], float]
    """Estimated mean causal delay (ns) per (from, at, to) node triple."""


def link_messages(messages: MessageTable, params: LinkParams | None = None) -> Links:
    """Link every message to its possible causes (WAP5 §5.1); see the module docstring."""
    p = params or LinkParams()
    n = len(messages)
    window = int(p.window_s * NS)
    cause, effect, delay = _traced_candidates(messages, window, p.max_causes)
    c2, e2, d2 = _untraced_candidates(messages, window, p.max_causes)
    cause = np.concatenate([cause, c2])
    effect = np.concatenate([effect, e2])
    delay = np.concatenate([delay, d2])
    order = np.lexsort((delay, effect))
    cause, effect, delay = cause[order], effect[order], delay[order]

    src, dst = messages.src.astype(np.int64), messages.dst.astype(np.int64)
    m = max(int(max(src.max(initial=0), dst.max(initial=0))) + 1, 1)
    triple = (src[cause] * m + src[effect]) * m + dst[effect]

    # Mean delay per triple (A, B, C): over the B→C sends whose latest preceding receipt came
    # from A, the delay from that receipt.
    latest = _first_of_groups(effect)  # sorted by delay within each effect
    t_keys, t_inv = np.unique(triple[latest], return_inverse=True)
    t_mean = np.bincount(t_inv, weights=delay[latest]) / np.bincount(t_inv)
    t_mean = np.maximum(t_mean, p.min_mean_delay_ns)
    # A triple never seen as the latest receipt: the window as its mean (the flattest weight).
    at = np.minimum(np.searchsorted(t_keys, triple), max(len(t_keys) - 1, 0))
    seen = t_keys[at] == triple if len(t_keys) else np.zeros(len(triple), bool)
    mean = np.where(seen, t_mean[at] if len(t_keys) else 0.0, float(window))
    log_w = -np.log(mean) - delay / mean
    # Spontaneity: a cause ``y`` mean delays back, in the triple of the heaviest candidate.
    log_s = np.zeros(n)  # messages without candidates: spontaneous with probability 1
    if len(log_w):
        heavy = np.lexsort((-log_w, effect))
        heavy = heavy[_first_of_groups(effect[heavy])]
        log_s[effect[heavy]] = -np.log(mean[heavy]) - p.spontaneous_factor

    # Normalize per effect over its causes and spontaneity (log-sum-exp).
    top = log_s.copy()
    np.maximum.at(top, effect, log_w)
    total = np.exp(log_s - top)
    np.add.at(total, effect, np.exp(log_w - top[effect]))
    prob = np.exp(log_w - top[effect]) / total[effect]
    spontaneous = np.exp(log_s - top) / total

    best = np.full(n, -1, dtype=np.int64)
    if len(prob):
        by_prob = np.lexsort((-prob, effect))
        lead = by_prob[_first_of_groups(effect[by_prob])]
        win = prob[lead] > spontaneous[effect[lead]]
        best[effect[lead[win]]] = cause[lead[win]]

    names = messages.strings.values
    mean_delay = {}
    for key, value in zip(t_keys.tolist(), t_mean.tolist(), strict=True):
        a, rest = divmod(key, m * m)
        b, c = divmod(rest, m)
        mean_delay[(names[a], names[b], names[c])] = value
    return Links(cause, effect, prob, delay, spontaneous, best, mean_delay)


def _first_of_groups(keys: np.ndarray) -> np.ndarray:
    """Index of the first element of each run of equal keys, for keys sorted by effect (and by
    delay within an effect); a stable sort keeps that order inside each group."""
    if not len(keys):
        return np.empty(0, dtype=np.int64)
    order = np.argsort(keys, kind="stable")
    k = keys[order]
    starts = np.flatnonzero(np.r_[True, k[1:] != k[:-1]])
    return order[starts]


def _window_pairs(
    in_key: np.ndarray,
    in_time: np.ndarray,
    out_key: np.ndarray,
    out_time: np.ndarray,
    window: int,
    max_causes: int,
) -> tuple[np.ndarray, np.ndarray]:
    """All (in, out) index pairs with equal key and ``out_time − window ≤ in_time ≤ out_time``,
    at most ``max_causes`` per out (the latest)."""
    if not len(in_key) or not len(out_key):
        return np.empty(0, np.int64), np.empty(0, np.int64)
    # One sortable int64 per event: the key's rank, then the time from the earliest event.
    t0 = min(in_time.min(), out_time.min()) - window
    span = int(max(in_time.max(), out_time.max()) - t0) + 1
    keys = np.unique(np.concatenate([in_key, out_key]))
    if len(keys) * span >= 2**62:
        raise ValueError("trace spans too long a time to index; split it")
    in_comp = np.searchsorted(keys, in_key) * span + (in_time - t0)
    order = np.argsort(in_comp, kind="stable")
    in_comp = in_comp[order]
    out_base = np.searchsorted(keys, out_key) * span - t0
    hi = np.searchsorted(in_comp, out_base + out_time, side="right")
    lo = np.searchsorted(in_comp, out_base + out_time - window, side="left")
    lo = np.maximum(lo, hi - max_causes)
    counts = hi - lo
    outs = np.repeat(np.arange(len(out_key)), counts)
    offs = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
    ins = order[np.repeat(lo, counts) + offs]
    return ins, outs


def _traced_candidates(
    messages: MessageTable, window: int, max_causes: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Causes of messages from traced senders: receipts at the sender within the window."""
    got = np.flatnonzero(messages.recv != MISSING)
    sent = np.flatnonzero(messages.send != MISSING)
    ins, outs = _window_pairs(
        messages.dst[got],
        messages.recv[got],
        messages.src[sent],
        messages.send[sent],
        window,
        max_causes,
    )
    cause, effect = got[ins], sent[outs]
    keep = cause != effect
    cause, effect = cause[keep], effect[keep]
    return cause, effect, messages.send[effect] - messages.recv[cause]


def _untraced_candidates(
    messages: MessageTable, window: int, max_causes: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Causes of messages from untraced senders B to A: earlier messages A→B (A→B→A only)."""
    empty = np.empty(0, np.int64)
    back = np.flatnonzero((messages.send == MISSING) & (messages.recv != MISSING))
    if not len(back):
        return empty, empty, empty
    fwd = np.flatnonzero(messages.send != MISSING)
    m = int(max(messages.src.max(), messages.dst.max())) + 1
    pair_in = messages.src[fwd].astype(np.int64) * m + messages.dst[fwd]
    pair_out = messages.dst[back].astype(np.int64) * m + messages.src[back]
    flowed = messages.flow[back] >= 0
    # Known connections: the cause is the previous message of the same flow, and it must go the
    # other way; a message opening its flow is spontaneous.
    f_rows = back[flowed]
    prev = _previous_on_flow(messages, f_rows)
    ok = prev >= 0
    ok[ok] = (messages.src[prev[ok]] == messages.dst[f_rows[ok]]) & (
        messages.dst[prev[ok]] == messages.src[f_rows[ok]]
    )
    ok[ok] &= messages.send[prev[ok]] != MISSING
    c1, e1 = prev[ok], f_rows[ok]
    # Unknown connections: every A→B message within the window on A's clock.
    nf = ~flowed
    ins, outs = _window_pairs(
        pair_in, messages.send[fwd], pair_out[nf], messages.recv[back[nf]], window, max_causes
    )
    cause = np.concatenate([c1, fwd[ins]])
    effect = np.concatenate([e1, back[nf][outs]])
    return cause, effect, messages.recv[effect] - messages.send[cause]


def _previous_on_flow(messages: MessageTable, rows: np.ndarray) -> np.ndarray:
    """For each of ``rows``: the message before it on its flow (by the flow's order of
    messages, taken from the time at its traced end), -1 for the first."""
    flowed = np.flatnonzero(messages.flow >= 0)
    # The time a flow's messages are ordered by: the send time, or the receive time when the
    # sender is untraced (both are on the traced peer's clock).
    t = np.where(messages.send[flowed] != MISSING, messages.send[flowed], messages.recv[flowed])
    order = flowed[np.lexsort((t, messages.flow[flowed]))]
    pos = np.empty(len(messages), dtype=np.int64)
    pos[order] = np.arange(len(order))
    k = pos[rows]
    prev = np.where(k > 0, order[np.maximum(k - 1, 0)], -1)
    same = prev >= 0
    same[same] = messages.flow[prev[same]] == messages.flow[rows[same]]
    return np.where(same, prev, -1)
